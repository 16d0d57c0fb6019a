r"""The input side of every family: X -> neighbours -> affinities -> input graph.

One neighbour step (:mod:`probdr.input.search`, exact or approximate kNN of
:mod:`probdr.input.neighbors`)
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

from .._utils import check_array, check_data, check_number
from ..kernels import GaussianKernel
from ..laws.edge_priors import network_pairs
from ..laws.graph import GraphLaw, GraphPrior, NEdgeGraph, NEdgePrior, get_prior
from ..laws.weights import MAX_LOGIT, DenseWeights, SparseWeights
from ..laws.wishart import KNNLaplacian
from ..ot.sea import symmetric_entropic
from . import affinities
from .distances import check_distance_matrix, is_sparse
from .search import (
    calibrated_lists,
    is_metric,
    knn_edges,
    neighbor_lists,
    pair_costs,
    query_lists,
)

__all__ = ["AFFINITIES", "knn_edges", "neighbor_lists", "query_lists", "build_input_graph",
           "precomputed_input_graph", "new_point_rows", "sea_input_graph", "sea_affinity",
           "knn_laplacian", "dense_cost", "euclidean_distance_matrix", "geodesic_distances"]

AFFINITIES = ("entropic", "umap", "binary")


def prior_kind(prior) -> str:
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

    An ``edge_prior`` from an observed network (:func:`~probdr.laws.edge_priors.from_graph`, a
    sparse :math:`\pi`, or a product with one: :func:`~probdr.laws.edge_priors.network_pairs`)
    adds the network's pairs that the lists miss to the edge list, at
    :math:`\pi_{ij} K_{X,ij}` with :math:`K_{X,ij}` computed from the data: the cost
    :math:`d(x_i, x_j)^2` with row :math:`i`'s calibration, which is made on its neighbour
    lists alone (entropic bandwidths :math:`\varepsilon_i`, UMAP's :math:`\rho_i, \sigma_i`)
    and applied to the union; so a row's perplexity is that of its lists, and the network's
    pairs then add their weight. ``"binary"`` has :math:`K_X = 0` off the lists: no pair is
    added. Other edge priors (labels, numbers, dense arrays) re-weight the lists only.
    """
    if affinity == "precomputed":
        return precomputed_input_graph(X, prior_x, edge_prior=edge_prior)
    X = check_data(X)
    n = X.shape[0]
    kind = prior_kind(prior_x)
    symmetrize = kind in ("B~",)
    k = _input_k(n, affinity, perplexity, n_neighbors)
    idx, logk, params = calibrated_lists(
        X, k, lambda d2: _row_calibration(d2, affinity, perplexity, k), neighbors=neighbors,
        random_state=random_state, metric=metric, metric_params=metric_params,
        precomputed_knn=precomputed_knn)
    rows, cols = torch.arange(n).repeat_interleave(k), idx.flatten()
    # each row's neighbours by index: the edge list is then in coalesced order, which the weights
    # keep without a sort and a copy of the whole list (gigabytes at a million points)
    cols, order = cols.view(n, k).sort(1)
    cols = cols.flatten()
    logk = logk.to(torch.float64).gather(1, order).flatten()
    del order
    network = network_pairs(edge_prior) if affinity != "binary" else None
    if network is not None:
        rows, cols, logk = _with_network_pairs(X, (rows, cols, logk), params, network, affinity,
                                               metric=metric, metric_params=metric_params)
    weights = SparseWeights(rows, cols, logk, n)
    prior = get_prior(prior_x.replace("~", "") if isinstance(prior_x, str) else prior_x, edge_prior)
    law = prior.posterior(weights)
    return law.symmetrized() if symmetrize else law


def _input_k(n: int, affinity: str, perplexity: float, n_neighbors: int | None) -> int:
    """Neighbours per row of the input graph (the point itself not counted)."""
    if affinity == "entropic":
        k = n_neighbors if n_neighbors is not None else int(min(n - 1, math.ceil(3 * perplexity)))
    else:
        k = (n_neighbors - 1) if n_neighbors is not None else min(n - 1, 14)
    return min(k, n - 1)


def _row_log_weights(d2: torch.Tensor, affinity: str, perplexity: float, k: int) -> torch.Tensor:
    r""":math:`\log K_X` on neighbour lists ``d2`` (n, k): the calibration of ``affinity``."""
    return _row_calibration(d2, affinity, perplexity, k)[0]


