r"""The input side of every family: X -> neighbours -> affinities -> input graph.

One neighbour step (:func:`knn_edges`, exact or approximate kNN of :mod:`probdr.input.neighbors`)
and one set of calibrations (:mod:`probdr.input.affinities`, the entropic bisection of
:func:`probdr.ot.entropic.bisect_log_beta`) feed every family's input:

* :func:`build_input_graph` -- the posterior law of the input graph of the graph-coupling family
  (SNE, t-SNE, LargeVis, UMAP, ccPCA), Proposition 1 of Van Assel et al. (2022);
* :func:`sea_input_graph` and :func:`sea_affinity` -- the symmetric entropic affinity (SNEkhorn,
  DistR; Van Assel et al., NeurIPS 2023);
* :func:`knn_laplacian` -- the Laplacian of the symmetrised binary kNN graph (the Wishart family of
  ProbDR, Ravuri & Lawrence 2025);
* :func:`euclidean_distance_matrix`, :func:`geodesic_distances` -- the dissimilarities of GW-MDS.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .._compute.distributed import all_gather_rows, broadcast_, process_group_rows
from .._utils import check_array, check_data, check_number
from ..kernels import GaussianKernel
from ..laws.graph import GraphLaw, GraphPrior, NEdgeGraph, NEdgePrior, get_prior
from ..laws.weights import MAX_LOGIT, DenseWeights, SparseWeights
from ..laws.wishart import KNNLaplacian
from ..ot.sea import symmetric_entropic
from . import affinities
from .distances import (
    check_distance_matrix,
    check_knn,
    is_sparse,
    knn_metric,
    knn_query_metric,
    precomputed_neighbors,
    sparse_rows_topk,
)
from .neighbors import knn, knn_query

__all__ = ["AFFINITIES", "knn_edges", "neighbor_lists", "query_lists", "build_input_graph",
           "precomputed_input_graph", "new_point_rows", "sea_input_graph", "sea_affinity",
           "knn_laplacian", "dense_cost", "euclidean_distance_matrix", "geodesic_distances"]

AFFINITIES = ("entropic", "umap", "binary")


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
    if isinstance(metric, str) and metric == "precomputed":
        idx, d = precomputed_neighbors(X, k)
        return idx, d.square()
    if isinstance(metric, str) and metric == "euclidean" and not is_sparse(X):
        return knn(X, k, method=neighbors, random_state=random_state)
    idx, d = knn_metric(X, k, metric, metric_params, method=neighbors, random_state=random_state)
    return idx, d.square()


def query_lists(X_ref, X_new, k: int, *, metric="euclidean", metric_params=None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The ``k`` nearest reference rows of each new row and their costs :math:`d^2`, nearest
    first. With ``metric="precomputed"``, ``X_new`` holds the new points' distances to the
    reference points, ``(m, n)`` (dense, or sparse with the neighbour distances stored)."""
    if isinstance(metric, str) and metric == "precomputed":
        n = X_ref.shape[0] if X_ref is not None else X_new.shape[1]
        if X_new.shape[1] != n:
            raise ValueError(f"with metric='precomputed', transform takes the (m, {n}) distances "
                             f"of the new points to the training points; got {X_new.shape[1]} "
                             "columns.")
        return _rows_neighbors(X_new, k)
    if isinstance(metric, str) and metric == "euclidean" and not is_sparse(X_ref):
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


def _prior_kind(prior) -> str:
    return prior.kind if isinstance(prior, GraphPrior) else str(prior).upper()


