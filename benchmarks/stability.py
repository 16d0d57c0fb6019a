"""Does ``stability_ < 0.5`` flag the points a user should doubt, and how many?

For each data set, method and posterior, one fit (seed 0, the estimator's defaults) and, per
point, its stability (the posterior probability that it keeps at least 5 of its 15 nearest
neighbours) and whether its 5-nearest-neighbour label in the map (``embedding_``, the MAP) is
wrong. Reported: the share of points flagged (stability below 0.5) beside the share the old cut
``reliability_ < 0.5`` flagged, the 5-NN error rate of the flagged points and of the rest, and
the AUROC of each score for the 5-NN errors.

    python benchmarks/stability.py
    python benchmarks/stability.py --data digits --methods tsne --posteriors laplace

Results are appended to ``benchmarks/results/stability.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import suite
from sklearn.metrics import roc_auc_score
from sklearn.neighbors import NearestNeighbors

import probdr

RESULTS = suite.HERE / "results" / "stability.jsonl"
ESTIMATORS = {"tsne": probdr.TSNE, "umap": probdr.UMAP}


def knn_errors(Z: np.ndarray, y: np.ndarray, k: int = 5) -> np.ndarray:
    """Whether each point's ``k`` nearest others in ``Z`` vote for another label."""
    idx = NearestNeighbors(n_neighbors=k + 1).fit(Z).kneighbors(Z, return_distance=False)[:, 1:]
    return np.array([np.bincount(v).argmax() for v in y[idx]]) != y


def one(data: str, method: str, posterior: str) -> dict:
    X, y = suite.load(data)
    y = np.unique(np.asarray(y), return_inverse=True)[1]
    t0 = time.perf_counter()
    est = ESTIMATORS[method](random_state=0, inference=posterior).fit(X)
    seconds = time.perf_counter() - t0
    err = knn_errors(np.asarray(est.embedding_, dtype=np.float64), y)
    flag = est.stability_ < 0.5

    def rate(mask):
        return round(float(err[mask].mean()), 4) if mask.any() else None

    def auroc(score):
        return round(float(roc_auc_score(err, -score)), 3) if 0 < err.sum() < err.size else None

    return {"data": data, "method": method, "posterior": posterior, "n": int(len(y)),
            "seconds": round(seconds, 1), "flagged": round(float(flag.mean()), 4),
            "flagged_by_reliability": round(float((est.reliability_ < 0.5).mean()), 4),
            "knn5_error_flagged": rate(flag), "knn5_error_rest": rate(~flag),
            "median_stability": round(float(np.median(est.stability_)), 3),
            "auroc_stability": auroc(est.stability_), "auroc_reliability": auroc(est.reliability_),
            "probdr": probdr.__version__}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", nargs="+", default=["digits", "pbmc68k", "mnist5k"])
    ap.add_argument("--methods", nargs="+", choices=list(ESTIMATORS), default=list(ESTIMATORS))
    ap.add_argument("--posteriors", nargs="+", choices=["laplace", "svi"],
                    default=["laplace", "svi"])
    a = ap.parse_args(argv)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    for data in a.data:
        for method in a.methods:
            for posterior in a.posteriors:
                row = one(data, method, posterior)
                print(json.dumps(row), flush=True)
                with open(RESULTS, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
