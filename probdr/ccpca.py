r"""ccPCA: PCA of the data averaged over the connected-component means of posterior graphs
(Van Assel et al. 2022, Algorithm 1 and Corollary 1; spec §7.2--7.3).

Why
---
Shift-invariant kernels make the pairwise MRF degenerate: the density of the data given a graph
:math:`W` does not depend on the means of :math:`X` over the connected components (CCs) of
:math:`W + W^\top`, so SNE-like methods lose the relative positions of clusters. The hierarchical
coupling (spec §7.1) adds a full-rank Gaussian model on the CC means; Corollary 1 shows that, for a
fixed graph, its global term (9) is minimised by a PCA embedding of the CC-mean matrix
:math:`U_{[R]}U_{[R]}^\top X` (row :math:`i` = mean of :math:`X` over :math:`i`'s CC), whatever the
diffusion parameter :math:`\varepsilon`.

Algorithm 1 (ccPCA)
-------------------
Draw :math:`N` graphs from the input-graph posterior :math:`\mathbb P_{\mathcal P_X}(\cdot; K_X)`,
compute the CC memberships :math:`U^\ell_{[R]}` of each, and return a PCA embedding of

.. math:: \bar X = \Big(\frac1N\sum_{\ell=1}^N U^\ell_{[R]}U^{\ell\top}_{[R]}\Big)X
             = \frac1N\sum_{\ell=1}^N X^{(\ell)}_M,

where :math:`X^{(\ell)}_M` replaces each row by the mean of its CC in draw :math:`\ell`. The right-hand
form costs :math:`O(Nnp)` and never forms the :math:`n\times n` average.

Conventions
-----------
* **Centring.** :math:`\bar X` is column-centred before the SVD (spec §6.5). Since
  :math:`\mathbf 1 \in \ker L`, :math:`\mathbf 1^\top\bar X = \mathbf 1^\top X`, so this is the same as
  centring :math:`X` first.
* **Scores.** The output is the unscaled PCA scores :math:`U_q S_q` of the centred :math:`\bar X`
  (singular vectors times singular values), signs fixed so that the largest-magnitude entry of
  each column is positive.

Reference
---------
H. Van Assel, T. Espinasse, J. Chiquet, F. Picard. *A Probabilistic Graph Coupling View of
Dimension Reduction*. NeurIPS 2022, §4.2--4.3, Appendix A.4 and B.1.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from .base import DREstimator
from .graphs import GraphLaw
from .posterior_graphs import (
    ComponentStatistics,
    component_statistics,
    sample_memberships,
)

__all__ = ["cc_means", "cc_mean_average", "pca_scores", "ccpca_embedding", "ccPCA"]


def cc_means(X: torch.Tensor, membership: torch.Tensor) -> torch.Tensor:
    r""":math:`U_{[R]}U_{[R]}^\top X` for one partition: row :math:`i` replaced by the mean of
    :math:`X` over :math:`i`'s component. ``membership``: ``(n,)`` labels ``0..R-1``."""
    R = int(membership.max()) + 1
    sums = torch.zeros(R, X.shape[1], dtype=X.dtype).index_add_(0, membership, X)
    counts = torch.bincount(membership, minlength=R).to(X.dtype)
    return (sums / counts[:, None])[membership]


def cc_mean_average(X: torch.Tensor, memberships: torch.Tensor) -> torch.Tensor:
    r""":math:`\frac1N\sum_\ell U^\ell_{[R]}U^{\ell\top}_{[R]}X` from ``(N, n)`` labels, in
    :math:`O(Nnp)` time and :math:`O(np)` memory."""
    acc = torch.zeros_like(X)
    for m in memberships:
        acc += cc_means(X, m)
    return acc / memberships.shape[0]


def pca_scores(M: torch.Tensor, n_components: int) -> torch.Tensor:
    """Unscaled PCA scores ``U_q S_q`` of column-centred ``M`` (signs: largest |entry| of each
    column positive)."""
    Mc = M - M.mean(0, keepdim=True)
    U, S, _ = torch.linalg.svd(Mc, full_matrices=False)
    k = min(n_components, S.numel())
    Z = torch.zeros(M.shape[0], n_components, dtype=M.dtype)
    Z[:, :k] = U[:, :k] * S[:k]
    idx = Z.abs().argmax(0, keepdim=True)
    sign = torch.sign(Z.gather(0, idx))
    sign[sign == 0] = 1.0
    return Z * sign


def _validate(X, n_components, n_samples):
    if not isinstance(X, torch.Tensor) or X.ndim != 2:
        raise ValueError("X must be a 2-D torch.Tensor of shape (n_samples, n_features).")
    n, p = X.shape
    if n == 0 or p == 0:
        raise ValueError(f"X is empty: shape {tuple(X.shape)}.")
    if not torch.isfinite(X).all():
        raise ValueError("X contains NaN or infinite values.")
    if not (isinstance(n_components, (int, np.integer)) and 1 <= n_components < p):
        raise ValueError(f"n_components must be an integer in [1, p - 1] = [1, {p - 1}], got "
                         f"{n_components!r}.")
    if not (isinstance(n_samples, (int, np.integer)) and n_samples >= 1):
        raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}.")


