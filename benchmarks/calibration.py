"""Calibration of probdr's posteriors by simulation, where the truth is known.

Each replication draws true positions Z* from the model's own prior (isotropic Gaussian of scale
``s``), then ``beta`` graphs from the latent law given Z* (t-SNE: the E law with the Cauchy kernel;
UMAP: the B law with UMAP's curve). Their average, observed at coupling weight ``beta``, has
exactly the posterior p(Z | the beta graphs) with that prior. The MAP is found by L-BFGS started
at Z* (the study measures the width of the posterior around its mode, not the optimiser), then:

* ``svi``: the default SVI (mean-field Gaussian, :func:`probdr.infer.posterior.fit_posterior`);
* ``laplace``: the per-point Laplace approximation (:mod:`probdr.infer.laplace`).

Coverage: Z* is aligned to the posterior mean by orthogonal Procrustes (the likelihood cannot
see rotations and translations), and each point's true position is inside its ``level`` region
when its Mahalanobis distance under the draws' per-point mean and 2x2 covariance is below the
chi-square(2) quantile. SBC: each true coordinate's rank among the draws' coordinates, in 10 bins,
pooled over all points (whose ranks within a replication are correlated), and, for the test of
uniformity, of the first five points only (the points are exchangeable and independent across
replications: one rank per coordinate and replication). Every score is also computed with the
draws' spread around their mean multiplied by sqrt(c) for the variance inflations c of
``INFLATIONS``.

    python benchmarks/calibration.py --method tsne --n 200 --reps 100
    python benchmarks/calibration.py --method tsne --n 200 --reps 100 --approx laplace
    python benchmarks/calibration.py --method tsne --n 10000 --reps 5
    python benchmarks/calibration.py --method umap --n 10000 --reps 5 --scale 21.2
    python benchmarks/calibration.py --method umap-surrogate --n 200 --reps 20

``umap-surrogate`` draws the truth from the exact B law and fits the negative-sampling surrogate
that UMAP's default fits optimise (MAP by Adam, SVI of the surrogate, Laplace of its
expectation). Its maps are smaller than the truth (weaker repulsion), so the truth is also
scaled onto the posterior mean (``truth_scale``) before its coverage is scored.

At 10,000 points UMAP's study takes the prior's scale that keeps the points' density of the
200-point study (3 sqrt(10000 / 200) = 21.2): at scale 3 the B law's heavy-tailed odds give each
point about 720 edges a graph (37 at 21.2, 13 at 200 points and scale 3).

Results append to ``benchmarks/results/calibration.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import scipy.stats as st
import torch

from probdr.estimators.inference import isotropic_gaussian
from probdr.infer.draws import procrustes_align
from probdr.infer.laplace import laplace_draws
from probdr.infer.map import map_estimate
from probdr.infer.posterior import SVI_OPTIONS, fit_posterior
from probdr.kernels import get_kernel
from probdr.laws.curvature import point_precisions
from probdr.laws.graph import get_prior
from probdr.laws.weights import KernelWeights
from probdr.models.coupling import graph_coupling_model

RESULTS = Path(__file__).parent / "results" / "calibration.jsonl"
#: above this size the graphs are drawn sparse, the normalisers come from grids
#: (``repulsion="fft"``: the E law's FFT-interpolated as t-SNE's fits do, the B law's from the
#: points' own field, its nearest pairs exact) and the MAP is found by Adam
FFT_FROM = 2000
SETUPS = {  # latent law, kernel, repulsion of the fit
    "tsne": ("E", dict(kernel="student"), "exact"),
    "umap": ("B", dict(kernel="umap_odds"), "exact"),
    # the truth from the exact B law, the fit on the negative-sampling surrogate that UMAP's
    # default fits use (5 negatives of weight 1 per used edge): are the factors valid there?
    "umap-surrogate": ("B", dict(kernel="umap_odds"), "negative_sampling"),
}
#: the surrogate's negatives per used edge and their weight (UMAP's defaults)
SURROGATE = (5, 1.0)
SURROGATE_FIT = "negative_sampling"


def _e_law_average(Zt, kernel, beta: int, g: torch.Generator) -> torch.Tensor:
    """The average of ``beta`` draws of the E law (n edges each, cells in proportion to
    k(|z_i - z_j|^2)), sparse: the sum of beta multinomials is one of beta * n draws -- rows in
    proportion to their kernel sums, then columns within the row, in blocks of rows."""
    n = Zt.shape[0]
    b = max(1, 2_000_000 // n)
    rowsum = torch.cat([_row_kernel(Zt, s, min(n, s + b), kernel).sum(1) for s in range(0, n, b)])
    rows = torch.multinomial(rowsum / rowsum.sum(), beta * n, replacement=True, generator=g)
    count = torch.bincount(rows, minlength=n)
    R, C = [], []
    for s in range(0, n, b):
        K = _row_kernel(Zt, s, min(n, s + b), kernel)
        c = count[s:s + b]
        if int(c.max()) == 0:
            continue
        cols = torch.multinomial(K, int(c.max()), replacement=True, generator=g)
        keep = torch.arange(cols.shape[1])[None] < c[:, None]
        R.append((torch.arange(s, s + K.shape[0])[:, None].expand_as(cols))[keep])
        C.append(cols[keep])
    R, C = torch.cat(R), torch.cat(C)
    W = torch.sparse_coo_tensor(torch.stack([R, C]), torch.full((R.numel(),), 1.0 / beta,
                                dtype=torch.float64), (n, n)).coalesce()
    return W


def _b_law_average(Zt, kernel, beta: int, g: torch.Generator) -> torch.Tensor:
    """The average of ``beta`` draws of the B law (each ordered pair i != j an edge with
    probability k/(1 + k)), sparse, drawn in blocks of rows."""
    n = Zt.shape[0]
    b = max(1, 2_000_000 // n)
    R, C, V = [], [], []
    for s in range(0, n, b):
        p = torch.sigmoid(_row_log_kernel(Zt, s, min(n, s + b), kernel))
        count = torch.zeros_like(p)
        for _ in range(beta):
            count += torch.bernoulli(p, generator=g)
        r, c = count.nonzero(as_tuple=True)
        R.append(r + s), C.append(c), V.append(count[r, c] / beta)
    return torch.sparse_coo_tensor(torch.stack([torch.cat(R), torch.cat(C)]), torch.cat(V),
                                   (n, n), check_invariants=True).coalesce()


def _row_log_kernel(Zt, s: int, e: int, kernel) -> torch.Tensor:
    """:math:`\\log k(\\|z_i - z_j\\|^2)` of the rows ``s:e``, ``-inf`` on the diagonal."""
    d2 = torch.cdist(Zt[s:e], Zt).square()
    lk = kernel.log_k(d2)
    lk[torch.arange(e - s), torch.arange(s, e)] = float("-inf")
    return lk


def _row_kernel(Zt, s: int, e: int, kernel) -> torch.Tensor:
    return torch.exp(_row_log_kernel(Zt, s, e, kernel))


def simulate(method: str, n: int, beta: int, s: float, seed: int):
    """True positions, the observed average graph (dense for the B law, sparse for E), the
    law's name and the kernel."""
    law_name, kw, _ = SETUPS[method]
    kernel = get_kernel(kw["kernel"])
    g = torch.Generator().manual_seed(seed)
    Zt = s * torch.randn(n, 2, dtype=torch.float64, generator=g)
    if n > FFT_FROM:  # no dense (n, n) draws
        average = _e_law_average if law_name == "E" else _b_law_average
        return Zt, average(Zt, kernel, beta, g), law_name, kernel
    torch.manual_seed(seed)
    law = get_prior(law_name).posterior(KernelWeights(Zt, kernel, normaliser="exact"))
    W = law.sample((beta,)).to(torch.float64)
    W = (W.to_dense() if W.is_sparse else W).mean(0)
    return Zt, W, law_name, kernel


