r"""Dissimilarities between rows: the ``metric=`` of every estimator whose input side uses
neighbours or distances.

=============  ==========================================================  =====================
metric         :math:`d(x, y)`                                             sparse X
=============  ==========================================================  =====================
euclidean      :math:`\|x - y\|_2`                                         yes
sqeuclidean    :math:`\|x - y\|_2^2`                                       yes
cosine         :math:`1 - \langle x, y\rangle / (\|x\|\|y\|)`              yes
correlation    cosine of the row-centred vectors                           yes
manhattan      :math:`\|x - y\|_1`                                         yes
chebyshev      :math:`\|x - y\|_\infty`                                    no
minkowski      :math:`\|x - y\|_p` (``metric_params={"p": p}``, p >= 1)    no
hamming        fraction of coordinates that differ                          no
jaccard        :math:`1 - |A \cap B| / |A \cup B|` of the non-zero sets    yes
haversine      great-circle distance of (latitude, longitude) in radians   no
callable       ``f(x, y) -> float`` on two rows (numpy)                    no
=============  ==========================================================  =====================

Conventions follow umap-learn and scikit-learn where they differ from plain formulas: the cosine
(and correlation) distance of two all-zero rows is 0 and of one all-zero row to another row is
1; the Jaccard distance of two empty sets is 0.

Every function returns the metric's distances :math:`d` themselves; the input side squares them
(:math:`C = d^2`, the cost the entropic affinities use, as openTSNE does for every metric; UMAP's
:math:`\rho, \sigma` calibrate on :math:`d = \sqrt C`), so ``metric="euclidean"`` is the
existing Euclidean pipeline.

Neighbours (:func:`knn_metric`): Euclidean ones come from :func:`probdr.input.neighbors.knn` (exact
up to 20,000 points, then the approximate inverted-file search in torch); cosine and correlation are
Euclidean distances of normalised rows (:math:`\|u - v\|^2 = 2 d_{\cos}`) and use the same searches.
The other metrics are searched exactly by blocked brute force in torch up to ``EXACT_METRIC_MAX_N``
points; above that (``method="auto"``) by pynndescent when it is installed (the optional
``probdr[ann]``), and otherwise still by the exact brute force, which costs :math:`O(n^2 p)` and
says so in a ``RuntimeWarning``. ``method="approximate"`` is the torch search for the Euclidean-type
metrics and pynndescent (required) for the others;
``method="pynndescent"`` is pynndescent for every metric.
"""

from __future__ import annotations

import warnings
from numbers import Real

import numpy as np
import scipy.sparse as sp
import torch

from .neighbors import knn, knn_query, pynndescent_search

__all__ = ["METRICS", "SPARSE_METRICS", "check_metric", "pairwise_distances", "knn_metric",
           "knn_query_metric", "precomputed_neighbors", "check_distance_matrix",
           "sparse_rows_topk", "check_knn",
           "is_sparse"]

METRICS = ("euclidean", "sqeuclidean", "cosine", "correlation", "manhattan", "chebyshev",
           "minkowski", "hamming", "jaccard", "haversine")
SPARSE_METRICS = ("euclidean", "sqeuclidean", "cosine", "correlation", "manhattan", "jaccard")
#: aliases accepted (scikit-learn / scipy names)
ALIASES = {"l2": "euclidean", "l1": "manhattan", "cityblock": "manhattan", "taxicab": "manhattan",
           "linf": "chebyshev", "infinity": "chebyshev", "p": "minkowski"}
#: above this many points, metrics other than (sq)euclidean / cosine / correlation use
#: pynndescent when ``method="auto"`` and it is installed (brute force costs O(n^2 p))
EXACT_METRIC_MAX_N = 20_000


def is_sparse(X) -> bool:
    return sp.issparse(X)


