r"""sklearn-style estimators for the Wishart couplings: :class:`WishartPCA` (Van Assel et al. 2022,
Theorem 2), :class:`WishartEigenmaps` and :class:`LaplacianWishart` (Ravuri & Lawrence 2025, ProbDR
eqs. (2) and (5)).

All three fit a flat-prior embedding ``Z`` by MAP on a Pyro model (``pyro.sample("Z",
ImproperUniform)``, a point-mass guide and probdr's one MAP driver,
:func:`probdr.infer.map.map_estimate`) and also offer a closed-form path where one exists, which
the tests use as the oracle.

Posteriors
----------
With ``inference="svi"`` or ``"mcmc"`` the same models give a posterior over Z,
:math:`p_\omega(Z \mid \text{data}) \propto p(Z)\,p(\text{data} \mid Z)^{\omega}`, with the
likelihood tempered by ``coupling_weight`` :math:`\omega` and, by default, an isotropic Gaussian
prior ten times wider than the MAP embedding (:mod:`probdr.estimators.inference`), fitted by SVI
or NUTS from the MAP on a whitened variable (:func:`probdr.models.wishart_pca.whitening`,
:func:`probdr.models.probdr_wishart.laplacian_whitening`): the same posterior, of unit scale.

References
----------
H. Van Assel, T. Espinasse, J. Chiquet, F. Picard. *A Probabilistic Graph Coupling View of
Dimension Reduction*. NeurIPS 2022.
A. Ravuri, N. D. Lawrence. *Towards One Model for Classical Dimensionality Reduction: A
Probabilistic Perspective on UMAP and t-SNE*. AABI 2025.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .._utils import generator
from ..infer.map import map_estimate
from ..input.calibration import InputGraph
from ..laws.wishart import (
    ConjugateWishartPosterior,
    KNNLaplacian,
    probdr_epsilon,
    theorem2_eigenvalues,
    theorem2_solution,
)
from ..models.probdr_wishart import (
    bernoulli_adjacency_model,
    cne_model,
    eigenmaps_model,
    eigenmaps_solution,
    laplacian_whitening,
    laplacian_wishart_model,
)
from ..models.wishart_pca import coupling_gamma, default_dofs, whitening, wishart_pca_model
from .base import DREstimator
from .docs import reference
from .inference import PosteriorInference
from .params import InvalidParameterError, StrOptions
from .wishart_new_points import GraphRowMixin, LinearMapMixin

__all__ = ["WishartPCA", "WishartEigenmaps", "LaplacianWishart"]


def principal_axes(Z: torch.Tensor) -> torch.Tensor:
    """Rotate Z (any q x q orthogonal) onto its principal axes, decreasing variance, and fix
    signs (the largest-magnitude entry of each column positive). The Gram matrix ZZ^T is
    unchanged."""
    _, V = torch.linalg.eigh(Z.T @ Z)
    Z = Z @ V.flip(1)
    idx = Z.abs().argmax(0, keepdim=True)
    s = torch.sign(Z.gather(0, idx))
    s[s == 0] = 1.0
    return Z * s


# ------------------------------------------------------------------------------------------------
# Theorem 2
# ------------------------------------------------------------------------------------------------
SOLVERS = StrOptions({"map", "closed_form"})


@reference
class WishartPCA(LinearMapMixin, PosteriorInference, DREstimator):
    """PCA as a Wishart precision coupling (Van Assel et al. 2022, Theorem 2): the among-row
    precisions of the data and of the embedding have conjugate Wishart priors,
    Θ_X ~ W(ν_X, I_n) with vec(X) | Θ_X ~ N(0, Θ_X⁻¹ ⊗ I_p), and likewise Θ_Z with ν_Z; the
    embedding Z minimises the cross-entropy between the two precision posteriors, fitted by
    MAP (a flat prior on Z). At the default degrees of freedom the minimiser is PCA: the
    unscaled scores U_q S_q, up to a rotation.

    Parameters
    ----------
    n_components : int
        Dimension q of the embedding, at most the number of features p.
    nu_x : float or None
        Degrees of freedom ν_X of the data's Wishart prior, > n - 1. None: n.
    nu_z : float or None
        Degrees of freedom ν_Z of the embedding's Wishart prior, > n - 1. None: ν_X + p - q,
        which makes γ = 1 (PCA).
    solver : {"map", "closed_form"}
        "map": MAP on the Pyro model probdr.models.wishart_pca.wishart_pca_model (structured,
        no n × n matrix); "closed_form": Theorem 2's eigen-solution.
    optimizer : {"lbfgs", "adam"}
        MAP optimiser: L-BFGS on the Pyro loss, or pyro.infer.SVI with Adam.
    n_iter : int
        Optimiser iterations (L-BFGS: budget of function evaluations; Adam: SVI steps).
    learning_rate : float
        Step size (L-BFGS: initial step; Adam: learning rate, at most 0.05).
    center : bool
        Centre the columns of X first. The model has zero mean and uses the uncentred Gram
        matrix XXᵀ, so centring is what makes the solution PCA.

    Attributes
    ----------
    embedding_ : ndarray of shape (n_samples, n_components)
        The MAP embedding rotated to its principal axes (the MAP is defined up to a q × q
        rotation), also with a posterior (its mean: ``posterior_mean_``).
    gamma_ : float
        γ = (ν_Z + q) / (ν_X + p).
    nu_x_ : float
        ν_X used.
    nu_z_ : float
        ν_Z used.
    eigenvalues_ : ndarray of shape (n_components,)
        Theorem 2's λ*, the eigenvalues of Z* Z*ᵀ (closed form).
    precision_posterior_ : ConjugateWishartPosterior
        The law of the data's precision Θ_X given X.
    components_ : ndarray of shape (n_components, n_features)
        Principal axes in feature space (unit norm), as scikit-learn's PCA.
    mean_ : ndarray of shape (n_features,)
        The centring vector of ``transform``.
    projection_ : ndarray of shape (n_features, n_components)
        The linear map W of ``transform``: ``(X - mean_) @ W``.
    loss_history_ : ndarray
        Negative log joint during the MAP fit (empty for the closed form).
    n_threads_
    device_
    random_state_
    posterior_
    posterior_samples_
    posterior_sd_
    reliability_
    stability_
    map_embedding_
    mode_embedding_
    map_converged_
    mode_steps_
    posterior_mean_
    z_prior_scale_

    See Also
    --------
    ProbDR : with ``covariance="sample"`` and ``alpha=0``, dual probabilistic PCA.
    ccPCA : PCA of data averaged over posterior graphs' connected components.
    sklearn.decomposition.PCA : the same embedding, up to signs.

    Notes
    -----
    The objective and its minimiser (Theorem 2), with XXᵀ = V diag(d) Vᵀ::

        min_Z  (ν_X + p)/2 · tr(Zᵀ (I_n + XXᵀ)⁻¹ Z)  -  (ν_Z + q)/2 · log det(I_n + ZZᵀ)

        Z*Z*ᵀ = V_q diag(λ*) V_qᵀ,   λ*_i = max(0, γ (1 + d_i) - 1),   γ = (ν_Z + q)/(ν_X + p)

    γ = 1 (the default) gives PCA. The MAP runs on the preconditioned variable
    Y = (I + XXᵀ)^(-1/2) Z (same maximiser, flat prior), which makes L-BFGS converge in a few
    dozen iterations whatever the scale of X. ``transform`` applies the least-squares linear
    map from the centred data to the embedding, so new points need no training data.

    References
    ----------
    H. Van Assel, T. Espinasse, J. Chiquet, F. Picard. A Probabilistic Graph Coupling View of
    Dimension Reduction. NeurIPS 2022.

    Examples
    --------
    >>> import numpy as np, probdr
    >>> from sklearn.decomposition import PCA
    >>> X, y = probdr.datasets.load("digits", n_samples=200)
    >>> wpca = probdr.WishartPCA(n_components=2, random_state=0)
    >>> Z = wpca.fit_transform(X)
    >>> Z_pca = PCA(n_components=2).fit_transform(X)
    >>> bool(np.allclose(abs(Z), abs(Z_pca), atol=1e-3 * abs(Z_pca).max()))
    True
    >>> wpca.transform(X[:5]).shape
    (5, 2)
    """

    _components_at_most_features = True
    _constraint_overrides = {"solver": [SOLVERS], "optimizer": [StrOptions({"lbfgs", "adam"})]}

    def __init__(self, n_components: int = 2, nu_x: float | None = None,
                 nu_z: float | None = None, random_state: int | None = None, *,
                 solver: str = "map", optimizer: str = "lbfgs", n_iter: int = 1000,
                 learning_rate: float = 1.0, center: bool = True, inference: str = "map",
                 inference_params: dict | None = None, z_prior=None,
                 coupling_weight: float = 1.0, callbacks=None,
                 callbacks_every: int = 50, n_jobs=None, device="auto"):
        self.n_components = n_components
        self.nu_x = nu_x
        self.nu_z = nu_z
        self.random_state = random_state
        self.solver = solver
        self.optimizer = optimizer
        self.n_iter = n_iter
        self.learning_rate = learning_rate
        self.center = center
        self.inference = inference
        self.inference_params = inference_params
        self.z_prior = z_prior
        self.coupling_weight = coupling_weight
        self.callbacks = callbacks
        self.callbacks_every = callbacks_every
        self.n_jobs = n_jobs
        self.device = device

    def _check_params_vs_input(self, n: int, p: int) -> None:
        default_dofs(n, p, self.n_components, self.nu_x, self.nu_z)
        self._check_inference(n, self.n_components)

    def _fit(self, X: torch.Tensor, y=None) -> torch.Tensor:
        n, p = X.shape
        q = self.n_components
        Xc = X - X.mean(0, keepdim=True) if self.center else X
        self.nu_x_, self.nu_z_ = default_dofs(n, p, q, self.nu_x, self.nu_z)
        self.gamma_ = coupling_gamma(self.nu_x_, self.nu_z_, p, q)
        self.precision_posterior_ = post = ConjugateWishartPosterior(Xc, self.nu_x_)
        self.eigenvalues_ = theorem2_eigenvalues(
            post._scale_inv.eigenvalues_xxt, q, self.gamma_).cpu().numpy()
        self.loss_history_ = np.empty(0)
        kwargs = dict(X=Xc, n_components=q, nu_x=self.nu_x_, nu_z=self.nu_z_, posterior=post)
        gen = generator(self.random_state_)
        if self.solver == "closed_form":
            Z = theorem2_solution(Xc, q, self.gamma_)
        else:
            Z0 = torch.randn(n, q, dtype=torch.float64, generator=gen)
            lr = self.learning_rate if self.optimizer == "lbfgs" else min(self.learning_rate,
                                                                          0.05)
            vals, self.loss_history_ = map_estimate(
                wishart_pca_model, {**kwargs, **self._map_kwargs(n, q)}, {"Z": Z0},
                optimizer=self.optimizer, n_iter=self.n_iter, lr=lr, reparam=whitening(post),
                return_history=True)
            Z = principal_axes(vals["Z"])
        if self.inference == "map":
            return Z
        # whitened to unit curvature at coupling weight 1, the scale the SVI defaults are made for
        return self._posterior(wishart_pca_model, kwargs, Z, gen,
                               whitening(post, math.sqrt(self.nu_x_ + p)))


# ------------------------------------------------------------------------------------------------
# ProbDR
# ------------------------------------------------------------------------------------------------
class _LaplacianEstimator(GraphRowMixin, PosteriorInference, DREstimator):
    """Shared pieces: the symmetrised kNN Laplacian and its checks."""

    def _make_input(self) -> InputGraph:
        return InputGraph(affinity="knn", n_neighbors=self.n_neighbors,
                          neighbors=getattr(self, "neighbors", "auto"), metric=self.metric,
                          metric_params=self.metric_params)

    def _fit_laplacian(self, X: torch.Tensor) -> KNNLaplacian:
        L = self.input_.fit(X, random_state=self.random_state_)
        self.laplacian_ = L
        self.n_graph_components_ = L.n_connected_components()
        return L


@reference
class WishartEigenmaps(_LaplacianEstimator):
    """Laplacian eigenmaps as a Wishart MAP (ProbDR, Ravuri & Lawrence 2025, eq. 2): the
    Laplacian L̂ = D - A of the symmetrised binary kNN graph of the data is read as an estimate
    of a precision, νL̂ | Z ~ W((ZZᵀ + βI)⁻¹, ν) (scale, degrees of freedom), with a flat prior
    on Z. The centred MAP spans eigenvectors 2 to q + 1 of L̂, each axis scaled by
    (1/l_i - β)^(1/2): Laplacian eigenmaps as users know them (unnormalised Laplacian).

    Parameters
    ----------
    beta : float
        Ridge β > 0 of the Wishart scale; must be below 1/l_(q+1).
    ridge : float or None
        δ in L̂ + δI (the paper's footnote 4). None: 0 if the kNN graph is connected, else
        1e-3 times the mean degree, with a warning (the component indicators then come first,
        as in any spectral embedding of a disconnected graph).
    solver : {"map", "closed_form"}
        "map": L-BFGS on the Pyro model probdr.models.probdr_wishart.eigenmaps_model;
        "closed_form": the eigen-solution.
    n_iter : int
        L-BFGS budget (function evaluations).
    metric : str or callable
        Dissimilarity of the rows for the kNN graph (probdr.input.distances; the names are
        those of GraphCoupling), or "precomputed": X is a dense square distance matrix.

    Attributes
    ----------
    embedding_ : ndarray of shape (n_samples, n_components)
        The MAP embedding, centred, on its principal axes, also with a posterior (its mean:
        ``posterior_mean_``).
    input_
    laplacian_
    eigenvalues_ : ndarray of shape (n_components + 1,)
        The smallest eigenvalues of L̂ (the first is 0).
    n_graph_components_
    ridge_ : float
        δ used.
    loss_history_ : ndarray
        Negative log joint during the MAP fit.
    n_threads_
    device_
    random_state_
    posterior_
    posterior_samples_
    posterior_sd_
    reliability_
    stability_
    map_embedding_
    mode_embedding_
    map_converged_
    mode_steps_
    posterior_mean_
    z_prior_scale_

    See Also
    --------
    LaplacianWishart : the UMAP/t-SNE-like model of the same paper (eq. 5).
    ProbDR : the unifying model (eq. 1), of which this is a case.
    sklearn.manifold.SpectralEmbedding : eigenmaps of the normalised Laplacian.

    Notes
    -----
    Z maximises the Z-dependent Wishart terms (L̂ is singular; probdr.models.probdr_wishart)::

        log det(βI + HZZᵀH) - tr(Zᵀ L̂ Z),    H = I - 11ᵀ/n

    The embedding is centred (HZ), so the constant eigenvector is excluded. ``transform``
    places a new point at Σ_j z_j / (k - l_c) in each column c, the sum over its k nearest
    training points and l_c the column's eigenvalue (the Nyström extension: an eigenvector of
    L̂ satisfies it exactly at every node).

    References
    ----------
    A. Ravuri, N. D. Lawrence. Towards One Model for Classical Dimensionality Reduction: A
    Probabilistic Perspective on UMAP and t-SNE. AABI 2025.

    Examples
    --------
    >>> import numpy as np, probdr
    >>> X, y = probdr.datasets.load("digits", n_samples=200)
    >>> eig = probdr.WishartEigenmaps(n_neighbors=15, random_state=0).fit(X)
    >>> exact = probdr.WishartEigenmaps(n_neighbors=15, solver="closed_form").fit(X)
    >>> bool(np.allclose(abs(eig.embedding_), abs(exact.embedding_), atol=1e-4))
    True
    """

    _constraint_overrides = {"solver": [SOLVERS]}

    def __init__(self, n_components: int = 2, n_neighbors: int = 15,
                 random_state: int | None = None, *, beta: float = 1e-3,
                 ridge: float | None = None, solver: str = "map", n_iter: int = 2000,
                 neighbors: str = "auto", inference: str = "map",
                 inference_params: dict | None = None, z_prior=None,
                 coupling_weight: float = 1.0, callbacks=None,
                 callbacks_every: int = 50, n_jobs=None, device="auto", metric="euclidean", metric_params=None):
        self.n_components = n_components
        self.n_neighbors = n_neighbors
        self.random_state = random_state
        self.beta = beta
        self.ridge = ridge
        self.solver = solver
        self.n_iter = n_iter
        self.neighbors = neighbors
        self.inference = inference
        self.inference_params = inference_params
        self.z_prior = z_prior
        self.coupling_weight = coupling_weight
        self.callbacks = callbacks
        self.callbacks_every = callbacks_every
        self.n_jobs = n_jobs
        self.device = device
        self.metric = metric
        self.metric_params = metric_params

    def _check_params_together(self) -> None:
        super()._check_params_together()
        # every eigenvalue is >= 0, so 1/(l_i + ridge) <= 1/ridge: beta >= 1/ridge collapses
        # every axis whatever the data (below it, the spectrum decides, once it is known)
        if self.ridge is not None and self.ridge > 0 and self.beta >= 1.0 / self.ridge:
            raise InvalidParameterError(
                f"beta={self.beta} is too large for ridge={self.ridge}: the MAP collapses on "
                f"every axis when beta >= 1/ridge = {1.0 / self.ridge:.4g}.")

    def _check_params_vs_input(self, n: int, p: int) -> InputGraph:
        side = self._make_input().check(n, p)
        if self.n_components > n - 2:
            raise ValueError(f"n_components={self.n_components} needs at least "
                             f"{self.n_components + 2} samples, got {n}.")
        self._check_inference(n, self.n_components)
        return side

    def _column_eigenvalues(self) -> np.ndarray:
        # the MAP's columns are eigenvectors 2..q+1 of the Laplacian (principal axes)
        return self.eigenvalues_[1:self.embedding_.shape[1] + 1]

    def _fit(self, X: torch.Tensor, y=None) -> torch.Tensor:
        n = X.shape[0]
        q = self.n_components
        L = self._fit_laplacian(X)
        ridge = self.ridge
        if ridge is None:
            ridge = L.default_ridge(self.n_graph_components_, warn_for=self.n_neighbors,
                                    stacklevel=4)  # the user's fit (past _fit_context)
        self.ridge_ = ridge
        Zcf, w = eigenmaps_solution(L, q, self.beta, ridge)
        self.eigenvalues_ = w.cpu().numpy()
        # data-dependent: the spectrum is known only now, before any optimisation
        if (1.0 / (w[1:] + ridge) <= self.beta).any():
            bound = float(1.0 / (w[1:] + ridge).max())
            raise ValueError(f"beta={self.beta} is too large for this graph: the MAP collapses "
                             f"on axes with 1/(l_i + ridge) <= beta (eigenvalues "
                             f"{w[1:].tolist()}); use beta < {bound:.4g}.")
        kwargs = dict(L=L, n_components=q, beta=self.beta, ridge=ridge)
        gen = generator(self.random_state_)
        if self.solver == "closed_form":
            Z = principal_axes(Zcf)
        else:
            Z0 = torch.randn(n, q, dtype=torch.float64, generator=gen) / math.sqrt(n)
            vals, self.loss_history_ = map_estimate(
                eigenmaps_model, {**kwargs, **self._map_kwargs(n, q)}, {"Z": Z0},
                optimizer="lbfgs", n_iter=self.n_iter, tol=1e-13, return_history=True)
            Z = vals["Z"]
            Z = principal_axes(Z - Z.mean(0, keepdim=True))
        if self.inference == "map":
            return Z
        return self._posterior(eigenmaps_model, kwargs, Z, gen, laplacian_whitening(L, ridge))


@reference
class LaplacianWishart(_LaplacianEstimator):
    """ProbDR's Laplacian-Wishart model for UMAP/t-SNE-like embeddings (Ravuri & Lawrence 2025,
    eq. 5), fitted by MAP: the Laplacian L̂ of the symmetrised binary kNN graph of the data is
    Wishart given Z, L̂ | Z ~ W(M(Z)⁻¹, n), with M(Z) = ε̃⁻¹ I / 2 + H Pᵘ H / 2 + HZZᵀH, where
    Pᵘ_ij = 1/(1 + ‖z_i - z_j‖²) is the Student (Cauchy) kernel, H the centring matrix and
    ε̃ = 4 n_neg n_neighbors / (3n); a flat prior on Z.

    Each step costs a dense n × n Cholesky factorisation (O(n³)): fine for a few thousand
    points on a CPU. ``model="bernoulli"`` (eq. 4, A_ij ~ Bernoulli(ε̃ Pᵘ_ij)) and
    ``model="cne"`` (eq. 3, the CNE energy of Damrich et al.) fit the models the paper derives
    eq. 5 from.

    Parameters
    ----------
    n_neighbors : int
        Neighbours per point of the kNN graph (the point itself excluded), symmetrised by union;
        also n_neighbors in ε̃.
    n_neg : int
        Number of negatives n_neg in ε̃.
    eps_tilde : float or None
        ε̃ itself, instead of 4 n_neg n_neighbors / (3n).
    nu : float or None
        Degrees of freedom of the Wishart law, > n - 1. None: n.
    model : {"wishart", "bernoulli", "cne"}
        The paper's eq. 5, eq. 4 or eq. 3.
    init : {"pca", "eigenmaps", "random"} or array of shape (n_samples, n_components)
        Initial embedding, rescaled so that its first axis has unit standard deviation (the
        paper does not state its initialisation).
    n_iter : int
        Adam steps of the MAP; the paper uses 50, with learning rate 1.
    learning_rate : float
        Adam's learning rate.
    max_n : int
        Refuse larger inputs (dense n × n work per step).
    metric : str or callable
        Dissimilarity of the rows for the kNN graph (probdr.input.distances; the names are
        those of GraphCoupling), or "precomputed": X is a dense square distance matrix.

    Attributes
    ----------
    embedding_ : ndarray of shape (n_samples, n_components)
        The centred MAP embedding, also with a posterior (its mean: ``posterior_mean_``).
    input_
    laplacian_
    n_graph_components_
    eps_tilde_ : float
        ε̃ used.
    loss_history_ : ndarray
        Negative log joint at each Adam step.
    n_threads_
    device_
    random_state_
    posterior_
    posterior_samples_
    posterior_sd_
    reliability_
    stability_
    map_embedding_
    mode_embedding_
    map_converged_
    mode_steps_
    posterior_mean_
    z_prior_scale_

    See Also
    --------
    ProbDR : the unifying model (eq. 1), of which this is a case, with other kernels and
        covariance estimates.
    WishartEigenmaps : the same paper's eq. 2, Laplacian eigenmaps.
    UMAP : the method this model reads probabilistically.

    Notes
    -----
    Only the Z-dependent Wishart terms are used (the Laplacian is singular) and Z is centred
    (probdr.models.probdr_wishart). The MAP of the paper is 50 Adam steps, not a converged
    maximiser; a posterior started there concentrates, as ``coupling_weight`` grows, on the
    mode it finds nearby, not on that iterate. ``transform`` places a new point at the mean
    of its kNN neighbours' positions.

    References
    ----------
    A. Ravuri, N. D. Lawrence. Towards One Model for Classical Dimensionality Reduction: A
    Probabilistic Perspective on UMAP and t-SNE. AABI 2025.

    Examples
    --------
    >>> import probdr
    >>> X, y = probdr.datasets.load("digits", n_samples=200)
    >>> lw = probdr.LaplacianWishart(n_neighbors=15, random_state=0)
    >>> Z = lw.fit_transform(X)
    >>> Z.shape
    (200, 2)
    >>> probdr.metrics.trustworthiness(X, Z, k=10) > 0.85
    True
    """

    _constraint_overrides = {"model": [StrOptions({"wishart", "bernoulli", "cne"})],
                             "init": [StrOptions({"pca", "eigenmaps", "random"}), "array-like"]}

    def __init__(self, n_components: int = 2, n_neighbors: int = 15,
                 random_state: int | None = None, *, n_neg: int = 5,
                 eps_tilde: float | None = None, nu: float | None = None, model: str = "wishart",
                 init="pca", n_iter: int = 50, learning_rate: float = 1.0, max_n: int = 6000,
                 neighbors: str = "auto", inference: str = "map",
                 inference_params: dict | None = None, z_prior=None,
                 coupling_weight: float = 1.0, callbacks=None,
                 callbacks_every: int = 50, n_jobs=None, device="auto", metric="euclidean", metric_params=None):
        self.n_components = n_components
        self.n_neighbors = n_neighbors
        self.random_state = random_state
        self.n_neg = n_neg
        self.eps_tilde = eps_tilde
        self.nu = nu
        self.model = model
        self.init = init
        self.n_iter = n_iter
        self.learning_rate = learning_rate
        self.max_n = max_n
        self.neighbors = neighbors
        self.inference = inference
        self.inference_params = inference_params
        self.z_prior = z_prior
        self.coupling_weight = coupling_weight
        self.callbacks = callbacks
        self.callbacks_every = callbacks_every
        self.n_jobs = n_jobs
        self.device = device
        self.metric = metric
        self.metric_params = metric_params

    def _eps(self, n: int) -> float:
        return probdr_epsilon(n, self.n_neg, self.n_neighbors) if self.eps_tilde is None \
            else float(self.eps_tilde)

    def _check_params_vs_input(self, n: int, p: int) -> InputGraph:
        side = self._make_input().check(n, p)
        if n > self.max_n:
            raise ValueError(
                f"LaplacianWishart works with dense n x n matrices (O(n^3) per step); n={n} "
                f"exceeds max_n={self.max_n}. Subsample, or raise max_n if you have the memory.")
        eps = self._eps(n)  # positive (the table: eps_tilde, n_neg, n_neighbors)
        if self.model == "bernoulli" and eps >= 1:
            raise ValueError(
                f"model='bernoulli' needs eps_tilde < 1 (edge probabilities eps_tilde/(1+d^2)); "
                f"eps_tilde = 4*n_neg*n_neighbors/(3n) = {eps:.3g} for n={n}. Use more samples "
                "or pass a smaller eps_tilde.")
        if self.nu is not None and not self.nu > n - 1:
            raise ValueError(f"nu must exceed n - 1 = {n - 1}, got {self.nu!r}.")
        self._check_inference(n, self.n_components)
        return side

    def _init(self, X: torch.Tensor, L: KNNLaplacian, gen: torch.Generator) -> torch.Tensor:
        n, q = X.shape[0], self.n_components
        init = self.init
        if isinstance(init, (np.ndarray, torch.Tensor)):
            Z = torch.as_tensor(np.asarray(init), dtype=torch.float64)
            if tuple(Z.shape) != (n, q):
                raise ValueError(f"init array must have shape ({n}, {q}), got {tuple(Z.shape)}.")
            return Z.clone()
        if init == "random":
            Z = torch.randn(n, q, dtype=torch.float64, generator=gen)
        elif init == "pca":
            Z = theorem2_solution(X - X.mean(0, keepdim=True), q)
        else:
            Z = eigenmaps_solution(L, q, beta=1e-12,
                                   ridge=L.default_ridge(self.n_graph_components_))[0]
        Z = Z - Z.mean(0, keepdim=True)
        return Z / Z[:, 0].std().clamp_min(1e-12)

    def _fit(self, X: torch.Tensor, y=None) -> torch.Tensor:
        n = X.shape[0]
        q = self.n_components
        L = self._fit_laplacian(X)
        self.eps_tilde_ = self._eps(n)
        gen = generator(self.random_state_)
        Z0 = self._init(X, L, gen)
        if self.model == "wishart":
            model, kw = laplacian_wishart_model, dict(L=L, n_components=q,
                                                      eps_tilde=self.eps_tilde_, nu=self.nu)
        elif self.model == "bernoulli":
            model, kw = bernoulli_adjacency_model, dict(L=L, n_components=q,
                                                        eps_tilde=self.eps_tilde_)
        else:
            model, kw = cne_model, dict(L=L, n_components=q, eps_tilde=self.eps_tilde_)
        vals, self.loss_history_ = map_estimate(
            model, {**kw, **self._map_kwargs(n, q)}, {"Z": Z0}, optimizer="adam",
            n_iter=self.n_iter, lr=self.learning_rate, return_history=True)
        Z = vals["Z"]
        Z = Z - Z.mean(0, keepdim=True)
        if self.inference == "map":
            return Z
        return self._posterior(model, kw, Z, gen, laplacian_whitening(L, 0.0, nu=1.0))
