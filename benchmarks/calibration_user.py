"""Calibration of the posterior the way a user meets it: the public estimator, its default start
and schedule, on data simulated from the model at several temperatures and prior scales.

Each replication draws true positions Z* ~ N(0, s^2 I) (n points in 2-D) and the observed graph
of ``m`` graphs of the model's latent law given Z* (their average,
``probdr.laws.simulate.simulate_observed_graph``). The fit is the public estimator, as a user
writes it for this model, e.g. for t-SNE's law::

    GraphCoupling(prior_x="E", prior_z="E", kernel_z="student", affinity="precomputed",
                  coupling_weight=m, z_prior=s, inference=..., random_state=seed).fit(W)

whose exact posterior is p(Z | the m graphs). Its posterior carries the variance factor that
``inference_params={"calibrate": ...}`` asks for (default: the documented shortcut for t-SNE's
and UMAP's laws, a factor measured for the fit by simulation for the others; ``calibration_``). Reported per setting and posterior: the
coverage of the 50 % and 90 % per-point regions (the truth aligned to the posterior mean by
Procrustes; ``calibration.scores``), the SBC chi-square p-value of the first five points' ranks
pooled over replications, the coverage of the draws' own regions (``cover50_own``, ``cover90_own``: each point's region
holds that share of its draws; exact for a posterior of any shape, where the Gaussian ellipse is
exact only for a Gaussian one), the median distance to the aligned truth of the posterior mean, of
the schedule's MAP (``map_embedding_``) and of the mode the posterior is centred on
(``mode_embedding_``), in units of the median posterior sd, the measured factor and the fit's
seconds.

    python benchmarks/calibration_user.py --law tsne umap dd tsne-dof0.5 --weights 2 8 20 \
        --scales 3 8 --reps 5 --approx laplace --params '{"inference_params": {"calibrate": true}}'
    python benchmarks/calibration_user.py --law tsne --weights 4 --scales 3 --reps 5 --approx svi
    python benchmarks/calibration_user.py --params '{"inference_params": {"calibrate": false}}'
    python benchmarks/calibration_user.py --law tsne dd --weights 2 8 20 --scales 3 --reps 2 \
        --approx hmc

The laws: ``tsne`` (E law, Cauchy kernel), ``umap`` (a custom (B, B) coupling with UMAP's curve),
``dd`` (a (D, D) coupling with the Cauchy kernel), ``tsne-dof0.5`` (E law, Student kernel with
0.5 degrees of freedom).

Results append to ``benchmarks/results/calibration_user.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.stats as st
import torch
from calibration import scores
from ot_common import code_commit

import probdr
from probdr.infer.draws import procrustes_align
from probdr.kernels import get_kernel
from probdr.laws.simulate import simulate_observed_graph

RESULTS = Path(__file__).parent / "results" / "calibration_user.jsonl"


#: the laws of the simulation and of the fit
LAWS = {"tsne": dict(prior_x="E", prior_z="E", kernel_z="student"),
        "umap": dict(prior_x="B", prior_z="B", kernel_z="umap_odds"),
        "dd": dict(prior_x="D", prior_z="D", kernel_z="student"),
        "tsne-dof0.5": dict(prior_x="E", prior_z="E", kernel_z="student",
                            kernel_params={"dof": 0.5})}


def simulate(law: str, n: int, m: float, s: float, seed: int):
    """True positions Z* ~ N(0, s^2) and the observed graph (dense) of m graphs given Z*."""
    spec = LAWS[law]
    g = torch.Generator().manual_seed(seed)
    Zt = s * torch.randn(n, 2, dtype=torch.float64, generator=g)
    kernel = get_kernel(spec["kernel_z"], **spec.get("kernel_params", {}))
    W = simulate_observed_graph(spec["prior_z"], Zt, kernel, float(m), g)
    return Zt.numpy(), W.to_dense().numpy()


def one(law: str, m: float, s: float, n: int, seed: int, approx: str, params: dict) -> dict:
    Zt, W = simulate(law, n, m, s, seed)
    est = probdr.GraphCoupling(**LAWS[law], affinity="precomputed", coupling_weight=float(m),
                               z_prior=s, inference=approx, random_state=seed, **params)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(W)
    seconds = time.perf_counter() - t0
    draws = np.asarray(est.posterior_samples_, dtype=np.float64)
    sc = scores(draws, Zt)
    mean = draws.mean(0)
    sd = np.sqrt(((draws - mean) ** 2).sum(-1).mean(0) / 2)
    truth = procrustes_align(Zt, mean)
    unit = float(np.median(sd))

    def off(Z):  # the median distance of an embedding, aligned, to the truth, in sds
        Z = procrustes_align(np.asarray(Z, dtype=np.float64), truth)
        return float(np.median(np.linalg.norm(Z - truth, axis=1))) / unit

    cal = est.calibration_
    diag = est.posterior_.diagnostics
    return {"r_hat_max": diag.get("r_hat_max"), "ess_min": diag.get("ess_min"),
            "cover50": sc["cover50"], "cover90": sc["cover90"],
            "cover50_own": sc["cover50_own"], "cover90_own": sc["cover90_own"],
            "mean_off_sd": off(mean),
            "map_off_sd": off(est.map_embedding_), "mode_off_sd": off(est.mode_embedding_),
            "sd": unit, "seconds": seconds, "converged": est.map_converged_,
            "factor": None if cal is None else cal.inflation,
            "ranks_points": sc["ranks_points"], "draws": draws.shape[0]}


def sbc_p(rows: list[dict]) -> float:
    """The chi-square test of uniformity of the first points' ranks pooled over replications
    (ten bins)."""
    ranks = np.concatenate([r["ranks_points"] for r in rows])
    counts = np.bincount((ranks * 10) // (rows[0]["draws"] + 1), minlength=10)
    return float(st.chisquare(counts).pvalue)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--law", nargs="+", choices=sorted(LAWS), default=["tsne"])
    ap.add_argument("--weights", nargs="+", type=float, default=[2.0, 8.0, 20.0],
                    help="coupling weights (temperatures) m")
    ap.add_argument("--scales", nargs="+", type=float, default=[3.0, 8.0],
                    help="prior scales s")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--approx", nargs="+", choices=("svi", "laplace", "hmc"),
                    default=["laplace"])
    ap.add_argument("--params", default="{}", help="more estimator parameters, as JSON")
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    params = json.loads(a.params)
    for law in a.law:
        for m in a.weights:
            for s in a.scales:
                for approx in a.approx:
                    rows = [one(law, m, s, a.n, seed, approx, params) for seed in range(a.reps)]
                    write(a, law, m, s, approx, params, rows)


def write(a, law, m, s, approx, params, rows) -> None:
    out = {"law": law, "m": m, "s": s, "n": a.n, "approx": approx, "reps": a.reps,
           "params": params, "probdr": probdr.__version__, "commit": code_commit()}
    for key in ("cover50", "cover90", "cover50_own", "cover90_own", "mean_off_sd", "map_off_sd",
                "mode_off_sd", "sd", "seconds"):
        out[key] = round(float(np.mean([r[key] for r in rows])), 3)
    factors = [r["factor"] for r in rows if r["factor"] is not None]
    out["factor_median"] = round(float(np.median(factors)), 2) if factors else None
    out["sbc_p"] = round(sbc_p(rows), 4)
    out["cover90_range"] = [round(min(r["cover90"] for r in rows), 3),
                            round(max(r["cover90"] for r in rows), 3)]
    out["converged"] = [r["converged"] for r in rows]
    if rows[0]["r_hat_max"] is not None:  # a sampler's chains
        out["r_hat_max"] = [round(float(r["r_hat_max"]), 3) for r in rows]
        out["ess_min"] = [round(float(r["ess_min"]), 1) for r in rows]
    print(json.dumps(out), flush=True)
    with open(a.out, "a") as f:
        f.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
