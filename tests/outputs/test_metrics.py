import numpy as np
import pytest

from probdr import metrics


def test_rnx_sanity():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 6))
    assert metrics.rnx(X, X, 20) == pytest.approx(1.0)
    # a random embedding: E[R_n] = 0
    r = metrics.rnx(X, rng.normal(size=(400, 2)), [10, 100, 200])
    assert np.all(np.abs(r) < 0.05)
    # monotone in the quality of the embedding: PCA beats random
    import torch

    from probdr.init import pca

    Zp = pca(torch.from_numpy(X), 2).numpy()
    assert metrics.rnx(X, Zp, 100) > 0.2


def test_rnx_matches_bruteforce_and_blocks():
    rng = np.random.default_rng(1)
    X, Z = rng.normal(size=(120, 5)), rng.normal(size=(120, 2))
    n, K = 120, 30
    dX = ((X[:, None] - X[None]) ** 2).sum(-1)
    dZ = ((Z[:, None] - Z[None]) ** 2).sum(-1)
    q = 0
    for i in range(n):
        nx = set(np.argsort(np.where(np.arange(n) == i, -1, dX[i]), kind="stable")[1:K + 1])
        nz = set(np.argsort(np.where(np.arange(n) == i, -1, dZ[i]), kind="stable")[1:K + 1])
        q += len(nx & nz)
    q /= K * n
    ref = ((n - 1) * q - K) / (n - 1 - K)
    assert metrics.rnx(X, Z, K) == pytest.approx(ref)
    assert metrics.rnx(X, Z, K, block_size=7) == pytest.approx(ref)


def test_trustworthiness_and_knn_accuracy():
    from sklearn.manifold import trustworthiness
    from sklearn.neighbors import KNeighborsClassifier

    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 5))
    Z = X[:, :2] + 0.1 * rng.normal(size=(200, 2))
    assert metrics.trustworthiness(X, Z, 10) == pytest.approx(trustworthiness(X, Z, n_neighbors=10))
    y = (X[:, 0] > 0).astype(int)
    # leave-one-out k-NN: compare with sklearn fitted on all but i
    acc = np.mean([KNeighborsClassifier(5).fit(np.delete(Z, i, 0), np.delete(y, i))
                   .predict(Z[i:i + 1])[0] == y[i] for i in range(200)])
    assert metrics.knn_accuracy(Z, y, 5) == pytest.approx(acc)
    with pytest.raises(ValueError):
        metrics.knn_accuracy(Z, y[:-1])
