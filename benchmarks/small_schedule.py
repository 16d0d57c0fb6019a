"""UMAP's schedule on small data: probdr's epochs and optimiser steps per epoch beside umap-learn,
each fit end to end (neighbours, graph, initialisation, optimisation) as a user runs it.

On small data a fit's time goes with its optimiser steps, each with a fixed cost, rather than
with the pairs it updates; this measures which schedule (``eEsS``: E epochs of S steps, as in
``umap_epoch_steps.py``; ``default``: the size's default) keeps umap-learn's quality in the
least time:

    python benchmarks/small_schedule.py --data breast_cancer pbmc68k digits swissroll mnist5k \
        --variants e500s1 e250s1 e200s1 e100s2 e100s3 --record

Per data set, one process (2 threads): an untimed fit of each method on 300 points first (imports
and umap-learn's just-in-time compilation excluded, as ``suite.py`` warms), then, for each seed,
each variant and umap-learn (``n_jobs=-1``, no seed: its parallel epochs) in turn. Quality as
``suite.py`` scores it (ZADU's trustworthiness@15 on at most 5,000 points, leave-one-out 5-NN
accuracy). ``--record`` appends the results to ``benchmarks/results/small_schedule.jsonl``, from
which ``suite.py`` writes the table of docs/benchmarks.md (the mean over the seeds of each
variant's latest run). Look at ``uptime`` first: time only below a load of 1.5.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suite  # noqa: E402
from umap_epoch_steps import schedule  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "small_schedule.jsonl"


def fit(variant: str, X, seed: int):
    if variant == "umap-learn":
        import umap

        return umap.UMAP(n_jobs=-1).fit_transform(X)
    import probdr

    return probdr.UMAP(random_state=seed, **schedule(variant)).fit_transform(X)


def run_data(data: str, variants: list[str], seeds: list[int], record: bool) -> None:
    X, y = suite.load(data)
    warm = np.sort(np.random.default_rng(0).choice(len(X), min(len(X), 300), replace=False))
    for v in ("default", "umap-learn"):
        fit(v, X[warm], 0)
    load = os.getloadavg()[0]
    for seed in seeds:
        for v in [*variants, "umap-learn"]:
            t0 = time.perf_counter()
            Z = np.asarray(fit(v, X, seed), dtype=np.float64)
            wall = time.perf_counter() - t0
            q = suite.quality(X, Z, y, 5000)
            r = {"data": data, "n": len(X), "variant": v, "seed": seed, "wall_s": round(wall, 3),
                 "trust15": round(q["trust15"], 4), "knn5": round(q["knn5"], 4),
                 "date": datetime.date.today().isoformat(), "load_before": round(load, 2),
                 "machine": suite.machine()}
            print(json.dumps(r), flush=True)
            if record:
                with RESULTS.open("a") as f:
                    f.write(json.dumps(r) + "\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", nargs="+", default=["breast_cancer", "pbmc68k", "digits",
                                                  "swissroll", "mnist5k"])
    ap.add_argument("--variants", nargs="+", default=["e500s1", "default"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    for data in a.data:
        run_data(data, a.variants, a.seeds, a.record)


if __name__ == "__main__":
    main()
