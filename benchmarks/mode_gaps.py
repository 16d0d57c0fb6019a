"""How far below the truth's basin the posterior's mode search ends, by where its starts came
from: the estimator's schedule and its random restarts, and the starts read off the observed
graph (``probdr.estimators.starts``).

Each replication draws 200 true positions and the observed graph of the law
(``calibration_user.simulate``), fits ``GraphCoupling(..., inference="laplace",
inference_params={"restarts": 4, "calibrate": False})`` and searches the mode from the truth
itself (``probdr.infer.mode.converge_mode``). Reported: the truth's mode's log density minus the
schedule's mode's (``gap_schedule``: Laplace's centre with ``restarts=0``), minus the best of the
schedule's and the graph's starts (``gap_no_random``: the approximations' default given a
graph), minus the best of the schedule's and the random restarts' modes (``gap_without``) and
minus the best of all (``gap``: HMC's default), in nats; negative where a start found a mode
above the truth's.

    python benchmarks/mode_gaps.py --law tsne dd tsne-dof0.5 --weights 2 8 20 --scales 3 8 \\
        --reps 2
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from calibration_user import LAWS, simulate

import probdr
from probdr.infer.mode import converge_mode, log_density

RESULTS = Path(__file__).parent / "results" / "mode_gaps.jsonl"


def one(law: str, m: float, s: float, seed: int, n: int) -> dict:
    Zt, W = simulate(law, n, m, s, seed)
    est = probdr.GraphCoupling(**LAWS[law], affinity="precomputed", coupling_weight=m,
                               z_prior=s, inference="laplace", random_state=seed,
                               inference_params={"restarts": 4, "calibrate": False})
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(W)
    seconds = time.perf_counter() - t0
    model = est._coupling.model(whole_epoch=True, epoch_steps=1)
    kw = {**est.model_kwargs_, "kernel": est.kernel_}
    kw["W_X"] = kw["W_X"].double()
    truth = log_density(model, kw, converge_mode(model, kw, torch.as_tensor(Zt), warn=False).Z)
    rec = est.mode_restarts_
    density = np.asarray(rec["log_density"])
    without = max(d for d, kind in zip(density, rec["starts"], strict=True) if kind != "graph")
    no_random = max(d for d, kind in zip(density, rec["starts"], strict=True) if kind != "random")
    return {"law": law, "m": m, "s": s, "seed": seed, "n": n,
            "gap_schedule": round(float(truth - density[0]), 1),
            "gap_no_random": round(float(truth - no_random), 1),
            "gap_without": round(float(truth - without), 1),
            "gap": round(float(truth - density.max()), 1),
            "chosen": rec["starts"][rec["chosen"]], "seconds": round(seconds, 1),
            "probdr": probdr.__version__}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--law", nargs="+", choices=sorted(LAWS), default=["tsne"])
    ap.add_argument("--weights", nargs="+", type=float, default=[2.0, 8.0, 20.0])
    ap.add_argument("--scales", nargs="+", type=float, default=[3.0, 8.0])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    for law in a.law:
        for m in a.weights:
            for s in a.scales:
                for seed in range(a.reps):
                    row = one(law, m, s, seed, a.n)
                    print(json.dumps(row), flush=True)
                    with open(a.out, "a") as f:
                        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
