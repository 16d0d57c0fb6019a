r"""The neighbour step of the input side: each row's ``k`` nearest rows and their costs
:math:`C_{ij} = d(x_i, x_j)^2` (one convention: squared distances, whatever the metric), for
the training points (:func:`neighbor_lists`), for new points against them
(:func:`query_lists`), and with the rows' calibration (:func:`calibrated_lists`), by the
strategy the run calls for: one process searches every row; in a data-parallel fit
(:mod:`probdr._compute.distributed`) each rank searches and calibrates its block of rows.
:func:`pair_costs` gives the costs of given pairs under the same metric (an observed network's
pairs that the lists miss).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from .._compute.distributed import all_gather_rows, broadcast_, process_group_rows
from .distances import (
    check_knn,
    is_sparse,
    knn_metric,
    knn_query_metric,
    pairwise_distances,
    precomputed_neighbors,
    sparse_rows_topk,
)
from .neighbors import knn, knn_query

__all__ = ["neighbor_lists", "query_lists", "knn_edges", "calibrated_lists", "pair_costs",
           "SHARDED_SEARCH_MAX_N"]


def neighbor_lists(X, k: int, *, metric="euclidean", metric_params=None,
                   neighbors: str = "auto", precomputed_knn=None, random_state: int = 0
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The ``k`` nearest neighbours of every row (self excluded) and their costs
    :math:`C_{ij} = d(x_i, x_j)^2`, each ``(n, k)``, nearest first: the one neighbour step of
    the input side.

    ``X`` is a dense float64 tensor or a scipy sparse matrix of features, or, with
    ``metric="precomputed"``, a distance matrix (dense square, or sparse with each row's
    neighbour distances stored). ``precomputed_knn=(indices, distances)`` replaces the search.
    Euclidean neighbours of dense X come from :func:`probdr.input.neighbors.knn`; every other
    metric from :func:`probdr.input.distances.knn_metric`."""
    if precomputed_knn is not None:
        idx, d = check_knn(precomputed_knn, X.shape[0] if X is not None else None, k)
        return idx, d.square()
    if is_metric(metric, "precomputed"):
        idx, d = precomputed_neighbors(X, k)
        return idx, d.square()
    if is_metric(metric, "euclidean") and not is_sparse(X):
        return knn(X, k, method=neighbors, random_state=random_state)
    idx, d = knn_metric(X, k, metric, metric_params, method=neighbors, random_state=random_state)
    return idx, d.square()


