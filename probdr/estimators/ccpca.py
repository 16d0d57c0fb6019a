r"""ccPCA: PCA of the data averaged over the connected-component means of posterior graphs
(Van Assel et al. 2022, Algorithm 1 and Corollary 1).

Why
---
Shift-invariant kernels make the pairwise MRF degenerate: the density of the data given a graph
:math:`W` does not depend on the means of :math:`X` over the connected components (CCs) of
:math:`W + W^\top`, so SNE-like methods lose the relative positions of clusters. The hierarchical
coupling adds a full-rank Gaussian model on the CC means; Corollary 1 shows that, for a
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
* **Centring.** :math:`\bar X` is column-centred before the SVD. Since
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
from .docs import reference
from .params import InvalidParameterError, Num, StrOptions

__all__ = ["ccPCA"]


@reference
class ccPCA(DREstimator):
    """ccPCA (Van Assel et al. 2022, Algorithm 1): PCA of the data averaged over the
    connected-component means of posterior input graphs. Graphs W are drawn from the posterior
    of the input prior (``prior_x``) given the entropic affinities K_X of the data; each row of
    X is replaced by the mean of its connected component in each draw, and the average over the
    draws is embedded by PCA. It is the heuristic minimiser of the hierarchical coupling's
    global term, and an initialisation for t-SNE and UMAP that keeps the relative positions of
    the clusters (``init="ccpca"``).

    Parameters
    ----------
    n_components : int
        Dimension q of the embedding, at most the number of features.
    prior_x : {"D", "E", "B"}
        Prior of the input graph: D, one out-edge per node drawn from P^D (row-stochastic);
        E, n edges drawn from K_X / ΣK_X; B, independent edges of probability K / (1 + K).
    perplexity : float
        Perplexity of the entropic affinities, in [1, n - 1) (the paper's 30). Higher values
        give more connected draws and an embedding closer to plain PCA.
    n_samples : int
        Number N of posterior graphs drawn.
    metric : str or callable
        Dissimilarity of the rows for the input graph (probdr.input.distances; the names are
        those of GraphCoupling); the components' means stay in feature space, so
        "precomputed" is not supported.

    Attributes
    ----------
    embedding_ : ndarray of shape (n_samples, n_components)
        Unscaled PCA scores of the centred averaged data.
    input_
    input_graph_
    component_stats_ : ComponentStatistics
        Connected components of the draws (``.summary()``).
    averaged_data_ : ndarray of shape (n_samples, n_features)
        The averaged data X̄, before centring.
    mean_ : ndarray of shape (n_features,)
        Column means of X̄.
    projection_ : ndarray of shape (n_features, n_components)
        The PCA map of the averaged data: the scores are ``(X̄ - mean_) @ projection_``.
    n_threads_
    device_
    random_state_

    See Also
    --------
    WishartPCA : PCA as a Wishart coupling.
    TSNE, UMAP : ``init="ccpca"`` starts them from this embedding.

    Notes
    -----
    With N draws W⁽ˡ⁾ and U⁽ˡ⁾ the normalised indicators of the connected components of
    W⁽ˡ⁾ + W⁽ˡ⁾ᵀ::

        Z = PCA_q( (1/N) Σ_l U⁽ˡ⁾ U⁽ˡ⁾ᵀ X )

    computed as the average of the component-mean matrices, in O(Nnp), without the n × n
    average. The averaged data are column-centred before the SVD (the same as centring X
    first); the output is the unscaled scores U_q S_q, each column's largest-magnitude entry
    positive.

    References
    ----------
    H. Van Assel, T. Espinasse, J. Chiquet, F. Picard. A Probabilistic Graph Coupling View of
    Dimension Reduction. NeurIPS 2022, §4.2-4.3.

    Examples
    --------
    >>> import probdr
    >>> X, y = probdr.datasets.load("digits", n_samples=200)
    >>> cc = probdr.ccPCA(n_components=2, n_samples=20, random_state=0)
    >>> Z = cc.fit_transform(X)
    >>> Z.shape
    (200, 2)
    >>> cc.transform(X[:5]).shape
    (5, 2)
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

    def _check_params_together(self) -> None:
        super()._check_params_together()
        if isinstance(self.metric, str) and self.metric == "precomputed":
            raise InvalidParameterError(
                "ccPCA does not take metric='precomputed': it averages the rows of X over the "
                "posterior graphs' components, so it needs the features; pass X and a metric.")

    def _check_params_vs_input(self, n: int, p: int) -> InputGraph:
        return self._make_input().check(n, p)

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
        JA = side.averaged(Xt, self.join_means_, validated=True)
        JB = side.averaged(Xt, self.join_weights_[:, None], validated=True)
        match = side.matches(Xt, validated=True)
        Mbar = JA + JB * Xt.cpu().numpy()
        Z = torch.as_tensor((Mbar - self.mean_) @ self.projection_)
        seen = match >= 0
        Z[seen] = torch.as_tensor(self.embedding_)[match[seen]]
        return self._output(Z, X)

    def _fit(self, X: torch.Tensor, y=None) -> torch.Tensor:

        self.input_graph_ = self.input_.fit(X, random_state=self.random_state_)
        gen = generator(self.random_state_)
        memb = sample_memberships(self.input_graph_, int(self.n_samples), gen)
        self.component_stats_: ComponentStatistics = component_statistics(memb)
        M = cc_mean_average(X, memb)
        self.averaged_data_ = M.cpu().numpy()
        return pca_scores(M, self.n_components)