def build_input_graph(
    X: torch.Tensor,
    prior_x: str | GraphPrior = "D",
    affinity: str = "entropic",
    *,
    perplexity: float = 30.0,
    n_neighbors: int | None = None,
    edge_prior=None,
    neighbors: str = "auto",
    random_state: int = 0,
    metric="euclidean",
    metric_params=None,
    precomputed_knn=None,
) -> GraphLaw:
    r"""The posterior law of the input graph, :math:`W_X \mid X \sim \mathbb P_{\mathcal P_X}
    (\cdot; \pi \odot K_X)` (Proposition 1), on a kNN edge list.

    ``affinity`` sets :math:`K_X` on the neighbour lists:

    * ``"entropic"``: :math:`K_{X,ij} = \exp(-\|x_i - x_j\|^2/\varepsilon_i)`, bandwidths from the
      perplexity; ``3 * perplexity`` neighbours unless ``n_neighbors`` is given (openTSNE's choice).
      Under the D prior the mean is the row-stochastic :math:`P^D`.
    * ``"umap"``: :math:`K_X = v/(1-v)` with UMAP memberships :math:`v_{j|i}` on
      ``n_neighbors - 1`` neighbours (self counted, as umap-learn), so the B posterior has mean
      :math:`v`; with ``prior_x="B~"`` the law is the symmetrised graph, mean the fuzzy union.
    * ``"binary"``: 0/1 kNN graph (:math:`K_X = \infty` on neighbours).
    * ``"precomputed"``: ``X`` is the affinity itself (:func:`precomputed_input_graph`).

    ``metric``, ``metric_params`` and ``precomputed_knn`` set the neighbours and their costs
    :math:`C = d^2` (:func:`neighbor_lists`).
    """
    if affinity == "precomputed":
        return precomputed_input_graph(X, prior_x, edge_prior=edge_prior)
    X = check_data(X)
    n = X.shape[0]
    kind = _prior_kind(prior_x)
    symmetrize = kind in ("B~",)
    k = _input_k(n, affinity, perplexity, n_neighbors)
    block = process_group_rows(n)  # data-parallel: this rank's rows (None without a group)
    if block is not None and precomputed_knn is None and metric != "precomputed" \
            and neighbors != "approximate" and n <= SHARDED_SEARCH_MAX_N:
        # each rank searches and calibrates its rows; all ranks gather the same graph
        idx, d2 = _block_neighbors(X, block, k, metric, metric_params)
        idx, logk = all_gather_rows(idx, _row_log_weights(d2, affinity, perplexity, k), n=n)
        rows, cols = torch.arange(n).repeat_interleave(k), idx.flatten()
    else:
        rows, cols, d2 = knn_edges(X, k, neighbors=neighbors, random_state=random_state,
                                   metric=metric, metric_params=metric_params,
                                   precomputed_knn=precomputed_knn)
        if block is not None:  # a search run whole on every rank: rank 0's lists for all
            cols, d2 = broadcast_(cols.contiguous()), broadcast_(d2.contiguous())
        logk = _row_log_weights(d2, affinity, perplexity, k)
    del d2
    # each row's neighbours by index: the edge list is then in coalesced order, which the weights
    # keep without a sort and a copy of the whole list (gigabytes at a million points)
    cols, order = cols.view(n, k).sort(1)
    logk = logk.to(torch.float64).gather(1, order)
    del order
    weights = SparseWeights(rows, cols.flatten(), logk.flatten(), n)
    prior = get_prior(prior_x.replace("~", "") if isinstance(prior_x, str) else prior_x, edge_prior)
    law = prior.posterior(weights)
    return law.symmetrized() if symmetrize else law


#: in a data-parallel fit, the neighbour search is split by query rows (blocked brute force,
#: exact) up to this many points; above, every rank runs the 1-process search
SHARDED_SEARCH_MAX_N = 20_000


def _block_neighbors(X, block: tuple[int, int], k: int, metric, metric_params):
    """The ``k`` nearest neighbours (self excluded) and costs :math:`d^2` of the rows
    ``block = (start, stop)`` of X among all rows: exact blocked queries."""
    s, e = block
    if isinstance(metric, str) and metric == "euclidean" and not is_sparse(X):
        idx, d2 = knn_query(X, X[s:e], k + 1)
    else:
        idx, d = knn_query_metric(X, X[s:e], k + 1, metric, metric_params)
        d2 = d.square()
    own = idx == torch.arange(s, e)[:, None]
    own[:, -1] |= ~own.any(1)  # the row hidden by k + 1 duplicates: drop the farthest
    return idx[~own].view(e - s, k), d2[~own].view(e - s, k)


def _input_k(n: int, affinity: str, perplexity: float, n_neighbors: int | None) -> int:
    """Neighbours per row of the input graph (the point itself not counted)."""
    if affinity == "entropic":
        k = n_neighbors if n_neighbors is not None else int(min(n - 1, math.ceil(3 * perplexity)))
    else:
        k = (n_neighbors - 1) if n_neighbors is not None else min(n - 1, 14)
    return min(k, n - 1)


def _row_log_weights(d2: torch.Tensor, affinity: str, perplexity: float, k: int) -> torch.Tensor:
    r""":math:`\log K_X` on neighbour lists ``d2`` (n, k): the calibration of ``affinity``."""
    if affinity == "entropic":
        eps = affinities.entropic_bandwidths(d2, perplexity)
        d2s = d2 - d2.min(1, keepdim=True).values  # row shift: P^D unchanged, no underflow
        return GaussianKernel(eps).log_k(d2s)
    if affinity == "umap":
        v = affinities.umap_membership(d2, n_neighbors=k + 1)
        return torch.logit(v.clamp(0, 1)).clamp(-MAX_LOGIT, MAX_LOGIT)
    if affinity == "binary":
        return torch.full_like(d2, MAX_LOGIT)
    raise ValueError(f"affinity must be one of {AFFINITIES}, got {affinity!r}.")


