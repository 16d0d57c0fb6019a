"""Hash ``fit_transform`` of every public estimator on the digits (``random_state=0``).

A refactor changes no number: run this (one thread, since multi-threaded reductions change the
last bits) before moving code and after, and compare the two JSON
files (``python benchmarks/embedding_hashes.py --out before.json`` ... ``--compare before.json``).
``--n`` fits the first n digits only (a quicker check).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

import numpy as np
import torch

import probdr
from probdr import datasets

ESTIMATORS = ["SNE", "TSNE", "LargeVis", "UMAP", "GraphCoupling", "WishartPCA", "ccPCA",
              "LaplacianWishart", "WishartEigenmaps", "SNEkhorn", "TSNEkhorn", "DistR", "GWMDS"]


def digest(a) -> str:
    a = np.ascontiguousarray(np.asarray(a, dtype=np.float64))
    return hashlib.sha256(a.tobytes() + str(a.shape).encode()).hexdigest()[:16]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=None, help="fit the first n digits only")
    ap.add_argument("--only", nargs="*", default=None, help="estimator names")
    ap.add_argument("--out", default=None, help="write the hashes to this JSON file")
    ap.add_argument("--compare", default=None, help="compare with an earlier JSON file")
    ap.add_argument("--transform", action="store_true",
                    help="also hash transform of 100 held-out digits and 20 training ones (and "
                         "sample_transform where the estimator has it)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # BLAS reductions over several threads change the last bits
    X, _ = datasets.load("digits")
    X_new = X[-100:]
    if args.n:
        X = X[: args.n]
    out = {}
    for name in args.only or ESTIMATORS:
        t = time.perf_counter()
        est = getattr(probdr, name)(random_state=0)
        Z = est.fit_transform(X)
        out[name] = digest(Z)
        if args.transform and hasattr(est, "transform"):
            out[name + ".transform"] = digest(est.transform(np.vstack([X_new, X[:20]])))
            if hasattr(est, "sample_transform"):
                out[name + ".sample_transform"] = digest(
                    est.sample_transform(X_new[:10], num_samples=8, random_state=0,
                                         num_warmup=20))
        print(f"{name:18s} {out[name]}  {time.perf_counter() - t:6.1f} s", file=sys.stderr,
              flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    if args.compare:
        with open(args.compare) as f:
            ref = json.load(f)
        bad = [k for k in out if k in ref and ref[k] != out[k]]
        print("changed: " + (", ".join(bad) if bad else "none"))
        return 1 if bad else 0
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
