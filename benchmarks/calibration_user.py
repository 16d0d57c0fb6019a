"""Calibration of the posterior the way a user meets it: the public estimator, its default start
and schedule, on data simulated from the model at several temperatures and prior scales.

Each replication draws true positions Z* ~ N(0, s^2 I) (n points in 2-D) and ``m`` graphs from
t-SNE's latent law given Z* (the E law with the Cauchy kernel; ``calibration.simulate``); their
average is the observed affinity. The fit is the public estimator, as a user writes it for this
model::

    GraphCoupling(prior_x="E", prior_z="E", kernel_z="student", affinity="precomputed",
                  coupling_weight=m, z_prior=s, inference=..., random_state=seed).fit(W)

whose exact posterior is p(Z | the m graphs). Reported per setting and posterior: the coverage
of the 50 % and 90 % per-point regions (the truth aligned to the posterior mean by Procrustes;
``calibration.scores``), the median distance to the aligned truth of the posterior mean, of the
schedule's MAP (``map_embedding_``) and of the mode the posterior is centred on
(``mode_embedding_``), in units of the median posterior sd, and the fit's seconds.

    python benchmarks/calibration_user.py
    python benchmarks/calibration_user.py --settings 4,3 1,5 --reps 5 --approx laplace
    python benchmarks/calibration_user.py --law umap --settings 4,3
    python benchmarks/calibration_user.py --params '{"inference_params": {"converge": false}}'

``--law umap`` simulates and fits a custom (B, B) coupling with UMAP's curve
(``prior_x="B", prior_z="B", kernel_z="umap_odds"``) instead.

Results append to ``benchmarks/results/calibration_user.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
from calibration import scores, simulate

import probdr
from probdr.infer.draws import procrustes_align

RESULTS = Path(__file__).parent / "results" / "calibration_user.jsonl"


#: the laws of the simulation and of the fit: t-SNE's (E law, Cauchy kernel) and a custom (B, B)
#: coupling with UMAP's curve
LAWS = {"tsne": dict(prior_x="E", prior_z="E", kernel_z="student"),
        "umap": dict(prior_x="B", prior_z="B", kernel_z="umap_odds")}


def one(law: str, m: int, s: float, n: int, seed: int, approx: str, params: dict) -> dict:
    Zt, W, _, _ = simulate(law, n, m, s, seed)
    est = probdr.GraphCoupling(**LAWS[law], affinity="precomputed", coupling_weight=float(m),
                               z_prior=s, inference=approx, random_state=seed, **params)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(W.numpy())
    seconds = time.perf_counter() - t0
    draws = np.asarray(est.posterior_samples_, dtype=np.float64)
    sc = scores(draws, Zt.numpy())
    mean = draws.mean(0)
    sd = np.sqrt(((draws - mean) ** 2).sum(-1).mean(0) / 2)
    truth = procrustes_align(Zt.numpy(), mean)
    unit = float(np.median(sd))

    def off(Z):  # the median distance of an embedding, aligned, to the truth, in sds
        Z = procrustes_align(np.asarray(Z, dtype=np.float64), truth)
        return float(np.median(np.linalg.norm(Z - truth, axis=1))) / unit

    return {"cover50": sc["cover50"], "cover90": sc["cover90"], "mean_off_sd": off(mean),
            "map_off_sd": off(est.map_embedding_), "mode_off_sd": off(est.mode_embedding_),
            "sd": unit, "seconds": seconds, "converged": est.map_converged_}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", nargs="+", default=["4,3", "1,5", "10,2"],
                    help="temperature m and prior scale s, as m,s")
    ap.add_argument("--law", choices=sorted(LAWS), default="tsne")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--approx", nargs="+", choices=("svi", "laplace"), default=["laplace", "svi"])
    ap.add_argument("--params", default="{}", help="more estimator parameters, as JSON")
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    params = json.loads(a.params)
    for setting in a.settings:
        m, s = setting.split(",")
        for approx in a.approx:
            rows = [one(a.law, int(m), float(s), a.n, seed, approx, params)
                    for seed in range(a.reps)]
            out = {"law": a.law, "m": int(m), "s": float(s), "n": a.n, "approx": approx, "reps": a.reps,
                   "params": params, "probdr": probdr.__version__}
            for key in ("cover50", "cover90", "mean_off_sd", "map_off_sd", "mode_off_sd", "sd",
                        "seconds"):
                out[key] = round(float(np.mean([r[key] for r in rows])), 3)
            out["converged"] = [r["converged"] for r in rows]
            print(json.dumps(out), flush=True)
            with open(a.out, "a") as f:
                f.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
