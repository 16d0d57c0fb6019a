"""SVI and Laplace against NUTS on one replication of the calibration study (200 points, t-SNE's
E law or UMAP's B law): per-point spreads and means of the public estimator's default
posteriors (``GraphCoupling(..., affinity="precomputed", coupling_weight=4, z_prior=3,
inference="svi" | "laplace")``), each with the variance factor it measured for itself by
simulation (``calibration_``).

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
``--svi`` adds SVI variants, compared without a variance inflation. ``--chain-seed`` runs
another chain on the same data; several ``--load`` pool the kept chains into the reference and
report how far their means are apart (``chains_apart_in_sd_median``: whether the reference is
itself within 0.1 sd). ``--flow STEPS`` adds a normalising-flow guide (two inverse
autoregressive layers over a per-coordinate affine map) fitted by the ELBO, and its
importance-weighted mean with the Pareto k-hat of its weights.

    python benchmarks/calibration_nuts.py --seed 0 --method tsne --draws 1000 --chain-seed 1 \
        --save tsne0_c1.npz
    python benchmarks/calibration_nuts.py --seed 0 --method tsne --load tsne0.npz \
        --load tsne0_c1.npz --load tsne0_c2.npz --flow 6000

Results append to ``benchmarks/results/calibration_nuts.jsonl``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pyro.distributions.transforms as T
import torch
from calibration import SETUPS, map_scale, simulate
from pyro import poutine

import probdr
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


def nuts_chains(a, kw, Zt):
    """The NUTS chains (raw draws) and the MAP they start from: one run (seed ``--chain-seed``),
    or the chains kept by ``--save`` and given to ``--load`` (one or more)."""
    if a.load:  # chains kept by --save with the same --seed, --n and --method
        chains, Zm = [], None
        for path in a.load:
            kept = np.load(path)
            if not np.allclose(kept["Z_true"], Zt.numpy()):
                raise SystemExit(f"{path} was drawn for another --seed, --n or --method.")
            chains.append(kept["nuts"])
            Zm = torch.as_tensor(kept["Z_map"]) if Zm is None else Zm
        return chains, Zm
    Zm = map_estimate(graph_coupling_model, kw, {"Z": Zt.clone()}, n_iter=2000)["Z"]
    seed = a.seed if a.chain_seed is None else a.chain_seed
    nuts = fit_posterior(graph_coupling_model, kw, Zm, method="mcmc", num_chains=1,
                         warmup=200, num_samples=a.draws, max_params=10 ** 6,
                         generator=torch.Generator().manual_seed(seed)).samples
    if a.save is not None:
        np.savez_compressed(a.save, nuts=np.asarray(nuts), Z_true=Zt.detach().numpy(),
                            Z_map=Zm.detach().numpy())
    return [np.asarray(nuts)], Zm


def pooled_reference(chains, start) -> tuple[np.ndarray, dict]:
    """Every chain aligned on its own mean, then all on the pooled aligned mean; the pooled
    draws and how far the chains' means are apart: half the distance between the two halves'
    means of the first chain (``nuts_noise_median``, the size of one chain's error) and, with
    several chains, the distance between each pair's means (``chains_apart_in_sd_median``)."""
    chains = [align_chain(c, start) for c in chains]
    pooled = align_chain(np.concatenate(chains), chains[0].mean(0))
    sn = point_sd(pooled)
    first = chains[0]
    half = first.shape[0] // 2
    noise = np.linalg.norm(first[:half].mean(0) - first[half:2 * half].mean(0), axis=1) / 2 / sn
    out = dict(nuts_chains=len(chains), nuts_draws=int(pooled.shape[0]),
               nuts_noise_median=float(np.median(noise)))
    if len(chains) > 1:
        means = [procrustes_align(c.mean(0)[None], pooled.mean(0), reflection=False)[0]
                 for c in chains]
        apart = [float(np.median(np.linalg.norm(means[i] - means[j], axis=1) / sn))
                 for i in range(len(means)) for j in range(i + 1, len(means))]
        out["chains_apart_in_sd_median"] = apart
    return pooled, out


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


def log_density(kw):
    """The unnormalised log posterior of Z under the model's arguments ``kw``."""
    def logp(Z):
        model = poutine.condition(graph_coupling_model, data={"Z": Z})
        return poutine.trace(model).get_trace(**kw).log_prob_sum()
    return logp


def flow_fit(logp, Zm, sd0: float, steps: int, particles: int = 16, layers: int = 2,
             lr: float = 3e-3, seed: int = 0):
    """A normalising-flow guide of the log density ``logp``, fitted by the ELBO (``--flow``):
    ``layers`` inverse autoregressive layers (Pyro's ``affine_autoregressive``, one hidden layer
    of 2n units, started near the identity) under a diagonal affine map started at the MAP with
    spread ``sd0``.
    Returns a function ``draw(k)`` -> (k draws of Z, their log densities under the guide)."""
    torch.manual_seed(seed)
    n, d = Zm.shape[0], Zm.numel()
    iafs = [T.affine_autoregressive(d, hidden_dims=[d]) for _ in range(layers)]
    for t in iafs:
        for p in t.parameters():
            p.data.mul_(0.01)
    loc = Zm.reshape(-1).detach().clone().requires_grad_(True)
    log_scale = torch.full((d,), float(np.log(sd0))).requires_grad_(True)
    params = [loc, log_scale] + [p for t in iafs for p in t.parameters()]
    opt = torch.optim.Adam(params, lr=lr)
    decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.05 ** (i / steps))
    base = torch.distributions.Normal(torch.zeros(d), torch.ones(d))

    def draw(k):
        x = torch.randn(k, d)
        lq = base.log_prob(x).sum(-1) - log_scale.sum()
        for t in iafs:
            y = t(x)
            lq = lq - t.log_abs_det_jacobian(x, y)
            x = y
        return (loc + log_scale.exp() * x).reshape(k, n, 2), lq

    for _ in range(steps):
        z, lq = draw(particles)
        loss = (lq - torch.stack([logp(zk) for zk in z])).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        decay.step()
    return draw