def new_point_rows(X_new, X_ref, prior_x: str | GraphPrior = "D",
                   affinity: str = "entropic", *, perplexity: float = 30.0,
                   n_neighbors: int | None = None, metric="euclidean", metric_params=None,
                   n_ref: int | None = None) -> torch.Tensor:
    r"""The input-graph rows of new points against the reference (training) points: the mean
    :math:`\mathbb E[W_{X,i\cdot} \mid X]` of each new node's edges to the reference nodes,
    ``(m, n)`` sparse COO, float64.

    Each new point is a new node of the same model: its neighbours among the reference points
    (the same count as in :func:`build_input_graph`) and its affinity with the same calibration
    (its own entropic bandwidth from the perplexity, or its own UMAP :math:`\rho, \sigma`).
    The row mean follows the input prior: D (and E, whose row given its degree is the D law) gives
    the row-stochastic :math:`P^D_{i\cdot}`; B and B~ the memberships :math:`K/(1+K)` (the new
    node's own edges; the reference nodes' neighbour lists are those of the fit). New points are
    independent given the reference points; an edge prior of the fit does not extend to them
    (:math:`\pi = 1`).

    With ``affinity="precomputed"``, ``X_new`` is the new points' affinities to the reference
    points, ``(m, n)``, normalised as the input prior's mean (rows summing to 1 for D and E,
    memberships in [0, 1] for B); with ``metric="precomputed"`` it is their distances.
    """
    kind = _prior_kind(prior_x)
    if affinity == "precomputed":
        return _precomputed_rows(X_new, kind, n_ref)
    n = X_ref.shape[0] if X_ref is not None else int(n_ref)
    m = X_new.shape[0]
    k = _input_k(n + 1, affinity, perplexity, n_neighbors)
    idx, d2 = query_lists(X_ref, X_new, k, metric=metric, metric_params=metric_params)
    logk = _row_log_weights(d2, affinity, perplexity, k)
    values = torch.sigmoid(logk) if kind in ("B", "B~") else torch.softmax(logk, dim=1)
    rows = torch.arange(m).repeat_interleave(k)
    return torch.sparse_coo_tensor(torch.stack([rows, idx.flatten()]), values.flatten(),
                                   (m, n), check_invariants=False).coalesce()


def sea_input_graph(X, perplexity: float, tol: float = 1e-5, *, metric="euclidean",
                    metric_params=None) -> NEdgeGraph:
    r"""Input graph law of SNEkhorn: the E law with weights :math:`\mathbf P^{se}` (SEA, diagonal
    excluded), whose mean is :math:`n\mathbf P^{se}/\sum\mathbf P^{se} = \mathbf P^{se}`.
    The cost is the squared Euclidean distance, or :math:`d^2` under ``metric`` (``"precomputed"``:
    X is the dense distance matrix)."""
    if isinstance(metric, str) and metric == "euclidean" and not is_sparse(X):
        log_P = symmetric_entropic(X, perplexity, exclude_self=True, tol=tol, return_log=True)
    else:
        C = dense_cost(X, metric, metric_params)
        log_P = symmetric_entropic(C, perplexity, precomputed=True, exclude_self=True, tol=tol,
                                   return_log=True)
    return NEdgePrior().posterior(DenseWeights(log_P))


def dense_cost(X, metric="euclidean", metric_params=None) -> torch.Tensor:
    r"""All pairs' costs :math:`C_{ij} = d(x_i, x_j)^2`, dense ``(n, n)`` float64, zero diagonal
    (``metric="precomputed"``: X is a dense distance matrix, validated)."""
    from ..config import check_dense
    from .distances import pairwise_distances

    precomputed = isinstance(metric, str) and metric == "precomputed"
    X = X if precomputed else check_data(X, min_samples=1)
    n = X.shape[0]
    check_dense(n, "the all-pairs cost matrix", "Use a neighbour-graph method (TSNE, UMAP).")
    if precomputed:
        if is_sparse(X):
            raise ValueError("this method needs all pairwise distances: a sparse precomputed "
                             "distance matrix holds neighbours only; pass a dense (n, n) matrix.")
        D = check_distance_matrix(X, symmetric=True)
    else:
        D = pairwise_distances(X, X, metric, metric_params)
    C = D.square()
    C.fill_diagonal_(0.0)
    return C