def ccpca_embedding(
    X: torch.Tensor,
    graph_law: GraphLaw,
    n_components: int,
    n_samples: int = 100,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""ccPCA embedding (Algorithm 1): PCA scores of the data averaged over the CC means of
    ``n_samples`` draws of ``graph_law``.

    Parameters
    ----------
    X : tensor (n, p), float64
        Data.
    graph_law : probdr.graphs.GraphLaw
        Posterior law of the input graph, :math:`\mathbb P_{\mathcal P_X}(\cdot; K_X)` (B, D, E or
        the symmetrised B~), with ``.sample(sample_shape)``.
    n_components : int
        Number of PCA components :math:`q < p`.
    n_samples : int
        Monte Carlo draws :math:`N` ([002]: about 100 suffice for n = 10 000).
    generator : torch.Generator, optional
        Source of randomness (the global torch RNG is left untouched when given).

    Returns
    -------
    Z : tensor (n, q), float64
        Unscaled PCA scores :math:`U_qS_q` of the column-centred averaged matrix :math:`\bar X`
        (signs fixed: the largest-magnitude entry of each column is positive). Columns beyond the
        rank of :math:`\bar X - \mathbf 1\bar x^\top` are zero (e.g. one component in every draw).
    """
    _validate(X, n_components, n_samples)
    if graph_law.n != X.shape[0]:
        raise ValueError(f"graph_law has {graph_law.n} nodes but X has {X.shape[0]} rows.")
    X = X.to(torch.float64)
    memberships = sample_memberships(graph_law, int(n_samples), generator)
    Z = pca_scores(cc_mean_average(X, memberships), n_components)
    if (Z.abs().amax(0) == 0).any():
        warnings.warn("ccPCA: the CC-mean-averaged data has rank below n_components (the "
                      "posterior graphs are connected); the last columns are zero.",
                      RuntimeWarning, stacklevel=2)
    return Z


class ccPCA(DREstimator):
    r"""ccPCA (Van Assel et al. 2022): PCA of the data averaged over the connected-component
    means of posterior input graphs; the heuristic minimiser of the hierarchical coupling's
    global term and an initialisation for t-SNE/UMAP that keeps the positions of clusters.

    .. math::
        Z = \mathrm{PCA}_q\Big(\frac1N\sum_{\ell=1}^N U^\ell_{[R]}U^{\ell\top}_{[R]}X\Big),\qquad
        W^{(\ell)} \sim \mathbb P_{\mathcal P_X}(\cdot; K_X),

    :math:`U^\ell_{[R]}` the CC indicators (normalised) of :math:`W^{(\ell)} + W^{(\ell)\top}`.

    The input graph law is built by :func:`probdr.estimators.build_input_graph` with entropic
    affinities: :math:`K_{X,ij} = \exp(-(\|x_i-x_j\|^2 - d^2_{i,\min})/\varepsilon_i)` on the
    ``3 * perplexity`` nearest neighbours, bandwidths from the perplexity. Under the D prior the
    posterior mean is the row-stochastic :math:`P^D` (one out-edge per node); under E, :math:`n`
    edges drawn from :math:`K_X/K_{X,++}`; under B, independent edges with probability
    :math:`K/(1+K)` (the row shift fixes each row's largest weight to 1, a convention [002] does
    not specify).

    Parameters
    ----------
    n_components : int
    prior_x : {"D", "E", "B"}
        Input-graph prior.
    perplexity : float
        Perplexity of the entropic affinities ([002]: 30). Higher perplexity gives more connected
        draws and an embedding closer to plain PCA ([002] Fig. 4).
    n_samples : int
        Monte Carlo draws :math:`N`.
    random_state : int or None

    Attributes
    ----------
    embedding_ : ndarray (n, q)
        Unscaled PCA scores of the centred averaged data.
    input_graph_ : GraphLaw
        The posterior law of :math:`W_X`.
    component_stats_ : ComponentStatistics
        Connected components of the ``n_samples`` draws (``.summary()``).
    averaged_data_ : ndarray (n, p)
        :math:`\bar X` (before centring).
    """

    def __init__(self, n_components: int = 2, prior_x: str = "D", perplexity: float = 30.0,
                 n_samples: int = 100, random_state: int | None = None):
        self.n_components = n_components
        self.prior_x = prior_x
        self.perplexity = perplexity
        self.n_samples = n_samples
        self.random_state = random_state

    def _check_params(self, n: int, p: int) -> None:
        if str(self.prior_x).upper() not in ("B", "D", "E"):
            raise ValueError(f"prior_x must be 'B', 'D' or 'E', got {self.prior_x!r}.")
        if not (isinstance(self.perplexity, (int, float, np.integer, np.floating))
                and not isinstance(self.perplexity, bool) and self.perplexity >= 1):
            raise ValueError(f"perplexity must be a number >= 1, got {self.perplexity!r}.")
        if self.perplexity >= n - 1:
            raise ValueError(
                f"perplexity={self.perplexity} is too large for n={n} samples: it must be "
                f"smaller than n - 1 = {n - 1} (use a smaller perplexity or more data).")
        if not (isinstance(self.n_samples, (int, np.integer)) and self.n_samples >= 1):
            raise ValueError(f"n_samples must be a positive integer, got {self.n_samples!r}.")

    def _fit(self, X: torch.Tensor) -> torch.Tensor:
        from .estimators import build_input_graph

        self.input_graph_ = build_input_graph(
            X, str(self.prior_x).upper(), "entropic", perplexity=float(self.perplexity),
            random_state=self.random_state_)
        gen = torch.Generator().manual_seed(self.random_state_)
        memb = sample_memberships(self.input_graph_, int(self.n_samples), gen)
        self.component_stats_: ComponentStatistics = component_statistics(memb)
        M = cc_mean_average(X, memb)
        self.averaged_data_ = M.numpy()
        return pca_scores(M, self.n_components)
