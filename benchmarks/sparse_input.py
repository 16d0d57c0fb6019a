"""A sparse matrix fitted without forming its dense form: probdr's UMAP and TSNE on a random
CSR matrix (default 20,000 x 10,000 at density 1 %, 1.5 GiB dense in float64), with the
process's peak resident memory reported beside the dense size.

The rows are tf-idf-like: 20 topics, each row draws its non-zero columns mostly from its
topic's vocabulary, so that neighbours carry structure; the 5-NN accuracy of the topic labels
is reported.

    python benchmarks/sparse_input.py --n 20000 --p 10000 --density 0.01 --method umap
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np
import scipy.sparse as sp

import probdr


def topic_matrix(n: int, p: int, density: float, n_topics: int = 20, seed: int = 0):
    rng = np.random.default_rng(seed)
    nnz_row = max(1, int(round(density * p)))
    y = rng.integers(0, n_topics, n)
    vocab = p // n_topics
    own = rng.random((n, nnz_row)) < 0.6  # 60 % of a row's words from its topic
    cols = np.where(own, y[:, None] * vocab + rng.integers(0, vocab, (n, nnz_row)),
                    rng.integers(0, p, (n, nnz_row)))
    vals = rng.exponential(1.0, (n, nnz_row))
    X = sp.csr_matrix((vals.ravel(), (np.repeat(np.arange(n), nnz_row), cols.ravel())),
                      shape=(n, p))
    X.sum_duplicates()
    return X, y


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--p", type=int, default=10_000)
    ap.add_argument("--density", type=float, default=0.01)
    ap.add_argument("--method", choices=("umap", "tsne"), default="umap")
    ap.add_argument("--metric", default="cosine")
    args = ap.parse_args(argv)
    X, y = topic_matrix(args.n, args.p, args.density)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    cls = probdr.UMAP if args.method == "umap" else probdr.TSNE
    t = time.perf_counter()
    Z = cls(metric=args.metric, random_state=0).fit_transform(X)
    sec = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps({
        "method": args.method, "metric": args.metric, "n": args.n, "p": args.p,
        "density": args.density, "nnz": int(X.nnz), "seconds": round(sec, 1),
        "dense_size_GiB": round(args.n * args.p * 8 / 2**30, 2),
        "peak_rss_GiB": round(peak, 2), "rss_before_fit_GiB": round(base, 2),
        "knn_accuracy@5": round(probdr.metrics.knn_accuracy(Z, y, 5), 4)}, indent=1))


if __name__ == "__main__":
    main()
