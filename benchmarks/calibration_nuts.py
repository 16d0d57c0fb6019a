"""SVI and Laplace against NUTS on one replication of the calibration study (200 points, t-SNE's
E law or UMAP's B law): per-point spreads and means, after each approximation's calibrated
variance inflation (probdr.estimators.coupling.CALIBRATED_INFLATION).

    python benchmarks/calibration_nuts.py --seed 0
    python benchmarks/calibration_nuts.py --seed 0 --method umap --draws 600

NUTS runs one chain of 200 warm-up draws and ``--draws`` draws on the exact likelihood (about 8
minutes on two cores for t-SNE's 200). Its own Monte Carlo error is reported beside the
differences: ``nuts_noise_median`` is the median over points of half the distance between the
means of the chain's two halves, in NUTS standard deviations -- the size that the distance
between the chain's mean and the exact posterior mean has (each half has half the effective
draws, so their difference has four times the variance of the whole chain's error).
Results append to ``benchmarks/results/calibration_nuts.jsonl``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from calibration import SETUPS, fit, simulate

from probdr.estimators.coupling import CALIBRATED_INFLATION
from probdr.estimators.inference import isotropic_gaussian
from probdr.infer.draws import procrustes_align
from probdr.infer.map import map_estimate
from probdr.infer.posterior import fit_posterior
from probdr.laws.graph import get_prior
from probdr.models.coupling import graph_coupling_model


def point_sd(d: np.ndarray) -> np.ndarray:
    return np.sqrt(((d - d.mean(0)) ** 2).sum(-1).mean(0) / 2)


RESULTS = Path(__file__).parent / "results" / "calibration_nuts.jsonl"
FAMILY = {"tsne": "cauchy", "umap": "umap"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--method", choices=sorted(SETUPS), default="tsne")
    ap.add_argument("--draws", type=int, default=200, help="NUTS draws after 200 warm-up")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    beta, s = 4, 3.0
    Zt, W, law, kernel = simulate(a.method, a.n, beta, s, a.seed)
    kw = dict(W_X=W, prior_z=get_prior(law), kernel=kernel, n_components=2, repulsion="exact",
              z_prior=isotropic_gaussian(s, a.n, 2), coupling_weight=float(beta),
              dtype=torch.float64)
    Zm = map_estimate(graph_coupling_model, kw, {"Z": Zt.clone()}, n_iter=2000)["Z"]
    nuts = fit_posterior(graph_coupling_model, kw, Zm, method="mcmc", num_chains=1, warmup=200,
                         num_samples=a.draws, max_params=10 ** 6,
                         generator=torch.Generator().manual_seed(a.seed)).samples
    ref, sn = nuts.mean(0), point_sd(nuts)
    half = nuts.shape[0] // 2
    noise = np.linalg.norm(nuts[:half].mean(0) - nuts[half:2 * half].mean(0), axis=1) / 2 / sn
    approx = fit(a.method, Zt, W, kernel, beta, s, a.seed, 1000, 1.0)
    for name, (draws, _) in approx.items():
        c = CALIBRATED_INFLATION[(name, law, FAMILY[a.method])]
        d = procrustes_align(draws, ref)
        m = d.mean(0)
        d = m + np.sqrt(c) * (d - m)
        r = point_sd(d) / sn
        dm = np.linalg.norm(m - ref, axis=1) / sn
        row = dict(method=a.method, approx=name, inflation=c, seed=a.seed, n=a.n,
                   nuts_draws=int(nuts.shape[0]), sd_ratio_median=float(np.median(r)),
                   sd_ratio_iqr=np.percentile(r, [25, 75]).tolist(),
                   sd_within_15pct=float(np.mean(abs(r - 1) < 0.15)),
                   mean_diff_in_sd_median=float(np.median(dm)),
                   mean_diff_in_sd_90pct=float(np.percentile(dm, 90)),
                   nuts_noise_median=float(np.median(noise)))
        print(json.dumps(row))
        with open(a.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
