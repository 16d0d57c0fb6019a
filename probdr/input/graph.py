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

from ..kernels import GaussianKernel
from ..laws.graph import GraphLaw, GraphPrior, NEdgeGraph, NEdgePrior, get_prior
from ..laws.weights import MAX_LOGIT, DenseWeights, SparseWeights
from ..laws.wishart import KNNLaplacian
from ..ot.sea import symmetric_entropic
from . import affinities
from .neighbors import knn, knn_query

__all__ = ["AFFINITIES", "knn_edges", "build_input_graph", "new_point_rows", "sea_input_graph", "sea_affinity",
           "knn_laplacian", "euclidean_distance_matrix", "geodesic_distances"]

AFFINITIES = ("entropic", "umap", "binary")


def knn_edges(X: torch.Tensor, k: int, *, neighbors: str = "auto", random_state: int = 0
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``k`` nearest neighbours of every row of ``X`` as an edge list: ``(rows, cols, d2)``
    with ``rows = [0]*k + [1]*k + ...``, ``cols`` the neighbours (self excluded) and ``d2`` the
    ``(n, k)`` squared distances, nearest first."""
    n = X.shape[0]
    idx, d2 = knn(X, k, method=neighbors, random_state=random_state)
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
    """
    n = X.shape[0]
    kind = _prior_kind(prior_x)
    symmetrize = kind in ("B~",)
    k = _input_k(n, affinity, perplexity, n_neighbors)
    rows, cols, d2 = knn_edges(X, k, neighbors=neighbors, random_state=random_state)
    logk = _row_log_weights(d2, affinity, perplexity, k)
    weights = SparseWeights(rows, cols, logk.flatten().to(torch.float64), n)
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


def new_point_rows(X_new: torch.Tensor, X_ref: torch.Tensor, prior_x: str | GraphPrior = "D",
                   affinity: str = "entropic", *, perplexity: float = 30.0,
                   n_neighbors: int | None = None) -> torch.Tensor:
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
    """
    n, m = X_ref.shape[0], X_new.shape[0]
    k = _input_k(n + 1, affinity, perplexity, n_neighbors)
    idx, d2 = knn_query(X_ref, X_new, k)
    logk = _row_log_weights(d2, affinity, perplexity, k)
    kind = _prior_kind(prior_x)
    values = torch.sigmoid(logk) if kind in ("B", "B~") else torch.softmax(logk, dim=1)
    rows = torch.arange(m).repeat_interleave(k)
    return torch.sparse_coo_tensor(torch.stack([rows, idx.flatten()]), values.flatten(),
                                   (m, n), check_invariants=False).coalesce()


def sea_input_graph(X: torch.Tensor, perplexity: float, tol: float = 1e-5) -> NEdgeGraph:
    r"""Input graph law of SNEkhorn: the E law with weights :math:`\mathbf P^{se}` (SEA, diagonal
    excluded), whose mean is :math:`n\mathbf P^{se}/\sum\mathbf P^{se} = \mathbf P^{se}`."""
    log_P = symmetric_entropic(X, perplexity, exclude_self=True, tol=tol, return_log=True)
    return NEdgePrior().posterior(DenseWeights(log_P))


def sea_affinity(X: torch.Tensor, perplexity: float) -> torch.Tensor:
    r"""The symmetric entropic affinity :math:`\mathbf P^{se}` (self-loops kept, the thesis'
    convention), dense ``(n, n)``: DistR's input similarity."""
    return symmetric_entropic(X, perplexity)


def knn_laplacian(X: torch.Tensor, n_neighbors: int = 15, *, neighbors: str = "auto",
                  random_state: int = 0) -> KNNLaplacian:
    r"""Laplacian of the symmetrised binary kNN graph, :math:`A = \mathbb 1[A^{kNN} +
    A^{kNN\top} \ge 1]` (``n_neighbors`` neighbours per point, self excluded), as [004] builds
    Laplacian eigenmaps' graph."""
    n = X.shape[0]
    if not 1 <= n_neighbors <= n - 1:
        raise ValueError(f"n_neighbors={n_neighbors} must lie in [1, n - 1] = [1, {n - 1}] "
                         f"for n={n} samples.")
    r, c, _ = knn_edges(X, n_neighbors, neighbors=neighbors, random_state=random_state)
    keys = torch.cat([r * n + c, c * n + r]).unique()
    return KNNLaplacian(keys // n, keys % n, n)


def euclidean_distance_matrix(X) -> np.ndarray:
    """Pairwise Euclidean distances (float64, zero diagonal)."""
    from scipy.spatial.distance import cdist

    X = np.asarray(X.detach().cpu() if isinstance(X, torch.Tensor) else X, dtype=np.float64)
    D = cdist(X, X)
    np.fill_diagonal(D, 0.0)
    return D


def geodesic_distances(X, n_neighbors: int | None = None) -> tuple[np.ndarray, int]:
    r"""Shortest-path (geodesic) distances on the symmetrised kNN graph (Isomap's first two
    steps), edges weighted by Euclidean length.

    ``n_neighbors=None`` starts at 5 (sklearn Isomap's default) and increases k until the graph
    is connected. With an explicit k a disconnected graph raises ``ValueError`` (GW cannot use
    infinite distances). Returns ``(D, k)``.
    """
    from scipy.sparse.csgraph import connected_components, shortest_path
    from sklearn.neighbors import kneighbors_graph

    X = np.asarray(X.detach().cpu() if isinstance(X, torch.Tensor) else X, dtype=np.float64)
    n = X.shape[0]
    auto = n_neighbors is None
    k = 5 if auto else int(n_neighbors)
    k = min(k, n - 1)
    while True:
        G = kneighbors_graph(X, k, mode="distance", include_self=False)
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