def query_lists(X_ref, X_new, k: int, *, metric="euclidean", metric_params=None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The ``k`` nearest reference rows of each new row and their costs :math:`d^2`, nearest
    first. With ``metric="precomputed"``, ``X_new`` holds the new points' distances to the
    reference points, ``(m, n)`` (dense, or sparse with the neighbour distances stored)."""
    if is_metric(metric, "precomputed"):
        n = X_ref.shape[0] if X_ref is not None else X_new.shape[1]
        if X_new.shape[1] != n:
            raise ValueError(f"with metric='precomputed', transform takes the (m, {n}) distances "
                             f"of the new points to the training points; got {X_new.shape[1]} "
                             "columns.")
        return _rows_neighbors(X_new, k)
    if is_metric(metric, "euclidean") and not is_sparse(X_ref):
        return knn_query(X_ref, X_new, k)
    idx, d = knn_query_metric(X_ref, X_new, k, metric, metric_params)
    return idx, d.square()


def _rows_neighbors(D, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` smallest entries of each row of a (new points x reference points) distance
    matrix (dense or sparse), squared."""
    import scipy.sparse as sp

    if is_sparse(D):
        C = sp.csr_matrix(D, dtype=np.float64)
        counts = np.diff(C.indptr)
        if counts.min() < k:
            raise ValueError(f"a row of the precomputed distances stores {int(counts.min())} "
                             f"neighbours, fewer than the {k} needed.")
        r = np.repeat(np.arange(C.shape[0]), counts)
        idx, d = sparse_rows_topk(r, C.indices, C.data, C.shape[0], k)
    else:
        Dt = torch.as_tensor(np.asarray(D) if not isinstance(D, torch.Tensor) else D,
                             dtype=torch.float64)
        d, idx = torch.topk(Dt, k, dim=1, largest=False, sorted=True)
    if not torch.isfinite(d).all() or (d < 0).any():
        raise ValueError("the precomputed distances must be finite and non-negative.")
    return idx, d.square()


def knn_edges(X, k: int, *, neighbors: str = "auto", random_state: int = 0, **metric_kw
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``k`` nearest neighbours of every row of ``X`` as an edge list: ``(rows, cols, d2)``
    with ``rows = [0]*k + [1]*k + ...``, ``cols`` the neighbours (self excluded) and ``d2`` the
    ``(n, k)`` costs (squared distances), nearest first. ``metric_kw``: ``metric``,
    ``metric_params``, ``precomputed_knn`` of :func:`neighbor_lists`."""
    n = X.shape[0]
    idx, d2 = neighbor_lists(X, k, neighbors=neighbors, random_state=random_state, **metric_kw)
    return torch.arange(n).repeat_interleave(k), idx.flatten(), d2


def calibrated_lists(X, k: int, calibrate: Callable[[torch.Tensor], tuple[torch.Tensor, ...]], *,
                     neighbors: str = "auto", random_state: int = 0, metric="euclidean",
                     metric_params=None, precomputed_knn=None
                     ) -> tuple[torch.Tensor, ...]:
    r"""Each row's ``k`` nearest neighbours ``(n, k)``, nearest first, followed by the row
    tensors of their calibration ``calibrate(d2)`` (row-wise on the ``(n, k)`` costs: e.g. the
    log-weights ``(n, k)`` and the rows' parameters ``(n, p)``).

    The strategy: one process searches every row (:func:`neighbor_lists`). In a data-parallel
    fit, up to ``SHARDED_SEARCH_MAX_N`` points (and without precomputed inputs or an
    approximate search), each rank searches and calibrates its block of rows (exact blocked
    queries) and all ranks gather the same lists; above, every rank runs the one-process search
    and rank 0's lists are broadcast, so that all ranks hold the same graph."""
    n = X.shape[0]
    block = process_group_rows(n)  # data-parallel: this rank's rows (None without a group)
    if block is not None and precomputed_knn is None and not is_metric(metric, "precomputed") \
            and neighbors != "approximate" and n <= SHARDED_SEARCH_MAX_N:
        idx, d2 = _block_neighbors(X, block, k, metric, metric_params)
        return all_gather_rows(idx, *calibrate(d2), n=n)
    idx, d2 = neighbor_lists(X, k, neighbors=neighbors, random_state=random_state,
                             metric=metric, metric_params=metric_params,
                             precomputed_knn=precomputed_knn)
    if block is not None:  # a search run whole on every rank: rank 0's lists for all
        idx, d2 = broadcast_(idx.contiguous()), broadcast_(d2.contiguous())
    return (idx, *calibrate(d2))


def pair_costs(X, rows: torch.Tensor, cols: torch.Tensor, *, metric="euclidean",
               metric_params=None) -> torch.Tensor:
    r"""The costs :math:`C_{ij} = d(x_i, x_j)^2` of the pairs ``(rows[e], cols[e])``, float64,
    shape ``rows.shape``, under the metric of :func:`neighbor_lists`; ``metric="precomputed"``:
    looked up in the distance matrix ``X`` (a pair that a sparse matrix does not store costs
    :math:`\infty`). Blocked: the temporaries stay small whatever the number of pairs."""
    m = rows.numel()
    if is_metric(metric, "precomputed"):
        return _stored_costs(X, rows, cols)
    out = torch.empty(m, dtype=torch.float64)
    euclidean = is_metric(metric, "euclidean") and not is_sparse(X)
    bs = 2**14 if euclidean else 64  # other metrics: the diagonal of (bs, bs) blocks
    r_np, c_np = rows.cpu().numpy(), cols.cpu().numpy()
    for s in range(0, m, bs):
        e = min(m, s + bs)
        if euclidean:
            out[s:e] = (X[rows[s:e]] - X[cols[s:e]]).to(torch.float64).square().sum(1)
        else:
            D = pairwise_distances(X[r_np[s:e]], X[c_np[s:e]], metric, metric_params)
            out[s:e] = D.diagonal().square()
    return out


def _stored_costs(D, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """The squared entries of a precomputed distance matrix at the pairs (``inf`` where a
    sparse matrix stores none)."""
    import scipy.sparse as sp

    if not is_sparse(D):
        Dt = torch.as_tensor(np.asarray(D) if not isinstance(D, torch.Tensor) else D,
                             dtype=torch.float64)
        return Dt[rows, cols].square()
    C = sp.csr_matrix(D, dtype=np.float64)
    C.sum_duplicates()
    r = np.repeat(np.arange(C.shape[0], dtype=np.int64), np.diff(C.indptr))
    keys = torch.as_tensor(r * C.shape[1] + C.indices.astype(np.int64))  # sorted (canonical)
    q = rows * C.shape[1] + cols
    out = torch.full(q.shape, float("inf"), dtype=torch.float64)
    if keys.numel():
        pos = torch.searchsorted(keys, q).clamp_max(keys.numel() - 1)
        hit = keys[pos] == q
        out[hit] = torch.as_tensor(C.data)[pos[hit]].square()
    return out


def is_metric(metric, name: str) -> bool:
    """Whether ``metric`` is the metric called ``name`` (a callable is none)."""
    return isinstance(metric, str) and metric == name


#: in a data-parallel fit, the neighbour search is split by query rows (blocked brute force,
#: exact) up to this many points; above, every rank runs the 1-process search
SHARDED_SEARCH_MAX_N = 20_000


def _block_neighbors(X, block: tuple[int, int], k: int, metric, metric_params):
    """The ``k`` nearest neighbours (self excluded) and costs :math:`d^2` of the rows
    ``block = (start, stop)`` of X among all rows: exact blocked queries."""
    s, e = block
    if is_metric(metric, "euclidean") and not is_sparse(X):
        idx, d2 = knn_query(X, X[s:e], k + 1)
    else:
        idx, d = knn_query_metric(X, X[s:e], k + 1, metric, metric_params)
        d2 = d.square()
    own = idx == torch.arange(s, e)[:, None]
    own[:, -1] |= ~own.any(1)  # the row hidden by k + 1 duplicates: drop the farthest
    return idx[~own].view(e - s, k), d2[~own].view(e - s, k)
