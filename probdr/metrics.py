r"""Quality metrics of an embedding.

* :func:`trustworthiness` -- scikit-learn's (Venna & Kaski), optionally on a random subsample.
* :func:`knn_accuracy` -- leave-one-out k-NN classification accuracy in the embedding.
* :func:`rnx` -- the rescaled K-ary neighbourhood agreement :math:`R_n(K)` (Lee et al. 2015;
  Van Assel et al. 2022, App. B.3, eq. 23), exact, computed in row blocks so that it runs at n = 20,000.
"""

from __future__ import annotations

import numpy as np
import torch

from ._compute.allpairs import pairwise_sq_distances
from ._utils import check_array, check_number
from .input.neighbors import knn

__all__ = ["trustworthiness", "knn_accuracy", "rnx", "qnx"]


def _pair(X, Z):
    Xt = check_array(X, name="X")
    Zt = check_array(Z, name="Z", min_samples=2)
    if Xt.shape[0] != Zt.shape[0]:
        raise ValueError(f"X and Z must have the same number of rows, got {Xt.shape[0]} and "
                         f"{Zt.shape[0]}.")
    return Xt, Zt


def trustworthiness(X, Z, k: int = 15, sample_size: int | None = None,
                    random_state: int = 0) -> float:
    """Trustworthiness at ``k`` neighbours (scikit-learn's implementation).

    ``sample_size``: evaluate on a uniform random subsample of that many points (both spaces
    restricted to it), for large n where sklearn's n x n computation is too heavy.
    """
    from sklearn.manifold import trustworthiness as _tw

    Xt, Zt = _pair(X, Z)
    n = Xt.shape[0]
    k = check_number(k, "k", integer=True, low=1)
    if sample_size is not None:
        sample_size = check_number(sample_size, "sample_size", integer=True, low=1)
        if min(sample_size, n) <= 2 * k:
            raise ValueError(f"sample_size={sample_size} is too small for k={k}: trustworthiness "
                             f"needs more than 2k = {2 * k} points.")
    if not k < n / 2:
        raise ValueError(f"k must lie in [1, n/2) = [1, {n / 2}), got {k}.")
    if sample_size is not None and sample_size < n:
        idx = np.random.default_rng(random_state).choice(n, sample_size, replace=False)
        Xt, Zt = Xt[idx], Zt[idx]
    return float(_tw(Xt.cpu().numpy(), Zt.cpu().numpy(), n_neighbors=k))


def knn_accuracy(Z, y, k: int = 5) -> float:
    """Leave-one-out k-NN accuracy: each point is classified by the majority label of its ``k``
    nearest neighbours in ``Z`` (itself excluded); ties go to the smallest label."""
    Zt = check_array(Z, name="Z")
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != Zt.shape[0]:
        raise ValueError(f"y must be 1-D with {Zt.shape[0]} labels, got shape {y.shape}.")
    k = check_number(k, "k", integer=True, low=1, high=Zt.shape[0] - 1)
    classes, yi = np.unique(y, return_inverse=True)
    idx, _ = knn(Zt, k, method="exact" if Zt.shape[0] <= 50_000 else "auto")
    votes = np.zeros((Zt.shape[0], len(classes)), dtype=np.int64)
    np.add.at(votes, (np.repeat(np.arange(Zt.shape[0]), k), yi[idx.cpu().numpy().ravel()]), 1)
    return float((votes.argmax(1) == yi).mean())


def _ranks_block(D: torch.Tensor, s: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Neighbour order (self first, ties by index) and the rank of every column, for rows s:."""
    b = D.shape[0]
    D = D.clone()
    D[torch.arange(b), torch.arange(s, s + b)] = -1.0
    order = torch.sort(D, dim=1, stable=True).indices
    ranks = torch.empty_like(order)
    ranks.scatter_(1, order, torch.arange(D.shape[1]).expand(b, -1).contiguous())
    return order, ranks


def qnx(X, Z, K, block_size: int | None = None):
    r""":math:`Q_n(K) = \frac{1}{Kn}\sum_i |\nu_i^K \cap \gamma_i^K|` for one K or a list of K."""
    Xt, Zt = _pair(X, Z)
    n = Xt.shape[0]
    Ks = np.atleast_1d(np.asarray(K))
    if not np.issubdtype(Ks.dtype, np.integer) or (Ks < 1).any() or (Ks > n - 2).any():
        raise ValueError(f"K must be integers in [1, n-2] = [1, {n - 2}], got {K}.")
    if block_size is not None and not (isinstance(block_size, (int, np.integer))
                                       and not isinstance(block_size, bool) and block_size >= 1):
        raise ValueError(f"block_size must be a positive integer or None, got {block_size!r}.")
    bs = block_size or max(1, min(n, int(2**26 // (8 * n))))
    hits = np.zeros(len(Ks), dtype=np.float64)
    Xc = Xt - Xt.mean(0)
    Zc = Zt - Zt.mean(0)
    for s in range(0, n, bs):
        e = min(n, s + bs)
        ox, _ = _ranks_block(pairwise_sq_distances(Xc[s:e], Xc), s)
        _, rz = _ranks_block(pairwise_sq_distances(Zc[s:e], Zc), s)
        for a, k in enumerate(Ks):
            nbrs = ox[:, 1:k + 1]
            hits[a] += (rz.gather(1, nbrs) <= k).sum().item()
    q = hits / (Ks * n)
    return float(q[0]) if np.ndim(K) == 0 else q


def rnx(X, Z, K, block_size: int | None = None):
    r"""Rescaled neighbourhood agreement :math:`R_n(K) = ((n-1)Q_n(K) - K)/(n - 1 - K)` (Van
    Assel et al. 2022, eq. 23): 1 for identical neighbourhoods, about 0 for a random embedding. ``K`` is an int or
    a list of ints; ties in distance are broken by index."""
    Xt, _ = _pair(X, Z)
    n = Xt.shape[0]
    q = qnx(X, Z, K, block_size)
    Ks = np.asarray(K, dtype=np.float64)
    r = ((n - 1) * np.asarray(q) - Ks) / (n - 1 - Ks)
    return float(r) if np.ndim(K) == 0 else r
