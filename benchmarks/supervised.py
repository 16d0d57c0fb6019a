"""Supervised and semi-supervised embeddings side by side: probdr's UMAP / TSNE ``fit(X, y)``
against umap-learn's supervised modes, on MNIST-5k (PCA to 50).

Semi-supervised: the labels of a random half of the points are given (the others -1); the
score is the 5-NN accuracy on the unlabelled half, a 5-NN classifier of the embedding trained
on the labelled half (``semi_knn``), and the leave-one-out 5-NN accuracy of the unlabelled
points among all points (``loo_knn``). Fully supervised: the silhouette of the embedding by
label. Each configuration runs for ``--seeds`` seeds (the split and the fit's seed).

    python benchmarks/supervised.py --seeds 0 1 2 --out /tmp/supervised.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np
from sklearn.metrics import silhouette_score
from sklearn.neighbors import KNeighborsClassifier

import probdr
from probdr import datasets


def scores(Z, y, known):
    clf = KNeighborsClassifier(5).fit(Z[known], y[known])
    semi = float((clf.predict(Z[~known]) == y[~known]).mean())
    import torch

    from probdr.input.neighbors import knn_query

    Zt = torch.from_numpy(np.ascontiguousarray(Z, dtype=np.float64))
    idx, _ = knn_query(Zt, Zt[torch.from_numpy(np.nonzero(~known)[0])], 6)
    nb = y[idx[:, 1:].numpy()]
    votes = np.array([np.bincount(r, minlength=10).argmax() for r in nb])
    loo = float((votes == y[~known]).mean())
    return {"semi_knn": round(semi, 4), "loo_knn": round(loo, 4),
            "silhouette": round(float(silhouette_score(Z, y)), 4)}


def run(method, X, y_fit, seed):
    t = time.perf_counter()
    if method.startswith("umap-learn"):
        import umap

        est = umap.UMAP(random_state=seed, n_jobs=1)  # a seed fixes umap-learn to one thread
        Z = est.fit_transform(X, None if y_fit is None else y_fit)
    else:
        cls = probdr.UMAP if method.startswith("probdr-umap") else probdr.TSNE
        est = cls(random_state=seed)
        Z = est.fit_transform(X, y_fit)
    return np.asarray(Z, dtype=np.float64), time.perf_counter() - t


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+",
                    default=["probdr-umap", "umap-learn", "probdr-tsne"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    X, y = datasets.load("mnist5k")
    X = datasets._pca(np.asarray(X, dtype=np.float64), 50)
    rows = []
    for seed in args.seeds:
        rng = np.random.default_rng(seed)
        known = np.zeros(len(y), dtype=bool)
        known[rng.permutation(len(y))[: len(y) // 2]] = True
        y_semi = np.where(known, y, -1)
        for method in args.methods:
            for mode, y_fit in (("none", None), ("semi", y_semi), ("full", y)):
                Z, sec = run(method, X, y_fit, seed)
                row = {"method": method, "labels": mode, "seed": seed, "seconds": round(sec, 1)}
                row.update(scores(Z, y, known))
                rows.append(row)
                print(json.dumps(row), flush=True)
    summary = {}
    for method in args.methods:
        for mode in ("none", "semi", "full"):
            sel = [r for r in rows if r["method"] == method and r["labels"] == mode]
            summary[f"{method}/{mode}"] = {k: round(float(np.mean([r[k] for r in sel])), 4)
                                           for k in ("semi_knn", "loo_knn", "silhouette",
                                                     "seconds")}
    print(json.dumps(summary, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": f"{platform.processor() or platform.machine()}, "
                                  f"{os.cpu_count()} cores", "rows": rows,
                       "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