def flow_rows(kw, Zm, ref, sn, steps: int, draws: int = 2000) -> list[dict]:
    """The flow guide against the chain, raw, and its importance-weighted mean (Pareto-smoothed
    weights p/q of ``draws`` draws, :func:`arviz.psislw`; k-hat above 0.7: unreliable)."""
    import arviz as az

    logp = log_density(kw)
    draw = flow_fit(logp, Zm, 0.5 * float(np.median(sn)), steps)
    with torch.no_grad():
        z, lq = draw(draws)
        lp = torch.stack([logp(zk) for zk in z])
    d = procrustes_align(z.numpy(), Zm.detach().numpy())
    lw, khat = az.psislw((lp - lq).numpy().copy())
    w = np.exp(lw - lw.max())
    w /= w.sum()
    m = procrustes_align((w[:, None, None] * d).sum(0)[None], ref)[0]
    return [dict(approx="flow", flow_steps=steps, **compare(d, ref, sn, 1.0)),
            dict(approx="flow, importance-weighted", flow_steps=steps, pareto_khat=float(khat),
                 importance_ess=float(1 / (w ** 2).sum()),
                 mean_diff_in_sd_median=float(np.median(np.linalg.norm(m - ref, axis=1) / sn)))]


#: the HMC diagnostics a row records
SAMPLER_KEYS = ("gradient_evaluations", "leapfrog_mean", "trajectory_length", "step_size",
                "accept_prob", "divergences", "r_hat_max", "ess_min", "ess_median",
                "r_hat_max_distances", "ess_min_distances")


