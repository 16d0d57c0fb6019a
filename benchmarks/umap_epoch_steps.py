"""UMAP's schedule at scale: probdr's epochs and optimiser steps per epoch (``steps4``: 200
epochs of 4 steps; ``e60s12``: 60 epochs of 12; ``default``: the size's default), beside
umap-learn, all on the same neighbours (pynndescent, 16 with the point itself, given as
``precomputed_knn`` to both libraries), so that only the optimisation differs.

    python benchmarks/umap_epoch_steps.py --n 70000 --variants steps1 steps2 steps4 steps8 umap-learn
    python benchmarks/umap_epoch_steps.py --n 70000 --seeds 0 1 2 \
        --variants steps4 e100s8 e60s12 umap-learn

Each variant and seed runs in its own process (2 threads); trustworthiness@15 on a 3,000-point
sample, leave-one-out 5-NN accuracy on all points. ``--record`` appends the results to
``benchmarks/results/umap_epoch_steps.jsonl``, from which ``suite.py`` writes the table of
docs/benchmarks.md (the mean over the seeds of each variant's latest results).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CACHE = os.environ.get("PROBDR_BENCH_CACHE", "/tmp/probdr-bench")
RESULTS = Path(__file__).resolve().parent / "results" / "umap_epoch_steps.jsonl"


def prepare(n: int):
    base = os.path.join(CACHE, f"steps{n}")
    if not os.path.exists(base + "_knn_d.npy"):
        from pynndescent import NNDescent

        from probdr import datasets

        os.makedirs(CACHE, exist_ok=True)
        X, y = datasets.load("mnist_deformed", n_samples=n)
        X = X.astype(np.float32)
        ind, d = NNDescent(X, n_neighbors=48, random_state=0, low_memory=True).neighbor_graph
        for name, a in (("X", X), ("y", y), ("knn_i", ind[:, :16]), ("knn_d", d[:, :16])):
            np.save(f"{base}_{name}.npy", a)
    return [np.load(f"{base}_{name}.npy") for name in ("X", "y", "knn_i", "knn_d")]


def schedule(variant: str) -> dict:
    """probdr's UMAP parameters of a variant: ``stepsS`` (200 epochs of S steps), ``eEsS`` (E
    epochs of S steps) or ``default``."""
    if variant == "default":
        return {}
    if variant.startswith("steps"):
        return {"n_epochs": 200, "epoch_steps": int(variant.removeprefix("steps"))}
    epochs, steps = variant.removeprefix("e").split("s")
    return {"n_epochs": int(epochs), "epoch_steps": int(steps)}


def child(n: int, variant: str, seed: int) -> None:
    X, y, ki, kd = prepare(n)
    t0 = time.perf_counter()
    if variant == "umap-learn":  # no random_state: umap-learn's parallel epochs
        import umap

        Z = umap.UMAP(n_jobs=2, precomputed_knn=(ki[:, :15], kd[:, :15], None)).fit_transform(X)
    else:
        import probdr

        Z = probdr.UMAP(random_state=seed, precomputed_knn=(ki, kd),
                        **schedule(variant)).fit_transform(X)
    wall = time.perf_counter() - t0
    from probdr import metrics

    sub = np.random.default_rng(0).choice(n, min(n, 3000), replace=False)
    print("RESULT " + json.dumps({
        "variant": variant, "n": n, "seed": seed, "wall_s": round(wall, 1),
        "trust15": round(metrics.trustworthiness(X[sub], Z[sub], 15), 4),
        "knn5": round(metrics.knn_accuracy(Z, y, 5), 4)}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300_000)
    ap.add_argument("--variants", nargs="+", default=["steps1", "steps4", "umap-learn"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--child", default=None)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--record", action="store_true", help=f"append the results to {RESULTS}")
    a = ap.parse_args()
    if a.child:
        child(a.n, a.child, a.seed)
        return
    prepare(a.n)
    env = dict(os.environ, OMP_NUM_THREADS="2", NUMBA_NUM_THREADS="2", PYTHONWARNINGS="ignore")
    load = os.getloadavg()[0]
    for v, seed in ((v, seed) for seed in a.seeds for v in a.variants):
        p = subprocess.run([sys.executable, __file__, "--n", str(a.n), "--child", v,
                            "--seed", str(seed)], capture_output=True, text=True, env=env)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        print(lines[-1][7:] if lines else f"{v} failed: {p.stderr[-2000:]}", flush=True)
        if lines and a.record:
            r = {**json.loads(lines[-1][7:]), "date": datetime.date.today().isoformat(),
                 "load_before": round(load, 2)}
            with RESULTS.open("a") as f:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
