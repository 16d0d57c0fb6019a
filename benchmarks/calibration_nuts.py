"""SVI and Laplace against NUTS on one replication of the calibration study (200 points, t-SNE's
E law or UMAP's B law): per-point spreads and means, after each approximation's calibrated
variance inflation (probdr.estimators.coupling.CALIBRATED_INFLATION).

    python benchmarks/calibration_nuts.py --seed 0
    python benchmarks/calibration_nuts.py --seed 0 --method umap --draws 600
    python benchmarks/calibration_nuts.py --seed 0 --method umap --load umap0.npz \
        --svi '{"num_particles": 32, "num_steps": 2000, "lr": 0.05}' \
        --svi '{"guide": "mvn", "num_particles": 8, "num_steps": 2000, "lr": 0.05}'

NUTS runs one chain of 200 warm-up draws and ``--draws`` draws on the exact likelihood (about 8
minutes on two cores for t-SNE's 200). Its own Monte Carlo error is reported beside the
differences: ``nuts_noise_median`` is the median over points of half the distance between the
means of the chain's two halves, in NUTS standard deviations -- the size that the distance
between the chain's mean and the exact posterior mean has (each half has half the effective
draws, so their difference has four times the variance of the whole chain's error).
``--save chain.npz`` keeps the chain; ``--load chain.npz`` compares the approximations with it
again without running NUTS. The chain's draws, which ``fit_posterior`` aligns on the MAP, are
aligned on their own mean (generalised Procrustes, a few sweeps), so that the reference is not
the point the approximations start from. ``map_diff_in_sd_median`` says how far the chain's mean
is from the MAP, ``map_radial_in_sd_median`` how much of it points away from the map's centre.
``--svi`` adds SVI variants, compared without a variance inflation.

Results append to ``benchmarks/results/calibration_nuts.jsonl``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from calibration import fit, map_scale, simulate

from probdr.estimators.coupling import CALIBRATED_INFLATION
from probdr.estimators.inference import isotropic_gaussian
from probdr.infer.draws import procrustes_align
from probdr.infer.map import map_estimate
from probdr.infer.posterior import SVI_OPTIONS, fit_posterior
from probdr.laws.curvature import point_precisions
from probdr.laws.graph import get_prior
from probdr.models.coupling import graph_coupling_model


def point_sd(d: np.ndarray) -> np.ndarray:
    return np.sqrt(((d - d.mean(0)) ** 2).sum(-1).mean(0) / 2)


def align_chain(draws: np.ndarray, start: np.ndarray, sweeps: int = 5) -> np.ndarray:
    """Generalised Procrustes: rotate and shift every draw onto the chain's own aligned mean.

    The likelihood and the isotropic prior are unchanged by a rotation of the whole map, so
    the chain wanders in angle; without this its raw mean is a map smeared around the centre
    (outer points pulled inwards, their spread widened), while the per-point approximations,
    which have no such mode, are compared aligned. Reflections are not a move NUTS makes.
    """
    ref = np.asarray(start, dtype=np.float64)
    for _ in range(sweeps):
        out = procrustes_align(draws, ref, reflection=False)
        ref = out.mean(0)
    return out


RESULTS = Path(__file__).parent / "results" / "calibration_nuts.jsonl"
FAMILY = {"tsne": "cauchy", "umap": "umap"}


def nuts_chain(a, kw, Zt):
    """The NUTS chain (raw draws) and the MAP it starts from: run, or loaded (``--load``)."""
    if a.load is not None:  # a chain kept by --save with the same --seed, --n and --method
        kept = np.load(a.load)
        if not np.allclose(kept["Z_true"], Zt.numpy()):
            raise SystemExit(f"{a.load} was drawn for another --seed, --n or --method.")
        return kept["nuts"], torch.as_tensor(kept["Z_map"])
    Zm = map_estimate(graph_coupling_model, kw, {"Z": Zt.clone()}, n_iter=2000)["Z"]
    nuts = fit_posterior(graph_coupling_model, kw, Zm, method="mcmc", num_chains=1,
                         warmup=200, num_samples=a.draws, max_params=10 ** 6,
                         generator=torch.Generator().manual_seed(a.seed)).samples
    if a.save is not None:
        np.savez_compressed(a.save, nuts=np.asarray(nuts), Z_true=Zt.detach().numpy(),
                            Z_map=Zm.detach().numpy())
    return np.asarray(nuts), Zm


def compare(draws, ref, sn, inflation: float) -> dict:
    """Per-point spreads (after the variance ``inflation``) and means of ``draws`` against
    the aligned chain's (``ref``, ``sn``): ratios, and distances in NUTS standard deviations."""
    d = procrustes_align(draws, ref)
    m = d.mean(0)
    raw = point_sd(d) / sn
    r = np.sqrt(inflation) * raw
    dm = np.linalg.norm(m - ref, axis=1) / sn
    return dict(inflation=inflation, sd_ratio_median=float(np.median(r)),
                sd_ratio_iqr=np.percentile(r, [25, 75]).tolist(),
                sd_within_15pct=float(np.mean(abs(r - 1) < 0.15)),
                sd_ratio_raw_median=float(np.median(raw)),
                mean_diff_in_sd_median=float(np.median(dm)),
                mean_diff_in_sd_90pct=float(np.percentile(dm, 90)))


