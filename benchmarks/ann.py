"""Approximate neighbours in torch (``knn_ivf``) against pynndescent, on deformed MNIST (50 PCs).

Recall@k is measured against exact neighbours (blocked float64 brute force, ``knn_query``) of
20,000 sampled queries; each method's wall time is that of the whole search of all n points.
pynndescent is run as probdr's optional back end runs it (``n_neighbors = max(k + 1, 48)``,
``low_memory=True``), its numba compilation included in the first call and excluded by a warm-up
on 2,000 points. The data and the exact references are cached in ``--cache``.

    python benchmarks/ann.py --n 100000 --k 15 90
    python benchmarks/ann.py --n 1000000 --k 15 90
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import numpy as np
import torch

import probdr
from probdr.input.ivf import knn_ivf
from probdr.input.neighbors import knn_pynndescent, knn_query


def data(n: int, cache: str):
    path = os.path.join(cache, f"mnist_deformed_{n}.npy")
    if os.path.exists(path):
        return np.load(path)
    X, _ = probdr.datasets.load("mnist_deformed", n_samples=n)
    np.save(path, X)
    return X


def reference(X: torch.Tensor, n_queries: int, k_max: int, cache: str):
    """Exact neighbours of ``n_queries`` sampled points (self excluded)."""
    n = X.shape[0]
    path = os.path.join(cache, f"mnist_deformed_{n}_ref{n_queries}_{k_max}.npz")
    if os.path.exists(path):
        f = np.load(path)
        return f["q"], f["idx"]
    q = np.sort(np.random.default_rng(0).choice(n, min(n, n_queries), replace=False))
    qt = torch.from_numpy(q)
    idx, _ = knn_query(X, X[qt], k_max + 1)
    is_self = (idx == qt[:, None]).to(torch.int8)  # a duplicate may come before the point
    keep = torch.argsort(is_self, dim=1, stable=True)[:, :k_max]
    idx = idx.gather(1, keep).numpy()
    np.savez(path, q=q, idx=idx)
    return q, idx


def recall(found: torch.Tensor, q: np.ndarray, exact: np.ndarray, k: int) -> float:
    a = np.sort(found[torch.from_numpy(q)][:, :k].numpy(), 1)
    b = np.sort(exact[:, :k], 1)
    hits = sum(np.isin(x, y, assume_unique=True).sum() for x, y in zip(a, b, strict=True))
    return hits / (len(q) * k)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--k", type=int, nargs="+", default=[15, 90])
    ap.add_argument("--queries", type=int, default=20_000)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--no-pynndescent", action="store_true")
    ap.add_argument("--cache", default="/tmp/probdr_ann")
    args = ap.parse_args(argv)
    os.makedirs(args.cache, exist_ok=True)
    torch.set_num_threads(args.threads)
    X = torch.from_numpy(data(args.n, args.cache))
    t = time.perf_counter()
    q, exact = reference(X, args.queries, max(args.k), args.cache)
    print(f"exact references: {time.perf_counter() - t:.1f} s", file=sys.stderr)
    rows = []
    for k in args.k:
        t = time.perf_counter()
        idx, _ = knn_ivf(X, k)
        rows.append(("probdr knn_ivf (torch)", k, recall(idx, q, exact, k),
                     time.perf_counter() - t))
        print(rows[-1], file=sys.stderr)
        del idx
    if not args.no_pynndescent:
        knn_pynndescent(X[:2000], 15)  # numba compilation
        for k in args.k:
            t = time.perf_counter()
            idx, _ = knn_pynndescent(X, k)
            rows.append((f"pynndescent (n_neighbors={max(k + 1, 48)})", k,
                         recall(idx, q, exact, k), time.perf_counter() - t))
            print(rows[-1], file=sys.stderr)
            del idx
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"`python benchmarks/ann.py {' '.join(argv if argv is not None else sys.argv[1:])}`"
          f" (n = {args.n:,}, {X.shape[1]}-D, {len(q):,} queries, {args.threads} threads, "
          f"torch {torch.__version__}; peak RSS of the process {peak:.1f} GiB)\n")
    print("| method | k | recall@k | seconds |")
    print("|---|---|---|---|")
    for name, k, r, s in rows:
        print(f"| {name} | {k} | {r:.4f} | {s:.1f} |")


if __name__ == "__main__":
    main()