def check_metric(metric, metric_params=None, *, sparse: bool = False,
                 n_features: int | None = None):
    """Validate ``metric`` and ``metric_params``; return ``(metric, params)`` with the name
    canonical (aliases resolved) or the callable itself. Raises ``ValueError`` with the list of
    choices, before any work."""
    params = dict(metric_params or {})
    if callable(metric):
        if sparse:
            raise ValueError("a callable metric needs dense X; convert the sparse matrix with "
                             ".toarray() or use one of " + ", ".join(SPARSE_METRICS) + ".")
        return metric, params
    if not isinstance(metric, str):
        raise ValueError(f"metric must be a string or a callable, got {metric!r}.")
    name = ALIASES.get(metric.lower(), metric.lower())
    if name not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}, "
                         "'precomputed', or a callable f(x, y) -> float.")
    allowed = {"minkowski": {"p"}}.get(name, set())
    extra = set(params) - allowed
    if extra:
        raise ValueError(f"metric_params {sorted(extra)} are not parameters of the {name} "
                         f"metric (it takes {sorted(allowed) or 'none'}).")
    if name == "minkowski":
        p = params.get("p", 2.0)
        if not (isinstance(p, Real) and not isinstance(p, bool) and p >= 1):
            raise ValueError(f"the minkowski metric needs metric_params={{'p': p}} with p >= 1 "
                             f"(a norm), got p={p!r}.")
        params["p"] = float(p)
    if sparse and name not in SPARSE_METRICS:
        raise ValueError(f"metric={name!r} is not available for sparse X; use one of "
                         f"{', '.join(SPARSE_METRICS)}, or pass X.toarray().")
    if name == "haversine" and n_features is not None and n_features != 2:
        raise ValueError("the haversine metric takes 2 features, (latitude, longitude) in "
                         f"radians; got {n_features}.")
    return name, params