def fit(method, Zt, W, kernel, beta, s, seed, svi_steps, inflation,
        approx=("svi", "laplace")):
    law_name, _, repulsion = SETUPS[method]
    n = Zt.shape[0]
    large = n > FFT_FROM
    kwargs = dict(W_X=W, prior_z=get_prior(law_name), kernel=kernel, n_components=2,
                  repulsion="fft" if large else repulsion, z_prior=isotropic_gaussian(s, n, 2),
                  coupling_weight=float(beta))
    surrogate = repulsion == SURROGATE_FIT
    if surrogate:
        kwargs.update(negative_samples=SURROGATE[0], negative_weight=SURROGATE[1])
    if large or surrogate:  # a stochastic objective: Adam
        Zm = map_estimate(graph_coupling_model, kwargs, {"Z": Zt.clone()}, optimizer="adam",
                          n_iter=1000 if large else 3000, lr=0.05 if large else 0.02)["Z"]
    else:
        Zm = map_estimate(graph_coupling_model, kwargs, {"Z": Zt.clone()}, n_iter=2000)["Z"]
    out = {}
    t = time.perf_counter()
    if "svi" in approx:
        post = fit_posterior(graph_coupling_model, kwargs, Zm, method="svi",
                             generator=torch.Generator().manual_seed(seed),
                             num_steps=svi_steps, num_samples=400)
        out["svi"] = (post.samples, time.perf_counter() - t)
    if "laplace" not in approx:
        return out
    t = time.perf_counter()
    P = point_precisions(Zm, W, law_name, kernel, coupling_weight=beta, prior_precision=s ** -2,
                         negative_sampling=SURROGATE if surrogate else None)
    d = laplace_draws(Zm, P, 400, inflation=inflation,
                      generator=torch.Generator().manual_seed(seed)).numpy()
    out["laplace"] = (procrustes_align(d, Zm.numpy()), time.perf_counter() - t)
    return out


