"""Quality on real data against the issue's floors (slow: run with ``pytest -m slow``).

References measured on this kind of machine (DESIGN.md): openTSNE on digits trustworthiness@15
0.989 / 5-NN 0.977; umap-learn 0.988 / 0.976; on mnist5k (PCA 50) openTSNE 0.983 / 0.940,
umap-learn 0.970 / 0.944.
"""

import numpy as np
import pytest

import probdr
from probdr import datasets, metrics

pytestmark = pytest.mark.slow

FLOORS = {  # (data, preset): (trustworthiness@15, 5-NN accuracy), mean of 3 seeds
    ("digits", "TSNE"): (0.985, 0.97),
    ("digits", "UMAP"): (0.985, 0.97),
    ("mnist5k", "TSNE"): (0.975, 0.93),
    ("mnist5k", "UMAP"): (0.96, 0.93),
}


@pytest.mark.parametrize("data,preset", list(FLOORS))
def test_quality_floor(data, preset):
    X, y = datasets.load(data, pca=50 if data == "mnist5k" else None)
    tw, acc = [], []
    for seed in (0, 1, 2):
        Z = getattr(probdr, preset)(random_state=seed).fit_transform(X)
        tw.append(metrics.trustworthiness(X, Z, 15))
        acc.append(metrics.knn_accuracy(Z, y, 5))
    t_floor, a_floor = FLOORS[(data, preset)]
    assert np.mean(tw) >= t_floor, (data, preset, tw)
    assert np.mean(acc) >= a_floor, (data, preset, acc)


def test_largevis_and_sne_quality_on_digits():
    X, y = datasets.load("digits")
    Z = probdr.LargeVis(random_state=0).fit_transform(X)
    assert metrics.trustworthiness(X, Z, 15) > 0.97 and metrics.knn_accuracy(Z, y) > 0.95
    Z = probdr.SNE(random_state=0).fit_transform(X)
    assert metrics.trustworthiness(X, Z, 15) > 0.95 and metrics.knn_accuracy(Z, y) > 0.9