def _row_calibration(d2: torch.Tensor, affinity: str, perplexity: float, k: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``(log K_X, parameters)`` of neighbour lists ``d2`` (n, k): the log-weights on the
    lists and each row's calibration (:func:`_row_parameters`)."""
    params = _row_parameters(d2, affinity, perplexity, k)
    return _calibrated_log_k(d2, params, affinity), params


def _with_network_pairs(X, lists, params: torch.Tensor, network, affinity: str, *,
                        metric="euclidean", metric_params=None):
    r"""The edge list ``lists = (rows, cols, log K)`` (in coalesced order) with the pairs of an
    observed network (``network = (rows, cols)``, :func:`~probdr.laws.edge_priors.network_pairs`)
    that it misses, at :math:`\log K_{X,ij}` computed from the data: the cost
    :math:`d(x_i, x_j)^2` under ``metric`` with row :math:`i`'s calibration on its neighbour
    lists (``params``). Pairs at infinite cost (not stored in a sparse precomputed distance
    matrix) have :math:`K = 0` and are left out. Returns the union ``(rows, cols, log K)``."""
    rows, cols, logk = lists
    n = params.shape[0]
    r, c = (t.to(torch.long).flatten() for t in network)
    keys, q = rows * n + cols, r * n + c
    if keys.numel():
        pos = torch.searchsorted(keys, q).clamp_max(keys.numel() - 1)
        new = (keys[pos] != q) & (r != c)
    else:
        new = r != c
    r, c = r[new], c[new]
    d2 = pair_costs(X, r, c, metric=metric, metric_params=metric_params)
    finite = torch.isfinite(d2)
    r, c, d2 = r[finite], c[finite], d2[finite]
    if not r.numel():
        return rows, cols, logk
    lk = _calibrated_log_k(d2[:, None], params[r], affinity)[:, 0].to(logk.dtype)
    return torch.cat([rows, r]), torch.cat([cols, c]), torch.cat([logk, lk])


def _row_parameters(d2: torch.Tensor, affinity: str, perplexity: float, k: int) -> torch.Tensor:
    r"""Each row's calibration on its neighbour lists ``d2`` (n, k), ``(n, 2)`` float64: the
    row's smallest cost and entropic bandwidth :math:`(\min_j C_{ij}, \varepsilon_i)`
    (``"entropic"``), UMAP's :math:`(\rho_i, \sigma_i)` (``"umap"``), nothing (``"binary"``)."""
    if affinity == "entropic":
        eps = affinities.entropic_bandwidths(d2, perplexity)
        return torch.stack([d2.min(1).values.to(torch.float64), eps.to(torch.float64)], 1)
    if affinity == "umap":
        return torch.stack(affinities.umap_bandwidths(d2, n_neighbors=k + 1), 1)
    if affinity == "binary":
        return torch.zeros((d2.shape[0], 2), dtype=torch.float64)
    raise ValueError(f"affinity must be one of {AFFINITIES}, got {affinity!r}.")


def _calibrated_log_k(d2: torch.Tensor, params: torch.Tensor, affinity: str) -> torch.Tensor:
    r""":math:`\log K_X` at costs ``d2`` ``(m, c)`` with the rows' calibration ``params``
    ``(m, 2)`` (:func:`_row_parameters`): the neighbour lists, or any pairs of a row with the
    calibration of that row's lists. Entropic: :math:`-(C_{ij} - \min_l C_{il})/\varepsilon_i`
    (the row shift leaves :math:`P^D` unchanged and keeps the lists from underflowing); UMAP:
    :math:`\mathrm{logit}\, v_{j|i}`; binary: ``MAX_LOGIT`` (:math:`K = \infty` on neighbours)."""
    if affinity == "entropic":
        d2s = d2 - params[:, 0, None].to(d2.dtype)
        return GaussianKernel(params[:, 1]).log_k(d2s)
    if affinity == "umap":
        v = affinities.fuzzy_membership(d2.to(torch.float64).sqrt(), params[:, 0], params[:, 1])
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
    kind = prior_kind(prior_x)
    if affinity == "precomputed":
        return precomputed_rows(X_new, kind, n_ref)
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
    if is_metric(metric, "euclidean") and not is_sparse(X):
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

    precomputed = is_metric(metric, "precomputed")
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
    A^{kNN\top} \ge 1]` (``n_neighbors`` neighbours per point, self excluded), as Ravuri and Lawrence (2025) build
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

    if not is_metric(metric, "euclidean"):  # edges weighted by the metric
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
    :math:`\pi \odot A` for D and E, :math:`\pi \odot A/(1-A)` for B; where :math:`A` is 0
    the product is 0, so a network prior adds no pair here.
    """
    if isinstance(A, GraphLaw):
        return A
    kind = prior_kind(prior_x)
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


def precomputed_rows(A_new, kind: str, n: int | None) -> torch.Tensor:
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