# --------------------------------------------------------------------------------------------
# pairwise distances on blocks
# --------------------------------------------------------------------------------------------
def _unit_rows(X: torch.Tensor, center: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows scaled to unit norm (after centring each row for correlation) and the mask of rows
    of zero norm (kept at 0)."""
    X = X.to(torch.float64)
    if center:
        X = X - X.mean(1, keepdim=True)
    norm = X.norm(dim=1, keepdim=True)
    zero = norm.squeeze(1) == 0
    return X / norm.clamp_min(1e-300), zero


def _cosine_fix(D: torch.Tensor, zero_a: torch.Tensor, zero_b: torch.Tensor) -> torch.Tensor:
    """umap-learn's conventions for all-zero rows: 0 between two of them, 1 to any other row."""
    if zero_a.any() or zero_b.any():
        either = zero_a[:, None] | zero_b[None, :]
        both = zero_a[:, None] & zero_b[None, :]
        D = torch.where(either, torch.where(both, 0.0, 1.0).to(D.dtype), D)
    return D


def _dense_block(A: torch.Tensor, B: torch.Tensor, name, params) -> torch.Tensor:
    """Distances between the rows of two dense float64 blocks, ``(a, b)``."""
    from .._compute.allpairs import pairwise_sq_distances

    if callable(name):
        from scipy.spatial.distance import cdist

        return torch.from_numpy(cdist(A.numpy(), B.numpy(), metric=name))
    if name in ("euclidean", "sqeuclidean"):
        d2 = pairwise_sq_distances(A, B).clamp_min_(0.0)
        return d2 if name == "sqeuclidean" else d2.sqrt_()
    if name in ("cosine", "correlation"):
        Ua, za = _unit_rows(A, name == "correlation")
        Ub, zb = _unit_rows(B, name == "correlation")
        return _cosine_fix((1.0 - Ua @ Ub.T).clamp_min_(0.0), za, zb)
    if name == "manhattan":
        return torch.cdist(A, B, p=1.0)
    if name == "chebyshev":
        return torch.cdist(A, B, p=float("inf"))
    if name == "minkowski":
        return torch.cdist(A, B, p=params.get("p", 2.0))
    if name == "hamming":
        out = torch.empty(A.shape[0], B.shape[0], dtype=torch.float64)
        step = max(1, 2**24 // max(1, B.shape[0] * A.shape[1]))
        for s in range(0, A.shape[0], step):
            out[s:s + step] = (A[s:s + step, None, :] != B[None, :, :]).double().mean(2)
        return out
    if name == "jaccard":
        a, b = (A != 0).double(), (B != 0).double()
        inter = a @ b.T
        union = a.sum(1)[:, None] + b.sum(1)[None, :] - inter
        return torch.where(union > 0, 1.0 - inter / union.clamp_min(1.0), 0.0)
    if name == "haversine":
        lat_a, lon_a = A[:, 0:1], A[:, 1:2]
        lat_b, lon_b = B[:, 0][None, :], B[:, 1][None, :]
        h = (torch.sin(0.5 * (lat_a - lat_b)) ** 2
             + torch.cos(lat_a) * torch.cos(lat_b) * torch.sin(0.5 * (lon_a - lon_b)) ** 2)
        return 2.0 * torch.arcsin(h.clamp(0.0, 1.0).sqrt())
    raise ValueError(f"unknown metric {name!r}")  # pragma: no cover - checked before


def _sparse_unit_rows(X: sp.csr_matrix, center: bool):
    """Sparse rows as (X, mean per row, norm per row): the centred row is X_i - mean_i 1."""
    p = X.shape[1]
    mean = np.asarray(X.sum(1)).ravel() / p if center else np.zeros(X.shape[0])
    sq = np.asarray(X.multiply(X).sum(1)).ravel()
    norm = np.sqrt(np.maximum(sq - p * mean**2, 0.0))
    return mean, norm


def _sparse_block(A: sp.csr_matrix, B: sp.csr_matrix, name, params) -> torch.Tensor:
    """Distances between the rows of two sparse CSR blocks (never densifying the features)."""
    if name in ("euclidean", "sqeuclidean"):
        na = np.asarray(A.multiply(A).sum(1)).ravel()
        nb = np.asarray(B.multiply(B).sum(1)).ravel()
        d2 = na[:, None] + nb[None, :] - 2.0 * (A @ B.T).toarray()
        d2 = np.maximum(d2, 0.0)
        return torch.from_numpy(d2 if name == "sqeuclidean" else np.sqrt(d2))
    if name in ("cosine", "correlation"):
        center = name == "correlation"
        p = A.shape[1]
        ma, na = _sparse_unit_rows(A, center)
        mb, nb = _sparse_unit_rows(B, center)
        dot = (A @ B.T).toarray() - p * ma[:, None] * mb[None, :]
        D = 1.0 - dot / np.maximum(na[:, None] * nb[None, :], 1e-300)
        return _cosine_fix(torch.from_numpy(np.maximum(D, 0.0)), torch.from_numpy(na == 0),
                           torch.from_numpy(nb == 0))
    if name == "manhattan":
        from sklearn.metrics.pairwise import manhattan_distances

        return torch.from_numpy(manhattan_distances(A, B))
    if name == "jaccard":
        a = (A != 0).astype(np.float64)
        b = (B != 0).astype(np.float64)
        inter = (a @ b.T).toarray()
        union = np.asarray(a.sum(1)) + np.asarray(b.sum(1)).T - inter
        return torch.from_numpy(np.where(union > 0, 1.0 - inter / np.maximum(union, 1.0), 0.0))
    raise ValueError(f"metric={name!r} is not available for sparse X.")  # pragma: no cover


def pairwise_distances(A, B, metric="euclidean", metric_params=None) -> torch.Tensor:
    """The ``(a, b)`` float64 matrix of ``metric`` distances between the rows of ``A`` and
    ``B`` (dense tensors/arrays or scipy sparse matrices, both of one kind)."""
    name, params = check_metric(metric, metric_params, sparse=is_sparse(A))
    if is_sparse(A):
        return _sparse_block(sp.csr_matrix(A, dtype=np.float64),
                             sp.csr_matrix(B, dtype=np.float64), name, params)
    A = torch.as_tensor(np.asarray(A) if not isinstance(A, torch.Tensor) else A,
                        dtype=torch.float64)
    B = torch.as_tensor(np.asarray(B) if not isinstance(B, torch.Tensor) else B,
                        dtype=torch.float64)
    return _dense_block(A, B, name, params)


def _block_rows(n_cols: int, block_bytes: float = 2**26) -> int:
    return max(1, int(block_bytes // (8 * max(n_cols, 1))))


def _brute(X_ref, X_new, k: int, name, params, exclude_self: bool):
    """Exact k nearest rows of ``X_ref`` for each row of ``X_new`` by blocked brute force:
    ``(indices, distances)``, nearest first (self excluded when ``exclude_self``, the two
    matrices then being the same)."""
    sparse = is_sparse(X_ref)
    n, m = X_ref.shape[0], X_new.shape[0]
    idx = torch.empty(m, k, dtype=torch.long)
    dist = torch.empty(m, k, dtype=torch.float64)
    bs = _block_rows(n)
    block = _sparse_block if sparse else _dense_block
    for s in range(0, m, bs):
        e = min(m, s + bs)
        D = block(X_new[s:e], X_ref, name, params)
        if exclude_self:
            D[torch.arange(e - s), torch.arange(s, e)] = float("inf")
        vals, ind = torch.topk(D, k, dim=1, largest=False, sorted=True)
        idx[s:e], dist[s:e] = ind, vals
    return idx, dist


def _normalised_for_euclidean(X, name):
    """Rows mapped so that Euclidean distances give the metric: unit rows for cosine and
    correlation (:math:`\\|u - v\\|^2 = 2 d`); ``None`` when a row has zero norm (the
    conventions above then need the brute-force search)."""
    U, zero = _unit_rows(X, name == "correlation")
    return None if bool(zero.any()) else U


def knn_metric(X, k: int, metric="euclidean", metric_params=None, *, method: str = "auto",
               random_state: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """k nearest neighbours under ``metric`` (self excluded): ``(indices, distances)``, each
    ``(n, k)``, nearest first. ``X``: a dense float64 tensor or a scipy sparse matrix.

    ``method``: ``"auto"``, ``"exact"``, ``"approximate"`` or ``"pynndescent"``, as in the module
    docstring (sparse X: exact brute force up to ``5 * EXACT_METRIC_MAX_N`` rows, pynndescent
    above or when asked)."""
    name, params = check_metric(metric, metric_params, sparse=is_sparse(X),
                                n_features=X.shape[1])
    n = X.shape[0]
    if not 1 <= k <= n - 1:
        raise ValueError(f"k must lie in [1, n-1] = [1, {n - 1}], got {k}.")
    if method not in ("auto", "exact", "approximate", "pynndescent"):
        raise ValueError("method must be 'auto', 'exact', 'approximate' or 'pynndescent', got "
                         f"{method!r}.")
    if is_sparse(X):
        if method in ("approximate", "pynndescent") or (method == "auto"
                                                       and n > EXACT_METRIC_MAX_N * 5):
            found = _pynndescent_or_warn(X, k, name, params, method, random_state)
            if found is not None:
                return found
        return _brute(sp.csr_matrix(X, dtype=np.float64), sp.csr_matrix(X, dtype=np.float64),
                      k, name, params, True)
    if name in ("euclidean", "sqeuclidean"):
        idx, d2 = knn(X, k, method=method, random_state=random_state)
        d2 = d2.clamp_min(0.0)
        return idx, (d2 if name == "sqeuclidean" else d2.sqrt())
    if name in ("cosine", "correlation"):
        U = _normalised_for_euclidean(X, name)
        if U is not None:
            idx, d2 = knn(U, k, method=method, random_state=random_state)
            return idx, (0.5 * d2).clamp(0.0, 2.0)
    if method in ("approximate", "pynndescent") or (method == "auto" and n > EXACT_METRIC_MAX_N):
        found = _pynndescent_or_warn(X, k, name, params, method, random_state)
        if found is not None:
            return found
    return _brute(X, X, k, name, params, True)


def _pynndescent_or_warn(X, k, name, params, method, random_state):
    """pynndescent's neighbours; without pynndescent, ``None`` and a ``RuntimeWarning`` when
    ``method="auto"`` (the caller then runs the exact brute force), an ``ImportError`` else."""
    try:
        return pynndescent_search(X, k, name, params, random_state)
    except ImportError:
        if method != "auto":
            raise
    warnings.warn(f"{X.shape[0]} points with metric="
                  f"{name if isinstance(name, str) else 'callable'}: exact brute-force "
                  "neighbours (O(n^2)); install pynndescent (pip install probdr[ann]) for an "
                  "approximate search.", RuntimeWarning, stacklevel=4)
    return None


def knn_query_metric(X_ref, X_new, k: int, metric="euclidean", metric_params=None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact ``k`` nearest rows of ``X_ref`` for every row of ``X_new`` under ``metric``:
    ``(indices, distances)``, nearest first (a new row equal to a reference row has it as a
    neighbour at distance 0)."""
    name, params = check_metric(metric, metric_params, sparse=is_sparse(X_ref))
    n = X_ref.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"k must lie in [1, {n}] (the number of reference points), got {k}.")
    if not is_sparse(X_ref) and name in ("euclidean", "sqeuclidean"):
        idx, d2 = knn_query(X_ref, X_new, k)
        d2 = d2.clamp_min(0.0)
        return idx, (d2 if name == "sqeuclidean" else d2.sqrt())
    if is_sparse(X_ref):
        X_ref = sp.csr_matrix(X_ref, dtype=np.float64)
        X_new = sp.csr_matrix(X_new, dtype=np.float64)
    return _brute(X_ref, X_new, k, name, params, False)


def precomputed_neighbors(D, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The ``k`` nearest neighbours from a precomputed distance matrix (self excluded):
    a dense square matrix, or a sparse one whose stored entries in each row are that row's
    neighbour distances (scanpy's ``obsp['distances']``; a stored diagonal is ignored).
    Validated: square, finite, non-negative, zero diagonal (dense), at least ``k`` stored
    neighbours per row (sparse)."""
    n = D.shape[0]
    if D.ndim != 2 or D.shape[1] != n:
        raise ValueError("metric='precomputed' needs a square (n, n) distance matrix, got shape "
                         f"{tuple(D.shape)}.")
    if not 1 <= k <= n - 1:
        raise ValueError(f"k must lie in [1, n-1] = [1, {n - 1}], got {k}.")
    if is_sparse(D):
        C = sp.csr_matrix(D, dtype=np.float64)
        C.sort_indices()
        r = np.repeat(np.arange(n), np.diff(C.indptr))
        off = C.indices != r
        data, cols, r = C.data[off], C.indices[off], r[off]
        if not np.isfinite(data).all() or (data < 0).any():
            raise ValueError("the precomputed distances must be finite and non-negative.")
        counts = np.bincount(r, minlength=n)
        if counts.min() < k:
            bad = int(np.argmin(counts))
            raise ValueError(
                f"the sparse precomputed distance matrix stores {int(counts.min())} neighbours "
                f"in row {bad}, fewer than the {k} this fit needs; compute more neighbours "
                "(e.g. scanpy's n_neighbors) or lower n_neighbors / perplexity.")
        return sparse_rows_topk(r, cols, data, n, k)
    Dt = check_distance_matrix(D).clone()
    Dt.fill_diagonal_(float("inf"))
    vals, ind = torch.topk(Dt, k, dim=1, largest=False, sorted=True)
    return ind, vals


def check_distance_matrix(D, *, symmetric: bool = False) -> torch.Tensor:
    """A dense precomputed distance matrix as float64, validated: square, finite,
    non-negative, zero diagonal and (``symmetric``) symmetric, to 1e-8 of its scale."""
    Dt = torch.as_tensor(np.asarray(D) if not isinstance(D, torch.Tensor) else D,
                         dtype=torch.float64)
    if Dt.ndim != 2 or Dt.shape[0] != Dt.shape[1]:
        raise ValueError(f"a precomputed distance matrix must be square, got {tuple(Dt.shape)}.")
    if not torch.isfinite(Dt).all() or (Dt < 0).any():
        raise ValueError("the precomputed distances must be finite and non-negative.")
    tol = 1e-8 * float(Dt.max().clamp_min(1.0))
    diag = Dt.diagonal()
    if (diag.abs() > tol).any():
        raise ValueError("a precomputed distance matrix has a zero diagonal (d(x, x) = 0); "
                         f"the largest diagonal entry is {float(diag.abs().max()):.3g}.")
    if symmetric and float((Dt - Dt.T).abs().max()) > tol:
        raise ValueError("this method needs a symmetric precomputed distance matrix.")
    return Dt


def sparse_rows_topk(r: np.ndarray, cols: np.ndarray, vals: np.ndarray, n_rows: int, k: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` smallest stored values of each row of a sparse matrix given as row-sorted
    ``(rows, cols, values)`` (every row holding at least ``k``): ``(cols, values)``, each
    ``(n_rows, k)``, smallest first."""
    counts = np.bincount(r, minlength=n_rows)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    slot = np.arange(r.size) - start[r]
    table = np.full((n_rows, int(counts.max())), np.inf)
    ind = np.zeros(table.shape, dtype=np.int64)
    table[r, slot] = vals
    ind[r, slot] = cols
    order = np.argsort(table, axis=1, kind="stable")[:, :k]
    return (torch.from_numpy(np.take_along_axis(ind, order, 1)),
            torch.from_numpy(np.take_along_axis(table, order, 1)))


def check_knn(knn, n: int | None, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate ``precomputed_knn=(indices, distances)`` (each ``(n, k')``; umap-learn's layout,
    where column 0 may be the point itself, is accepted and that column dropped) and return the
    ``k`` nearest, self excluded, sorted."""
    if not (isinstance(knn, (tuple, list)) and len(knn) == 2):
        raise ValueError("precomputed_knn must be a pair (indices, distances) of (n, k) arrays.")
    ind = np.asarray(knn[0])
    dist = np.asarray(knn[1], dtype=np.float64)
    if ind.ndim != 2 or ind.shape != dist.shape:
        raise ValueError("precomputed_knn: indices and distances must be 2-D arrays of one shape, "
                         f"got {ind.shape} and {dist.shape}.")
    if n is not None and ind.shape[0] != n:
        raise ValueError(f"precomputed_knn has {ind.shape[0]} rows for {n} samples.")
    n = ind.shape[0]
    if not np.issubdtype(ind.dtype, np.integer) or ind.min() < 0 or ind.max() >= n:
        raise ValueError(f"precomputed_knn indices must be integers in [0, {n - 1}].")
    if not np.isfinite(dist).all() or (dist < 0).any():
        raise ValueError("precomputed_knn distances must be finite and non-negative.")
    is_self = ind == np.arange(n)[:, None]
    if is_self.sum(1).max() > 1:
        raise ValueError("precomputed_knn lists a point as its own neighbour more than once.")
    key = np.where(is_self, np.inf, dist)
    order = np.argsort(key, axis=1, kind="stable")
    have = ind.shape[1] - int(is_self.sum(1).max())
    if have < k:
        raise ValueError(f"precomputed_knn holds {have} neighbours per point (self excluded), "
                         f"fewer than the {k} this fit needs.")
    order = order[:, :k]
    if np.take_along_axis(is_self, order, 1).any():  # pragma: no cover - guarded above
        raise ValueError("precomputed_knn: not enough neighbours besides the point itself.")
    return (torch.from_numpy(np.take_along_axis(ind, order, 1).astype(np.int64)),
            torch.from_numpy(np.take_along_axis(dist, order, 1)))
