"""k-nearest neighbours: exact (blocked torch) and approximate (pynndescent) for large n."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["knn", "pairwise_sq_distances"]

#: above this many points ``method="auto"`` switches from exact to approximate neighbours
EXACT_KNN_MAX_N = 20_000


def pairwise_sq_distances(A: torch.Tensor, B: torch.Tensor | None = None) -> torch.Tensor:
    """Squared Euclidean distances between rows of ``A`` and ``B`` (clamped at 0)."""
    B = A if B is None else B
    a2 = (A * A).sum(1, keepdim=True)
    b2 = (B * B).sum(1)
    d2 = torch.addmm(a2 + b2, A, B.T, alpha=-2.0)
    return d2.clamp_min_(0.0)


def _block_rows(n: int, n_cols: int, block_bytes: float = 2**27) -> int:
    return max(1, min(n, int(block_bytes // (8 * max(n_cols, 1)))))


def knn_exact(X: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact k nearest neighbours of every row (self excluded), blocked to bound memory.

    Returns ``(indices, sq_distances)`` of shape ``(n, k)``, sorted by distance. Duplicated rows
    are neighbours at distance 0; the point itself is never its own neighbour.
    """
    n = X.shape[0]
    X64 = X.to(torch.float64)
    # centring improves the accuracy of the |a|^2 + |b|^2 - 2ab expansion
    X64 = X64 - X64.mean(0, keepdim=True)
    idx = torch.empty(n, k, dtype=torch.long)
    dist = torch.empty(n, k, dtype=torch.float64)
    bs = _block_rows(n, n)
    for s in range(0, n, bs):
        e = min(n, s + bs)
        d2 = pairwise_sq_distances(X64[s:e], X64)
        d2[torch.arange(e - s), torch.arange(s, e)] = float("inf")
        vals, ind = torch.topk(d2, k, dim=1, largest=False, sorted=True)
        idx[s:e], dist[s:e] = ind, vals
    return idx, dist


def knn_approximate(X: torch.Tensor, k: int, random_state: int = 0):
    """Approximate neighbours by NN-descent (pynndescent); self excluded."""
    try:
        from pynndescent import NNDescent
    except ImportError as exc:  # pragma: no cover - optional dependency
        raise ImportError(
            "Approximate neighbours need pynndescent: pip install pynndescent "
            "(or pass neighbors='exact')."
        ) from exc
    Xn = X.detach().cpu().numpy().astype(np.float32)
    index = NNDescent(Xn, n_neighbors=k + 1, random_state=random_state, low_memory=True)
    ind, d = index.neighbor_graph
    ind, d = np.asarray(ind), np.asarray(d, dtype=np.float64)
    # drop self: it is usually in column 0, but duplicates can displace it
    n = Xn.shape[0]
    # a stable sort that moves each row's self entry (if any) to the end, then drop column k
    is_self = ind == np.arange(n)[:, None]
    order = np.argsort(is_self, axis=1, kind="stable")[:, :k]
    out_i = np.take_along_axis(ind, order, axis=1).astype(np.int64)
    out_d = np.take_along_axis(d, order, axis=1)
    return torch.from_numpy(out_i), torch.from_numpy(out_d**2)


def knn(X: torch.Tensor, k: int, method: str = "auto", random_state: int = 0):
    """k nearest neighbours (self excluded): ``(indices, squared distances)``, each ``(n, k)``.

    ``method``: ``"exact"`` (blocked torch), ``"approximate"`` (pynndescent), or ``"auto"``
    (exact up to ``EXACT_KNN_MAX_N`` points).
    """
    n = X.shape[0]
    if not 1 <= k <= n - 1:
        raise ValueError(f"k must lie in [1, n-1] = [1, {n - 1}], got {k}.")
    if method == "auto":
        method = "exact" if n <= EXACT_KNN_MAX_N else "approximate"
    if method == "exact":
        return knn_exact(X, k)
    if method == "approximate":
        return knn_approximate(X, k, random_state=random_state)
    raise ValueError(f"method must be 'auto', 'exact' or 'approximate', got {method!r}.")