INFLATIONS = (1.0, 1.5, 2.0, 2.2, 2.5, 3.0, 4.0, 6.0, 7.0, 8.0, 10.0, 12.0)
POINTS = 5


def map_scale(A: np.ndarray, B: np.ndarray) -> float:
    """The least-squares factor k of ``k (A - mean A)`` onto ``B - mean B`` (maps aligned)."""
    a, b = A - A.mean(0), B - B.mean(0)
    return float((a * b).sum() / (a * a).sum())


def scores(draws: np.ndarray, Zt: np.ndarray, levels=(0.5, 0.9), scaled: bool = False) -> dict:
    """Coverage of the per-point regions and SBC ranks of the aligned truth, for the draws as
    they are and with their spread around the mean multiplied by sqrt(c), c in INFLATIONS
    (variance inflation). ``scaled``: the truth is also scaled onto the mean (least squares),
    for a fit of another likelihood whose maps have another size (``truth_scale``)."""
    mean = draws.mean(0)
    truth = procrustes_align(Zt, mean)
    k = 1.0
    if scaled:
        k = map_scale(truth, mean)
        truth = mean.mean(0) + k * (truth - truth.mean(0))
    dev = draws - mean
    cov = np.einsum("sna,snb->nab", dev, dev) / (draws.shape[0] - 1)
    r = truth - mean
    prec = np.linalg.inv(cov)
    m2 = np.einsum("na,nab,nb->n", r, prec, r)
    out = {"sd": float(np.sqrt(np.trace(cov, axis1=1, axis2=2) / 2).mean()), "truth_scale": k}
    # the draws' own regions: a point's level-lv region holds the share lv of its draws (its
    # draws' own Mahalanobis quantile), exact under the posterior whatever its shape, where the
    # Gaussian ellipse's chi-square radius is exact only for a Gaussian posterior
    own = np.einsum("sna,nab,snb->sn", dev, prec, dev)
    for lv in levels:
        out[f"cover{int(100 * lv)}_own"] = float(np.mean(m2 <= np.quantile(own, lv, axis=0)))
    for c in INFLATIONS:
        key = "" if c == 1.0 else f"@{c:g}"
        for lv in levels:
            out[f"cover{int(100 * lv)}{key}"] = float(np.mean(m2 / c <= st.chi2.ppf(lv, 2)))
        # rank of each true coordinate among the (inflated) draws, in 10 bins
        ranks = (mean + np.sqrt(c) * dev < truth[None]).sum(0)  # (n, 2)
        out[f"ranks{key}"] = np.bincount((ranks.ravel() * 10) // (draws.shape[0] + 1),
                                         minlength=10).tolist()
        # the points are exchangeable (i.i.d. under the prior): the first POINTS points'
        # ranks, one set per replication, are independent across replications (the SBC test)
        out[f"ranks_points{key}"] = ranks[:POINTS].ravel().tolist()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--method", choices=sorted(SETUPS), default="tsne")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--beta", type=int, default=4, help="graphs per replication = temperature")
    ap.add_argument("--scale", type=float, default=3.0, help="prior scale s of Z*")
    ap.add_argument("--svi-steps", type=int, default=1000)
    ap.add_argument("--inflation", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--approx", nargs="+", choices=("svi", "laplace"), default=["svi", "laplace"],
                    help="the posteriors to fit and score")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    for rep in range(a.reps):
        seed = a.seed + rep
        Zt, W, _, kernel = simulate(a.method, a.n, a.beta, a.scale, seed)
        res = fit(a.method, Zt, W, kernel, a.beta, a.scale, seed, a.svi_steps, a.inflation,
                  a.approx)
        for name, (draws, secs) in res.items():
            row = dict(method=a.method, n=a.n, beta=a.beta, scale=a.scale, rep=rep, seed=seed,
                       approx=name, seconds=round(secs, 2), inflation=a.inflation,
                       svi_steps=a.svi_steps, svi_average=SVI_OPTIONS["average"],
                       **scores(draws, Zt.numpy(), scaled=SETUPS[a.method][2] == SURROGATE_FIT))
            with open(a.out, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(name, rep, row["cover50"], row["cover90"], round(row["sd"], 3), flush=True)


if __name__ == "__main__":
    main()