def sea_affinity(X: torch.Tensor, perplexity: float) -> torch.Tensor:
    r"""The symmetric entropic affinity :math:`\mathbf P^{se}` (self-loops kept, the thesis'
    convention), dense ``(n, n)``: DistR's input similarity."""
    return symmetric_entropic(X, perplexity)


def knn_laplacian(X, n_neighbors: int = 15, *, neighbors: str = "auto",
                  random_state: int = 0, metric="euclidean", metric_params=None) -> KNNLaplacian:
    r"""Laplacian of the symmetrised binary kNN graph, :math:`A = \mathbb 1[A^{kNN} +
    A^{kNN\top} \ge 1]` (``n_neighbors`` neighbours per point, self excluded), as [004] builds
    Laplacian eigenmaps' graph; ``metric`` as in :func:`neighbor_lists`."""
    X = check_data(X)
    n = X.shape[0]
    n_neighbors = check_number(n_neighbors, "n_neighbors", integer=True, low=1)
    if not 1 <= n_neighbors <= n - 1:
        raise ValueError(f"n_neighbors={n_neighbors} must lie in [1, n - 1] = [1, {n - 1}] "
                         f"for n={n} samples.")
    r, c, _ = knn_edges(X, n_neighbors, neighbors=neighbors, random_state=random_state,
                        metric=metric, metric_params=metric_params)
    keys = torch.cat([r * n + c, c * n + r]).unique()
    return KNNLaplacian(keys // n, keys % n, n)


def euclidean_distance_matrix(X) -> np.ndarray:
    """Pairwise Euclidean distances (float64, zero diagonal)."""
    from scipy.spatial.distance import cdist

    X = check_array(X, name="X", min_samples=1).cpu().numpy()
    D = cdist(X, X)
    np.fill_diagonal(D, 0.0)
    return D


def geodesic_distances(X, n_neighbors: int | None = None, *, metric="euclidean",
                       metric_params=None) -> tuple[np.ndarray, int]:
    r"""Shortest-path (geodesic) distances on the symmetrised kNN graph (Isomap's first two
    steps), edges weighted by Euclidean length.

    ``n_neighbors=None`` starts at 5 (sklearn Isomap's default) and increases k until the graph
    is connected. With an explicit k a disconnected graph raises ``ValueError`` (GW cannot use
    infinite distances). Returns ``(D, k)``.
    """
    from scipy.sparse.csgraph import connected_components, shortest_path
    from sklearn.neighbors import kneighbors_graph

    if not (isinstance(metric, str) and metric == "euclidean"):  # edges weighted by the metric
        X = dense_cost(X, metric, metric_params).sqrt().cpu().numpy()
        graph_kw = {"metric": "precomputed"}
    else:
        X = check_array(X, name="X").cpu().numpy()
        graph_kw = {}
    n = X.shape[0]
    auto = n_neighbors is None
    if not auto:
        check_number(n_neighbors, "n_neighbors", integer=True, low=1)
    k = 5 if auto else int(n_neighbors)
    k = min(k, n - 1)
    while True:
        G = kneighbors_graph(X, k, mode="distance", include_self=False, **graph_kw)
        G = G.maximum(G.T)
        n_comp, _ = connected_components(G, directed=False)
        if n_comp == 1:
            break
        if not auto or k >= n - 1:
            raise ValueError(
                f"the {k}-nearest-neighbour graph has {n_comp} connected components: geodesic "
                "distances between components are infinite. Increase n_neighbors (or pass "
                "n_neighbors=None to pick the smallest k that connects the graph).")
        k += 1
    D = shortest_path(G, method="D", directed=False)
    D = 0.5 * (D + D.T)
    np.fill_diagonal(D, 0.0)
    return D, k


def _entries(A) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """``(rows, cols, values, shape)`` of the positive entries of a matrix (dense, scipy sparse
    or torch sparse), validated finite and non-negative."""
    import scipy.sparse as sp

    if isinstance(A, torch.Tensor) and A.is_sparse:
        A = A.coalesce()
        (r, c), v = A.indices(), A.values().to(torch.float64)
        shape = tuple(A.shape)
    else:
        C = sp.coo_matrix(A if is_sparse(A) else np.asarray(
            A.detach().cpu() if isinstance(A, torch.Tensor) else A, dtype=np.float64))
        r, c = torch.as_tensor(C.row.astype(np.int64)), torch.as_tensor(C.col.astype(np.int64))
        v = torch.as_tensor(C.data.astype(np.float64))
        shape = tuple(C.shape)
    if not torch.isfinite(v).all() or (v < 0).any():
        raise ValueError("a precomputed affinity must be finite and non-negative.")
    keep = v > 0
    return r[keep], c[keep], v[keep], shape


def _affinity_entries(A) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """``(rows, cols, values, n)`` of a square affinity matrix, diagonal dropped."""
    shape = tuple(np.shape(A)) if not (isinstance(A, torch.Tensor) and A.is_sparse) \
        else tuple(A.shape)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError("affinity='precomputed' needs a square (n, n) affinity matrix, got "
                         f"shape {shape}.")
    r, c, v, _ = _entries(A)
    off = r != c
    return r[off], c[off], v[off], int(shape[0])


def precomputed_input_graph(A, prior_x: str | GraphPrior = "D", *, edge_prior=None) -> GraphLaw:
    r"""The input graph law from a user's affinity matrix :math:`A` (dense or sparse, or a
    probdr :class:`~probdr.laws.graph.GraphLaw`, returned as it is), taken as the input
    prior's posterior mean after its normalisation:

    * D: :math:`\mathbb E[W_X] = A_{ij} / A_{i+}` (rows normalised; a row without an edge is an
      error);
    * E: :math:`\mathbb E[W_X] = n A / A_{++}`;
    * B: :math:`\mathbb E[W_X] = A` (memberships, which must lie in [0, 1]);
    * B~: :math:`\mathbb E[W_X] = A`, which must be symmetric (UMAP's fuzzy union).

    The diagonal is ignored. An ``edge_prior`` multiplies the weights (Proposition 1):
    :math:`\pi \odot A` for D and E, :math:`\pi \odot A/(1-A)` for B.
    """
    if isinstance(A, GraphLaw):
        return A
    kind = _prior_kind(prior_x)
    r, c, v, n = _affinity_entries(A)
    counts = torch.bincount(r, minlength=n)
    if kind in ("D",) and (counts == 0).any():
        raise ValueError(f"row {int(torch.nonzero(counts == 0)[0])} of the precomputed affinity "
                         "has no off-diagonal weight: under the D prior every row needs one.")
    if not r.numel():
        raise ValueError("the precomputed affinity has no off-diagonal weight.")
    if kind in ("B", "B~"):
        if (v > 1 + 1e-12).any():
            raise ValueError("under the B prior a precomputed affinity holds edge memberships in "
                             f"[0, 1]; the largest entry is {float(v.max()):.4g}.")
        if kind == "B~":
            S = torch.sparse_coo_tensor(torch.stack([r, c]), v, (n, n),
                                        check_invariants=False).coalesce()
            asym = (S - S.t()).coalesce().values().abs()
            if asym.numel() and float(asym.max()) > 1e-8:
                raise ValueError("under the B~ prior (UMAP's symmetrised graph) a precomputed "
                                 "affinity must be symmetric; symmetrise it (e.g. the fuzzy "
                                 "union A + A.T - A * A.T) or use prior_x='B'.")
        logw = torch.logit(v.clamp(0, 1)).clamp(-MAX_LOGIT, MAX_LOGIT)
    else:
        logw = v.log()
    order = torch.argsort(r * n + c)
    weights = SparseWeights(r[order], c[order], logw[order], n)
    prior = get_prior(prior_x.replace("~", "") if isinstance(prior_x, str) else prior_x,
                      edge_prior)
    law = prior.posterior(weights)
    if kind == "B~":
        from ..laws.graph import SymmetrizedBinaryGraph

        return SymmetrizedBinaryGraph.from_mean(law.mean)
    return law


def _precomputed_rows(A_new, kind: str, n: int | None) -> torch.Tensor:
    """New points' rows from their precomputed affinities to the reference points, ``(m, n)``,
    normalised as the input prior's mean."""
    if n is not None and A_new.shape[1] != n:
        raise ValueError(f"with affinity='precomputed', transform takes the (m, {n}) affinities "
                         f"of the new points to the training points; got {A_new.shape[1]} "
                         "columns.")
    r, c, v, (m, n_cols) = _entries(A_new)
    if kind in ("B", "B~"):
        if (v > 1 + 1e-12).any():
            raise ValueError("under the B prior precomputed affinities are memberships in [0, 1].")
    else:
        tot = torch.zeros(m, dtype=torch.float64).index_add_(0, r, v)
        if (tot == 0).any():
            raise ValueError("every new point needs a positive affinity to a training point.")
        v = v / tot[r]
    return torch.sparse_coo_tensor(torch.stack([r, c]), v, (m, n_cols),
                                   check_invariants=False).coalesce()
