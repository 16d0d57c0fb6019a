"""SVI and Laplace against NUTS on one replication of the calibration study (t-SNE's E law,
200 points): per-point spreads and means, after each approximation's calibrated variance
inflation (probdr.estimators.coupling.CALIBRATED_INFLATION).

    python benchmarks/calibration_nuts.py --seed 0

NUTS runs one chain of 200 warm-up and 200 draws on the exact likelihood (about 8 minutes on
two cores).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch
from calibration import fit, simulate

from probdr.estimators.coupling import CALIBRATED_INFLATION
from probdr.estimators.inference import isotropic_gaussian
from probdr.infer.draws import procrustes_align
from probdr.infer.map import map_estimate
from probdr.infer.posterior import fit_posterior
from probdr.laws.graph import get_prior
from probdr.models.coupling import graph_coupling_model


def point_sd(d: np.ndarray) -> np.ndarray:
    return np.sqrt(((d - d.mean(0)) ** 2).sum(-1).mean(0) / 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=200)
    a = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    beta, s = 4, 3.0
    Zt, W, law, kernel = simulate("tsne", a.n, beta, s, a.seed)
    kw = dict(W_X=W, prior_z=get_prior(law), kernel=kernel, n_components=2, repulsion="exact",
              z_prior=isotropic_gaussian(s, a.n, 2), coupling_weight=float(beta),
              dtype=torch.float64)
    Zm = map_estimate(graph_coupling_model, kw, {"Z": Zt.clone()}, n_iter=2000)["Z"]
    nuts = fit_posterior(graph_coupling_model, kw, Zm, method="mcmc", num_chains=1, warmup=200,
                         num_samples=200, max_params=10 ** 6,
                         generator=torch.Generator().manual_seed(a.seed)).samples
    ref, sn = nuts.mean(0), point_sd(nuts)
    approx = fit("tsne", Zt, W, kernel, beta, s, a.seed, 1000, 1.0)
    for name, (draws, _) in approx.items():
        c = CALIBRATED_INFLATION[(name, "E", "cauchy")]
        d = procrustes_align(draws, ref)
        m = d.mean(0)
        d = m + np.sqrt(c) * (d - m)
        r = point_sd(d) / sn
        dm = np.linalg.norm(m - ref, axis=1) / sn
        print(json.dumps(dict(approx=name, inflation=c, seed=a.seed,
                              sd_ratio_median=float(np.median(r)),
                              sd_ratio_iqr=np.percentile(r, [25, 75]).tolist(),
                              sd_within_15pct=float(np.mean(abs(r - 1) < 0.15)),
                              mean_diff_in_sd_median=float(np.median(dm)),
                              mean_diff_in_sd_90pct=float(np.percentile(dm, 90)))))


if __name__ == "__main__":
    main()
