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
from .inference import PosteriorInference
from .params import StrOptions
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


class WishartPCA(LinearMapMixin, PosteriorInference, DREstimator):
    r"""PCA as a Wishart precision coupling (Van Assel et al. 2022, Theorem 2).

    The among-row precisions of the data and of the embedding have conjugate Wishart priors,
    :math:`\Theta_X \sim \mathcal W(\nu_X, I_n)`, :math:`\mathrm{vec}(X)\mid\Theta_X \sim
    \mathcal N(0, \Theta_X^{-1}\otimes I_p)` and likewise for :math:`Z` with :math:`\nu_Z`, and Z
    minimises the cross-entropy between the precision posteriors,

    .. math::
        \min_Z\ \frac{\nu_X+p}{2}\mathrm{tr}\big(Z^\top(I_n + XX^\top)^{-1}Z\big)
        - \frac{\nu_Z+q}{2}\log|I_n + ZZ^\top|.

    The minimiser is :math:`ZZ^\top = V_{[:,q]}\mathrm{diag}(\lambda^*)V_{[:,q]}^\top` with
    :math:`\lambda^*_i = \max(0, \gamma(1+d_i) - 1)`, :math:`XX^\top = V\mathrm{diag}(d)V^\top`,
    :math:`\gamma = (\nu_Z+q)/(\nu_X+p)`; for :math:`\gamma = 1` (the default) this is PCA
    (unscaled scores :math:`U_q S_q`, up to a rotation).

    Parameters
    ----------
    n_components : int
        Embedding dimension :math:`q < p`.
    nu_x, nu_z : float, optional
        Wishart degrees of freedom (:math:`> n - 1`). Defaults :math:`\nu_X = n`,
        :math:`\nu_Z = \nu_X + p - q` (:math:`\gamma = 1`).
    random_state : int or None
        Seed of the random initialisation.
    solver : {"map", "closed_form"}
        ``"map"``: MAP on the Pyro model :func:`probdr.models.wishart_pca.wishart_pca_model`
        (structured, no :math:`n\times n` matrix); ``"closed_form"``: Theorem 2's eigen-solution.
    optimizer : {"lbfgs", "adam"}
        MAP optimiser (L-BFGS on the Pyro loss, or ``pyro.infer.SVI`` with Adam).
    n_iter : int
        Optimiser iterations (L-BFGS: function evaluations budget; Adam: SVI steps).
    learning_rate : float
        Step size (L-BFGS: initial step; Adam: learning rate).
    center : bool
        Column-centre X first (default). The model has zero mean and uses the uncentred Gram
        :math:`XX^\top`, so centring is what makes the solution "PCA".
    inference, inference_params, z_prior, coupling_weight
        A posterior over Z instead of the MAP (default ``inference="map"``): see
        :class:`probdr.estimators.inference.PosteriorInference`.

    Attributes
    ----------
    embedding_ : ndarray (n, q)
        MAP embedding, rotated to its principal axes (the MAP is defined up to a q x q
        rotation); with ``inference="svi"`` or ``"mcmc"`` the posterior mean of the aligned
        draws.
    gamma_ : float
    nu_x_, nu_z_ : float
    eigenvalues_ : ndarray (q,)
        Theorem 2's :math:`\lambda^*` (closed form), eigenvalues of :math:`Z^*Z^{*\top}`.
    precision_posterior_ : ConjugateWishartPosterior
        :math:`\Theta_X \mid X` (the data-side precision, not Z).
    loss_history_ : ndarray
        Negative log joint during the MAP fit (empty for the closed form).
    posterior_, posterior_samples_, map_embedding_, z_prior_scale_
        With ``inference="svi"`` or ``"mcmc"``: see
        :class:`probdr.estimators.inference.PosteriorInference`.

    Notes
    -----
    The MAP runs on the preconditioned variable :math:`Y = (I + XX^\top)^{-1/2}Z` (same maximiser,
    flat prior), which makes L-BFGS converge in a few dozen iterations whatever the scale of X.
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

    def _fit(self, X: torch.Tensor) -> torch.Tensor:
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

    def _check_neighbors(self, n: int, p: int) -> None:
        self.input_ = self._make_input().check(n, p)

    def _laplacian(self, X: torch.Tensor) -> KNNLaplacian:
        L = self.input_.fit(X, random_state=self.random_state_)
        self.laplacian_ = L
        self.n_graph_components_ = L.n_connected_components()
        return L


class WishartEigenmaps(_LaplacianEstimator):
    r"""Laplacian eigenmaps as a Wishart MAP (ProbDR, Ravuri & Lawrence 2025, eq. 2).

    The Laplacian :math:`\hat L = D - A` of the symmetrised binary ``n_neighbors``-NN graph is read
    as a precision estimate, :math:`\nu\hat L \mid Z \sim \mathcal W((ZZ^\top + \beta I)^{-1},\nu)`
    (scale, dof), and Z maximises

    .. math:: \log|\beta I + HZZ^\top H| - \mathrm{tr}(Z^\top\hat LZ),

    (the Z-dependent Wishart terms; :math:`\hat L` is singular, see
    :mod:`probdr.models.probdr_wishart`). The embedding is centred (:math:`HZ`), so the
    constant eigenvector is excluded and the MAP spans eigenvectors 2..q+1 of :math:`\hat L` --
    Laplacian eigenmaps as users know them (unnormalised Laplacian), each axis scaled by
    :math:`(1/l_i - \beta)^{1/2}`.

    Parameters
    ----------
    n_components : int
    n_neighbors : int
        Neighbours per point of the kNN graph (self excluded), symmetrised by union.
    random_state : int or None
        Seed of the random initialisation.
    beta : float
        Ridge of the Wishart scale, :math:`\beta > 0`; must be below :math:`1/l_{q+1}`.
    ridge : float or None
        :math:`\delta` in :math:`\hat L + \delta I` (the paper's footnote 4). ``None``: 0 if the
        kNN graph is connected, else :math:`10^{-3}` times the mean degree, with a warning (the
        component indicators then come first, as in any spectral embedding of a disconnected
        graph).
    solver : {"map", "closed_form"}
    n_iter : int
        L-BFGS budget (function evaluations).
    neighbors : {"auto", "exact", "approximate", "pynndescent"}
    inference, inference_params, z_prior, coupling_weight
        A posterior over Z instead of the MAP (default ``inference="map"``): see
        :class:`probdr.estimators.inference.PosteriorInference`.

    metric, metric_params : str or callable, dict
        Dissimilarity of the rows for the kNN graph (:mod:`probdr.input.distances`).

    Attributes
    ----------
    embedding_ : ndarray (n, q)
        MAP embedding (centred, on its principal axes); with ``inference="svi"`` or ``"mcmc"``
        the posterior mean of the aligned draws.
    laplacian_ : KNNLaplacian
    eigenvalues_ : ndarray (q + 1,)
        Smallest eigenvalues of :math:`\hat L` (the first is 0).
    n_graph_components_ : int
    ridge_ : float
    posterior_, posterior_samples_, map_embedding_, z_prior_scale_
        With ``inference="svi"`` or ``"mcmc"``: see
        :class:`probdr.estimators.inference.PosteriorInference`.
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

    def _check_params_vs_input(self, n: int, p: int) -> None:
        self._check_neighbors(n, p)
        if self.n_components > n - 2:
            raise ValueError(f"n_components={self.n_components} needs at least "
                             f"{self.n_components + 2} samples, got {n}.")
        self._check_inference(n, self.n_components)

    def _column_eigenvalues(self) -> np.ndarray:
        # the MAP's columns are eigenvectors 2..q+1 of the Laplacian (principal axes)
        return self.eigenvalues_[1:self.embedding_.shape[1] + 1]

    def _fit(self, X: torch.Tensor) -> torch.Tensor:
        n = X.shape[0]
        q = self.n_components
        L = self._laplacian(X)
        ridge = self.ridge
        if ridge is None:
            ridge = L.default_ridge(self.n_graph_components_, warn_for=self.n_neighbors,
                                    stacklevel=4)  # the user's fit (past _fit_context)
        self.ridge_ = ridge
        Zcf, w = eigenmaps_solution(L, q, self.beta, ridge)
        self.eigenvalues_ = w.cpu().numpy()
        if (1.0 / (w[1:] + ridge) <= self.beta).any():
            raise ValueError(f"beta={self.beta} is too large: the MAP collapses on axes with "
                             f"1/(l_i + ridge) <= beta (eigenvalues {w[1:].tolist()}).")
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


class LaplacianWishart(_LaplacianEstimator):
    r"""ProbDR's Laplacian--Wishart model for UMAP/t-SNE-like embeddings (Ravuri & Lawrence 2025,
    eq. 5), fitted by MAP.

    .. math::
        \hat L \mid Z \sim \mathcal W\big(M(Z)^{-1}, n\big),\qquad
        M(Z) = \tfrac12\tilde\epsilon^{-1}I + \tfrac12 HP^uH + HZZ^\top H,\quad
        P^u_{ij} = \frac{1}{1 + \|z_i - z_j\|^2},

    on the symmetrised ``n_neighbors``-NN Laplacian, with
    :math:`\tilde\epsilon = 4 n_\text{neg} n_\text{neighbors}/(3n)`. Only the Z-dependent Wishart
    terms are used (the Laplacian is singular) and Z is centred, see
    :mod:`probdr.models.probdr_wishart`. Each step costs a dense :math:`n\times n` Cholesky
    (:math:`O(n^3)`): fine for a few thousand points on CPU.

    ``model="bernoulli"`` (eq. 4, :math:`A_{ij}\sim\mathcal B(\tilde\epsilon P^u_{ij})`) and
    ``model="cne"`` (eq. 3, the CNE energy of Damrich et al.) fit the comparison models the paper
    derives eq. (5) from.

    Parameters
    ----------
    n_components : int
    n_neighbors : int
        Neighbours per point (:math:`n_\text{neigh}`, also used in :math:`\tilde\epsilon`).
    random_state : int or None
    n_neg : int
        Number of negatives :math:`n_\text{neg}` in :math:`\tilde\epsilon` (5).
    eps_tilde : float, optional
        Override :math:`\tilde\epsilon`.
    nu : float, optional
        Wishart degrees of freedom; default :math:`n`.
    model : {"wishart", "bernoulli", "cne"}
    init : {"pca", "eigenmaps", "random"} or array (n, q)
        Initial embedding, rescaled so that its first axis has unit standard deviation
        (the paper does not state its initialisation).
    n_iter : int
        Adam steps of the MAP; the paper uses 50 with learning rate 1.
    learning_rate : float
    max_n : int
        Refuse larger inputs (dense :math:`n\times n` work per step).
    neighbors : {"auto", "exact", "approximate", "pynndescent"}
    inference, inference_params, z_prior, coupling_weight
        A posterior over Z instead of the MAP (default ``inference="map"``): see
        :class:`probdr.estimators.inference.PosteriorInference`.

    metric, metric_params : str or callable, dict
        Dissimilarity of the rows for the kNN graph (:mod:`probdr.input.distances`).

    Attributes
    ----------
    embedding_ : ndarray (n, q)
        Centred MAP embedding; with ``inference="svi"`` or ``"mcmc"`` the posterior mean of the
        aligned draws.
    laplacian_ : KNNLaplacian
    eps_tilde_ : float
    loss_history_ : ndarray
    posterior_, posterior_samples_, map_embedding_, z_prior_scale_
        With ``inference="svi"`` or ``"mcmc"``: see
        :class:`probdr.estimators.inference.PosteriorInference`.

    Notes
    -----
    The MAP of the paper is 50 Adam steps, not a converged maximiser; a posterior started there
    concentrates, as ``coupling_weight`` grows, on the mode it finds nearby, not on that
    iterate.
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

    def _check_params_vs_input(self, n: int, p: int) -> None:
        self._check_neighbors(n, p)
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

    def _fit(self, X: torch.Tensor) -> torch.Tensor:
        n = X.shape[0]
        q = self.n_components
        L = self._laplacian(X)
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