def default_posteriors(method: str, W, beta: float, s: float, seed: int,
                       names=("svi", "laplace", "hmc")):
    """``(name, draws, factor, sampler)`` of the public estimator's default posteriors ``names``
    on the observed graph ``W``: SVI and Laplace each with the factor it measured for itself,
    the HMC sampler with none; ``sampler``, the HMC sampler's diagnostics (gradients, leapfrog
    steps, R-hat, ESS; empty for the approximations)."""
    law, kw, repulsion = SETUPS[method]
    W = W.to_dense() if W.is_sparse else W
    for name in names:
        est = probdr.GraphCoupling(prior_x=law, prior_z=law, kernel_z=kw["kernel"],
                                   affinity="precomputed", repulsion=repulsion,
                                   coupling_weight=float(beta), z_prior=s, inference=name,
                                   inference_params={} if name == "hmc" else
                                   {"num_samples": 1000},
                                   random_state=seed).fit(W.numpy())
        factor = 1.0 if est.calibration_ is None else est.calibration_.inflation
        diag = est.posterior_.diagnostics if name == "hmc" else {}
        sampler = {k: diag[k] for k in SAMPLER_KEYS if k in diag}
        yield name, np.asarray(est.posterior_samples_, dtype=np.float64), factor, sampler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--method", choices=sorted(FAMILY), default="tsne")
    ap.add_argument("--draws", type=int, default=200, help="NUTS draws after 200 warm-up")
    ap.add_argument("--chain-seed", type=int, default=None,
                    help="the NUTS chain's own seed (default --seed): other chains, same data")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--save", type=Path, default=None, help="keep the raw NUTS draws (.npz)")
    ap.add_argument("--load", type=Path, action="append", default=[],
                    help="compare with a chain kept by --save instead of running NUTS; several "
                         "--load: their pooled draws, and how far the chains' means are apart")
    ap.add_argument("--svi", action="append", default=[], type=json.loads, metavar="JSON",
                    help='an SVI variant to compare too, e.g. \'{"guide": "mvn"}\' (raw spread)')
    ap.add_argument("--weight", type=int, default=4, help="coupling weight (temperature)")
    ap.add_argument("--scale", type=float, default=3.0, help="prior scale of the truth")
    ap.add_argument("--posteriors", nargs="*", default=["svi", "laplace", "hmc"],
                    help="the estimator's default posteriors to compare")
    ap.add_argument("--flow", type=int, default=0, metavar="STEPS",
                    help="also fit a normalising-flow guide for STEPS steps (raw spread, and its "
                         "importance-weighted mean with Pareto k-hat)")
    a = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    beta, s = a.weight, a.scale
    Zt, W, law, kernel = simulate(a.method, a.n, beta, s, a.seed)
    kw = dict(W_X=W, prior_z=get_prior(law), kernel=kernel, n_components=2, repulsion="exact",
              z_prior=isotropic_gaussian(s, a.n, 2), coupling_weight=float(beta))
    chains, Zm = nuts_chains(a, kw, Zt)
    nuts, chain_stats = pooled_reference(chains, Zm.detach().numpy())
    ref, sn = nuts.mean(0), point_sd(nuts)
    common = dict(method=a.method, seed=a.seed, n=a.n, weight=beta, scale=s, **chain_stats, nuts_aligned=True,
                  **mode_offset(Zm.detach().numpy(), ref, sn))
    if law == "B":
        shift = conditional_shift(Zm, W, kernel, beta, s) - Zm.detach().numpy()
        common["conditional_mean_shift_in_sd_median"] = float(
            np.median(np.linalg.norm(shift, axis=1) / sn))
    rows = [dict(approx=name, svi_average=SVI_OPTIONS["average"], factor=factor,
                 **compare(draws, ref, sn, 1.0), **sampler)
            for name, draws, factor, sampler in default_posteriors(a.method, W, beta, s, a.seed,
                                                          a.posteriors)]
    for options in a.svi:
        post = fit_posterior(graph_coupling_model, kw, Zm, method="svi", num_samples=1000,
                             generator=torch.Generator().manual_seed(a.seed), **options)
        rows.append(dict(approx="svi", svi_options=options,
                         **compare(post.samples, ref, sn, 1.0)))
    if a.flow:
        rows += flow_rows(kw, Zm, ref, sn, a.flow)
    for row in rows:
        row = {**common, **row}
        print(json.dumps(row))
        with open(a.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