def mode_offset(Zm: np.ndarray, ref: np.ndarray, sn: np.ndarray) -> dict:
    """How far the posterior mean is from the mode: the MAP aligned on the chain's mean, its
    distance per point (NUTS sds, median), the share of it along the radius from the map's
    centre, and the least-squares scale of the mean map against the MAP's."""
    m = procrustes_align(Zm[None], ref)[0]
    d = ref - m
    u = m - m.mean(0)
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    return dict(map_diff_in_sd_median=float(np.median(np.linalg.norm(d, axis=1) / sn)),
                map_radial_in_sd_median=float(np.median((d * u).sum(1) / sn)),
                mean_map_scale=map_scale(m, ref))


def conditional_shift(Zm, W, kernel, beta, s, draws=4000, seed=1) -> float:
    """The B law only: each point's posterior given the others at the MAP, its mean by
    importance sampling from its Laplace Gaussian (exact 2-D conditional: the point's row and
    column of the observed graph, the prior); the median distance of these means from the MAP
    in NUTS sds is reported by the caller. Small: the posterior mean's offset from the mode is
    not a point's own skew but collective."""
    n = Zm.shape[0]
    W = W.to_dense() if W.is_sparse else W
    P = point_precisions(Zm, W, "B", kernel, coupling_weight=beta, prior_precision=s ** -2)
    L = torch.linalg.cholesky(torch.linalg.inv(P))
    eps = torch.randn(n, draws, 2, generator=torch.Generator().manual_seed(seed))
    zs = Zm[:, None, :] + torch.einsum("nij,nsj->nsi", L, eps)
    means = torch.empty(n, 2)
    for i in range(n):
        lk = kernel.log_k(((zs[i][:, None, :] - Zm[None]) ** 2).sum(-1))  # (draws, n)
        sp = torch.nn.functional.softplus(lk)  # w = K / (1 + K): log w = lk - sp
        ll = (W[i] + W[:, i]) * (lk - sp) - (2 - W[i] - W[:, i]) * sp
        ll[:, i] = 0
        logp = beta * ll.sum(1) - (zs[i] ** 2).sum(-1) / (2 * s * s)
        wts = torch.softmax(logp + 0.5 * (eps[i] ** 2).sum(-1), 0)
        means[i] = (wts[:, None] * zs[i]).sum(0)
    return means.numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--method", choices=sorted(FAMILY), default="tsne")
    ap.add_argument("--draws", type=int, default=200, help="NUTS draws after 200 warm-up")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--save", type=Path, default=None, help="keep the raw NUTS draws (.npz)")
    ap.add_argument("--load", type=Path, default=None,
                    help="compare with a chain kept by --save instead of running NUTS")
    ap.add_argument("--svi", action="append", default=[], type=json.loads, metavar="JSON",
                    help='an SVI variant to compare too, e.g. \'{"guide": "mvn"}\' (raw spread)')
    a = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    beta, s = 4, 3.0
    Zt, W, law, kernel = simulate(a.method, a.n, beta, s, a.seed)
    kw = dict(W_X=W, prior_z=get_prior(law), kernel=kernel, n_components=2, repulsion="exact",
              z_prior=isotropic_gaussian(s, a.n, 2), coupling_weight=float(beta),
              dtype=torch.float64)
    nuts, Zm = nuts_chain(a, kw, Zt)
    nuts = align_chain(nuts, Zm.detach().numpy())
    ref, sn = nuts.mean(0), point_sd(nuts)
    half = nuts.shape[0] // 2
    noise = np.linalg.norm(nuts[:half].mean(0) - nuts[half:2 * half].mean(0), axis=1) / 2 / sn
    common = dict(method=a.method, seed=a.seed, n=a.n, nuts_draws=int(nuts.shape[0]),
                  nuts_noise_median=float(np.median(noise)), nuts_aligned=True,
                  **mode_offset(Zm.detach().numpy(), ref, sn))
    if law == "B":
        shift = conditional_shift(Zm, W, kernel, beta, s) - Zm.detach().numpy()
        common["conditional_mean_shift_in_sd_median"] = float(
            np.median(np.linalg.norm(shift, axis=1) / sn))
    rows = [dict(approx=name, svi_average=SVI_OPTIONS["average"],
                 **compare(draws, ref, sn, CALIBRATED_INFLATION[(name, law, FAMILY[a.method])]))
            for name, (draws, _) in fit(a.method, Zt, W, kernel, beta, s, a.seed, 1000,
                                         1.0).items()]
    for options in a.svi:
        post = fit_posterior(graph_coupling_model, kw, Zm, method="svi", num_samples=1000,
                             generator=torch.Generator().manual_seed(a.seed), **options)
        rows.append(dict(approx="svi", svi_options=options,
                         **compare(post.samples, ref, sn, 1.0)))
    for row in rows:
        row = {**common, **row}
        print(json.dumps(row))
        with open(a.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
