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
from .neighbors import knn

__all__ = ["AFFINITIES", "knn_edges", "build_input_graph", "sea_input_graph", "sea_affinity",
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
    if affinity == "entropic":
        k = n_neighbors if n_neighbors is not None else int(min(n - 1, math.ceil(3 * perplexity)))
    else:
        k = (n_neighbors - 1) if n_neighbors is not None else min(n - 1, 14)
    k = min(k, n - 1)
    rows, cols, d2 = knn_edges(X, k, neighbors=neighbors, random_state=random_state)
    if affinity == "entropic":
        eps = affinities.entropic_bandwidths(d2, perplexity)
        d2s = d2 - d2.min(1, keepdim=True).values  # row shift: P^D unchanged, no underflow
        logk = GaussianKernel(eps).log_k(d2s)
    elif affinity == "umap":
        v = affinities.umap_membership(d2, n_neighbors=k + 1)
        logk = torch.logit(v.clamp(0, 1)).clamp(-MAX_LOGIT, MAX_LOGIT)
    elif affinity == "binary":
        logk = torch.full_like(d2, MAX_LOGIT)
    else:
        raise ValueError(f"affinity must be one of {AFFINITIES}, got {affinity!r}.")
    weights = SparseWeights(rows, cols, logk.flatten().to(torch.float64), n)
    prior = get_prior(prior_x.replace("~", "") if isinstance(prior_x, str) else prior_x, edge_prior)
    law = prior.posterior(weights)
    return law.symmetrized() if symmetrize else law


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
