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

import numpy as np
import torch

from .._utils import generator
from ..init import cc_mean_average, cc_means, pca_scores
from ..input.calibration import InputGraph
from ..laws.components import (
    ComponentStatistics,
    component_statistics,
    sample_memberships,
)
from .base import DREstimator, in_fit_environment
from .params import Num, StrOptions

__all__ = ["ccPCA"]


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

    metric, metric_params : str or callable, dict
        Dissimilarity of the rows for the input graph (:mod:`probdr.input.distances`); the components' means stay in feature space.

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

    _components_at_most_features = True
    _constraint_overrides = {"prior_x": [StrOptions({"B", "D", "E", "b", "d", "e"})],
                             "perplexity": [Num(1)]}

    def __init__(self, n_components: int = 2, prior_x: str = "D", perplexity: float = 30.0,
                 n_samples: int = 100, random_state: int | None = None, *,
                 metric="euclidean", metric_params=None, n_jobs=None, device="auto"):
        self.n_components = n_components
        self.prior_x = prior_x
        self.perplexity = perplexity
        self.n_samples = n_samples
        self.random_state = random_state
        self.metric = metric
        self.metric_params = metric_params
        self.n_jobs = n_jobs
        self.device = device

    def _make_input(self) -> InputGraph:
        return InputGraph(str(self.prior_x).upper(), "entropic", perplexity=self.perplexity,
                          metric=self.metric, metric_params=self.metric_params)

    def _check_params_vs_input(self, n: int, p: int) -> None:
        self.input_ = self._make_input().check(n, p)

    def _after_fit(self) -> None:
        # a new node joining training node j's component C in draw l has the CC mean
        # (|C| m_l(j) + x_new) / (|C| + 1): keep, per j, the draws' averages of
        # |C| m_l(j) / (|C| + 1) and of 1 / (|C| + 1)
        X = self.input_.reference_data()
        A = torch.zeros_like(X)
        B = torch.zeros(X.shape[0], dtype=X.dtype, device=X.device)
        memberships = self.component_stats_.memberships.to(X.device)
        for memb in memberships:
            size = torch.bincount(memb).to(X.dtype)[memb]
            A += cc_means(X, memb) * (size / (size + 1))[:, None]
            B += 1.0 / (size + 1)
        self.join_means_ = (A / memberships.shape[0]).cpu().numpy()
        self.join_weights_ = (B / memberships.shape[0]).cpu().numpy()
        # the PCA map of the averaged data: scores = (M - mean) @ projection_
        M = self.averaged_data_
        self.mean_ = M.mean(0)
        U, s, Vt = np.linalg.svd(M - self.mean_, full_matrices=False)
        q = min(self.embedding_.shape[1], int((s > s[0] * 1e-12).sum()))
        self.projection_ = np.zeros((M.shape[1], self.embedding_.shape[1]))
        self.projection_[:, :q] = Vt[:q].T @ ((U[:, :q].T @ self.embedding_[:, :q]) / s[:q, None])

    @in_fit_environment
    def transform(self, X):
        """Place new points: in each posterior draw a new node i of the input graph joins the
        component C of the training node j it links to (probability p_ij / p_i+, its input row
        against the training points, same prior and perplexity), so its CC mean is
        (s m_C + x_i) / (s + 1), m_C the mean and s the size of C; averaged over the fit's draws
        (``join_means_``, ``join_weights_``) and over j, this is its averaged row, projected on
        the PCA axes of the averaged data. Edges from training nodes to the new node are left
        out. A new point equal to a training point gets its fitted position."""
        Xt = self._validate_new(X)
        side = self._fitted_input()
        JA = side.averaged(Xt, self.join_means_)
        JB = side.averaged(Xt, self.join_weights_[:, None])
        match = side.matches(Xt)
        Mbar = JA + JB * Xt.cpu().numpy()
        Z = torch.as_tensor((Mbar - self.mean_) @ self.projection_)
        seen = match >= 0
        Z[seen] = torch.as_tensor(self.embedding_)[match[seen]]
        return self._output(Z, X)

    def _fit(self, X: torch.Tensor) -> torch.Tensor:

        self.input_graph_ = self.input_.fit(X, random_state=self.random_state_)
        gen = generator(self.random_state_)
        memb = sample_memberships(self.input_graph_, int(self.n_samples), gen)
        self.component_stats_: ComponentStatistics = component_statistics(memb)
        M = cc_mean_average(X, memb)
        self.averaged_data_ = M.cpu().numpy()
        return pca_scores(M, self.n_components)
