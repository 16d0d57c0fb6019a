r"""ProbDR's unifying model (Ravuri & Lawrence, AABI 2025, eq. 1) as a scikit-learn estimator.

.. math::
    S \mid Z \sim \mathcal W^{-1}\big(Z_cZ_c^\top + \alpha HK(Z)H + \gamma I,\ \nu\big),\qquad
    p(Z) \propto 1,

fitted by MAP on the Pyro model :func:`probdr.models.probdr_general.probdr_general_model`, with
the covariance estimate :math:`S` of the data chosen by the user (the kNN Laplacian read as a
precision, the sample covariance, which gives dual probabilistic PCA, or a given matrix).

Reference
---------
A. Ravuri, N. D. Lawrence. *Towards One Model for Classical Dimensionality Reduction: A
Probabilistic Perspective on UMAP and t-SNE*. AABI 2025, eqs. (1), (2), (5) and footnote 4.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.utils.metaestimators import available_if

from .._utils import generator
from ..infer.map import map_estimate
from ..input.calibration import InputGraph
from ..laws.wishart import probdr_epsilon, theorem2_solution
from ..models.probdr_general import KERNELS, closed_form, probdr_general_model
from .base import DREstimator, in_fit_environment, unavailable_because
from .docs import reference
from .params import Int, InvalidParameterError, StrOptions
from .wishart import principal_axes
from .wishart_new_points import GraphRowMixin, LinearMapMixin

__all__ = ["ProbDR"]

COVARIANCES = ("laplacian", "sample")


def _is_sample(cov) -> bool:
    return isinstance(cov, str) and cov == "sample"


def _no_map_without_features(est) -> str | None:
    """Why ``est`` has no ``transform`` (``None`` where it has one)."""
    if isinstance(est.covariance, str):
        return None
    return ("ProbDR with a precomputed covariance matrix has no out-of-sample map: the model "
            "never sees the data's features. Use covariance='laplacian' or 'sample' to "
            "transform new points.")


@reference
class ProbDR(GraphRowMixin, DREstimator):
    """The unifying ProbDR model (Ravuri & Lawrence 2025, eq. 1), fitted by MAP: a covariance
    estimate S (n × n) of the data is inverse-Wishart given the embedding,
    S | Z ~ W⁻¹(Ψ(Z), ν) with Ψ(Z) = Z_c Z_cᵀ + α H K(Z) H + γ I, a flat prior on Z, Z_c = HZ
    (H the centring matrix) and K_ij = k(‖z_i - z_j‖²) a latent kernel. S is the kNN Laplacian
    read as a precision (the defaults: the UMAP/t-SNE-like model of eq. 5), the sample
    covariance (dual probabilistic PCA) or a given matrix.

    Parameters
    ----------
    n_components : int
        Dimension q of the embedding, at most n - 1.
    covariance : {"laplacian", "sample"} or array of shape (n_samples, n_samples)
        The covariance estimate S, used through Λ = S⁻¹: "laplacian", Λ = c (L̂ + εI), the
        Laplacian of the symmetrised binary kNN graph read as a precision (never inverted);
        "sample", S = Y_c Y_cᵀ / d (centred data, d features: dual probabilistic PCA),
        Λ = c (S + εI)⁻¹; an array: a covariance S, Λ = c (S + εI)⁻¹. Here c is
        ``precision_scale`` and ε ``ridge``.
    alpha : float
        Weight α ≥ 0 of the double-centred latent kernel.
    kernel : {"student", "gaussian"} or callable
        k(d²): Student (Cauchy) 1/(1 + d²) (eq. 5), Gaussian exp(-d²/2), or a callable of the
        squared distances (tensor in, tensor out).
    gamma : float or None
        γ > 0. None: ε̃⁻¹/2 = 3n / (8 n_neg n_neighbors) (eq. 5).
    nu : float or None
        Degrees of freedom ν > n - 1. None: n (eq. 5).
    n_neighbors : int
        Neighbours per point of the kNN graph (``covariance="laplacian"``), and n_neighbors in
        ε̃ = 4 n_neg n_neighbors / (3n).
    n_neg : int
        n_neg in ε̃.
    ridge : float or None
        ε ≥ 0. None: for the Laplacian 0 if the kNN graph is connected, else 1e-3 times the mean
        degree (with a warning); for the sample covariance 1e-6 tr(S)/n (S is singular when
        d < n); 0 for an array.
    precision_scale : float
        c > 0, which multiplies Λ.
    solver : {"map", "closed_form"}
        MAP on the Pyro model probdr.models.probdr_general.probdr_general_model, or the α = 0
        eigen-solution (``alpha=0`` only).
    optimizer : {"auto", "lbfgs", "adam"}
        "auto": L-BFGS for α = 0, Adam (the paper's optimiser) for α > 0. L-BFGS runs on the
        whitened variable Y = Λ^(1/2) Z (same maximiser), Adam on Z.
    init : {"pca", "eigen", "random"} or array of shape (n_samples, n_components)
        "pca": PCA scores, "random": standard normal, both rescaled to unit standard deviation
        of the first axis (as LaplacianWishart); "eigen": the α = 0 closed form of this model
        (unscaled).
    n_iter : int or None
        L-BFGS: budget of function evaluations (None: 2000, stopping at a relative change of the
        loss of 1e-13); Adam: steps (None: 50, the paper's).
    learning_rate : float
        L-BFGS initial step or Adam learning rate (1, the paper's).
    max_n : int
        Refuse larger inputs: the precision is a dense n × n matrix.
    metric : str or callable
        Dissimilarity of the rows for the kNN Laplacian (probdr.input.distances; the names are
        those of GraphCoupling), or "precomputed": X is a dense square distance matrix.

    Attributes
    ----------
    embedding_ : ndarray of shape (n_samples, n_components)
        The MAP embedding, centred and rotated to its principal axes.
    input_
    precision_ : ndarray of shape (n_samples, n_samples)
        Λ.
    gamma_ : float
        γ used.
    nu_ : float
        ν used.
    ridge_ : float
        ε used.
    eps_tilde_ : float
        ε̃ used.
    gram_eigenvalues_ : ndarray of shape (n_components,)
        Eigenvalues of Z_c Z_cᵀ, decreasing.
    closed_form_eigenvalues_ : ndarray of shape (n_components,) or None
        λ* of the closed form (``alpha=0``; None otherwise).
    laplacian_ : KNNLaplacian or None
        The kNN Laplacian (``covariance="laplacian"``).
    n_graph_components_ : int
        Connected components of the kNN graph (``covariance="laplacian"``).
    loss_history_ : ndarray
        Negative log joint during the MAP fit (empty for the closed form).
    n_threads_
    device_
    random_state_

    See Also
    --------
    LaplacianWishart : eq. 5 with its comparison models (eqs. 3 and 4).
    WishartEigenmaps : eq. 2, Laplacian eigenmaps.
    WishartPCA : PCA as a Wishart coupling.

    Notes
    -----
    With Λ = S⁻¹ the Z-dependent log-likelihood is::

        ℓ(Z) = ν/2 · log det Ψ(Z) - 1/2 · tr(Ψ(Z) Λ)

    At α = 0 the MAP is Z* = U_q diag(λ*)^(1/2), up to a rotation, with λ*_i = max(0, ν/μ_i - γ)
    along the eigenvectors u_i of the q smallest eigenvalues μ_i of Λ on centred vectors; for
    the Laplacian and the sample covariance (S1 ∝ 1) this is max(0, ν s_i - γ) along the top
    non-constant eigenvectors of the modelled S = Λ⁻¹, so the sample covariance's MAP spans
    PCA's top components (dual PPCA). The paper's models: eq. 2 (Laplacian eigenmaps) is
    ``covariance="laplacian"``, ``alpha=0``, ``gamma=beta``, ``precision_scale=nu``; eq. 5 (the
    defaults) is ``covariance="laplacian"``, ``alpha=0.5``, ``kernel="student"``,
    γ = ε̃⁻¹/2, ν = n, ``precision_scale=1``. ``transform`` exists for the Laplacian (the new
    node's kNN row) and the sample covariance (a linear map), not for a given matrix.

    References
    ----------
    A. Ravuri, N. D. Lawrence. Towards One Model for Classical Dimensionality Reduction: A
    Probabilistic Perspective on UMAP and t-SNE. AABI 2025.

    Examples
    --------
    >>> import probdr
    >>> X, y = probdr.datasets.load("digits", n_samples=200)
    >>> pdr = probdr.ProbDR(n_components=2, random_state=0)
    >>> Z = pdr.fit_transform(X)
    >>> Z.shape
    (200, 2)

    Dual probabilistic PCA, in closed form:

    >>> ppca = probdr.ProbDR(covariance="sample", alpha=0, solver="closed_form").fit(X)
    >>> ppca.transform(X[:5]).shape
    (5, 2)
    """

    _lbfgs_tol = 1e-13

    _constraint_overrides = {
        "n_iter": [Int(1), None], "n_neighbors": [Int(1)],
        "covariance": [StrOptions(set(COVARIANCES)), "array-like"],
        "kernel": [StrOptions(set(KERNELS)), callable],
        "solver": [StrOptions({"map", "closed_form"})],
        "optimizer": [StrOptions({"auto", "lbfgs", "adam"})],
        "init": [StrOptions({"pca", "eigen", "random"}), "array-like"]}

    def __init__(self, n_components: int = 2, covariance="laplacian",
                 random_state: int | None = None, *, alpha: float = 0.5, kernel="student",
                 gamma: float | None = None, nu: float | None = None, n_neighbors: int = 15,
                 n_neg: int = 5, ridge: float | None = None, precision_scale: float = 1.0,
                 solver: str = "map", optimizer: str = "auto", init="pca",
                 n_iter: int | None = None, learning_rate: float = 1.0, max_n: int = 6000,
                 neighbors: str = "auto", callbacks=None,
                 callbacks_every: int = 50, n_jobs=None, device="auto", metric="euclidean", metric_params=None):
        self.n_components = n_components
        self.covariance = covariance
        self.random_state = random_state
        self.alpha = alpha
        self.kernel = kernel
        self.gamma = gamma
        self.nu = nu
        self.n_neighbors = n_neighbors
        self.n_neg = n_neg
        self.ridge = ridge
        self.precision_scale = precision_scale
        self.solver = solver
        self.optimizer = optimizer
        self.init = init
        self.n_iter = n_iter
        self.learning_rate = learning_rate
        self.max_n = max_n
        self.neighbors = neighbors
        self.callbacks = callbacks
        self.callbacks_every = callbacks_every
        self.n_jobs = n_jobs
        self.device = device
        self.metric = metric
        self.metric_params = metric_params

    # -- parameters ------------------------------------------------------------------------------
    def _gamma(self, n: int) -> float:
        if self.gamma is not None:
            return float(self.gamma)
        return 0.5 / probdr_epsilon(n, self.n_neg, self.n_neighbors)

    def _make_input(self) -> InputGraph:
        return InputGraph(affinity="knn", n_neighbors=self.n_neighbors, neighbors=self.neighbors,
                          metric=self.metric, metric_params=self.metric_params)

    def _check_params_together(self) -> None:
        super()._check_params_together()
        cov = self.covariance
        if not isinstance(cov, str):
            S = np.asarray(cov)
            if S.dtype.kind not in "biuf" or S.ndim != 2:
                raise InvalidParameterError(
                    f"covariance must be 'laplacian', 'sample' or a real (n, n) array, got "
                    f"{type(cov).__name__} of shape {getattr(S, 'shape', None)}.")
            S = S.astype(np.float64)
            if not np.isfinite(S).all():
                raise InvalidParameterError("covariance contains non-finite values.")
            if S.shape[0] != S.shape[1] or not np.allclose(
                    S, S.T, rtol=1e-10, atol=1e-12 * max(np.abs(S).max(initial=0), 1e-300)):
                raise InvalidParameterError("covariance must be a symmetric matrix.")
        if self.solver == "closed_form" and self.alpha != 0:
            raise InvalidParameterError(
                f"solver='closed_form' needs alpha=0 (the kernel term has no closed form), got "
                f"alpha={self.alpha!r}.")

    def _check_params_vs_input(self, n: int, p: int):
        side = None  # the kNN graph (covariance="laplacian"); places new points
        if isinstance(self.covariance, str) and self.covariance == "laplacian":
            side = self._make_input().check(n, p)
        q = self.n_components
        if n > self.max_n:
            raise ValueError(
                f"ProbDR works with dense n x n matrices (the precision, and the latent kernel's "
                f"Cholesky for alpha > 0); n={n} exceeds max_n={self.max_n}. Subsample, or raise "
                "max_n if you have the memory.")
        if q > n - 1:
            raise ValueError(f"n_components={q} must be at most n - 1 = {n - 1} (the centred "
                             "embedding has rank <= n - 1).")
        cov = self.covariance  # a real symmetric array: _check_params_together
        if not isinstance(cov, str) and np.shape(cov) != (n, n):
            raise ValueError(f"covariance must be 'laplacian', 'sample' or a real array of shape "
                             f"({n}, {n}), got shape {np.shape(cov)}.")
        if self.nu is not None and not self.nu > n - 1:
            raise ValueError(f"nu must be a finite number > n - 1 = {n - 1} (inverse Wishart "
                             f"degrees of freedom) or None, got {self.nu!r}.")
        if not isinstance(self.init, str) and np.shape(self.init) != (n, q):
            raise ValueError(f"init must be 'pca', 'eigen', 'random' or a finite array of shape "
                             f"({n}, {q}), got shape {np.shape(self.init)}.")
        return side

    # -- new points -----------------------------------------------------------------------------
    _keeps_training_data = True  # for the linear map of covariance="sample" (_after_fit)

    def _keeps_data_now(self) -> bool:
        return _is_sample(self.covariance)

    def _after_fit(self) -> None:
        if _is_sample(self.covariance):
            LinearMapMixin._after_fit(self)

    @available_if(unavailable_because(_no_map_without_features))
    @in_fit_environment
    def transform(self, X):
        """Place new points: with ``covariance="laplacian"`` by the new node's kNN-graph row (the
        conditional mean of the Laplacian's Gaussian Markov random field, the neighbours' mean;
        see :class:`~probdr.estimators.wishart_new_points.GraphRowMixin`); with ``"sample"`` (dual
        PPCA, linear in the data) by the fitted linear map ``projection_``."""
        if _is_sample(self.covariance):
            return LinearMapMixin.transform(self, X)
        return GraphRowMixin.transform(self, X)

    def _linear_map(self):
        return LinearMapMixin._linear_map(self)

    # -- the precision -----------------------------------------------------------------------------
    def _fit_precision(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        r""":math:`\Lambda` (dense) and a factor :math:`W`, :math:`\Lambda = W^\top W` (``None``
        for the Laplacian, which is well conditioned on the embedding's span)."""
        n, p = X.shape
        c = float(self.precision_scale)
        cov = self.covariance
        self.laplacian_ = None
        if isinstance(cov, str) and cov == "laplacian":
            L = self.input_.fit(X, random_state=self.random_state_)
            self.laplacian_ = L
            self.n_graph_components_ = L.n_connected_components()
            ridge = self.ridge
            if ridge is None:
                ridge = L.default_ridge(self.n_graph_components_, warn_for=self.n_neighbors,
                                        stacklevel=5)  # the user's fit
            self.ridge_ = float(ridge)
            return c * (L.dense() + self.ridge_ * torch.eye(n, dtype=torch.float64)), None
        if isinstance(cov, str):  # sample covariance, dual PPCA
            Yc = X - X.mean(0, keepdim=True)
            S = Yc @ Yc.T / p
            default_ridge = max(1e-6 * float(torch.diagonal(S).mean()), 1e-12)
        else:
            S = torch.as_tensor(np.asarray(cov, dtype=np.float64))
            S = 0.5 * (S + S.T)
            default_ridge = 0.0
        self.ridge_ = default_ridge if self.ridge is None else float(self.ridge)
        s, V = torch.linalg.eigh(S)
        s = s + self.ridge_
        if not bool(s[0] > 1e-12 * max(float(s[-1].abs()), 1e-300)):
            raise ValueError(f"covariance + ridge * I is not positive definite (smallest "
                             f"eigenvalue {float(s[0]):.3g}); pass a positive ridge.")
        return (V * (c / s)) @ V.T, (V * torch.sqrt(c / s)).T.contiguous()

    # -- fit ------------------------------------------------------------------------------------
    def _init(self, X, Lam, nu, gamma, gen) -> torch.Tensor:
        n, q = X.shape[0], self.n_components
        init = self.init
        if not isinstance(init, str):
            return torch.as_tensor(np.asarray(init, dtype=np.float64)).clone()
        if init == "eigen":
            return closed_form(Lam, q, nu, gamma)[0]
        if init == "pca":
            Z = theorem2_solution(X - X.mean(0, keepdim=True), q)
        else:
            Z = torch.randn(n, q, dtype=torch.float64, generator=gen)
        Z = Z - Z.mean(0, keepdim=True)
        sd = Z.std(0)
        scale = float(sd[0]) if float(sd[0]) > 0 else 1.0
        Z = Z / scale
        dead = sd <= 1e-12 * scale  # zero PCA axes (q > rank): a stationary point, perturb them
        if bool(dead.any()):
            Z[:, dead] = 1e-2 * torch.randn(n, int(dead.sum()), dtype=torch.float64,
                                            generator=gen)
        return Z

    def _fit(self, X: torch.Tensor, y=None) -> torch.Tensor:
        n = X.shape[0]
        q = self.n_components
        alpha = float(self.alpha)
        self.eps_tilde_ = probdr_epsilon(n, self.n_neg, self.n_neighbors)
        self.gamma_ = self._gamma(n)
        self.nu_ = float(n) if self.nu is None else float(self.nu)
        Lam, W = self._fit_precision(X)
        self.precision_ = Lam.cpu().numpy()
        self.closed_form_eigenvalues_ = None
        self.loss_history_ = np.empty(0)
        if alpha == 0.0:
            Zcf, lam, _ = closed_form(Lam, q, self.nu_, self.gamma_)
            self.closed_form_eigenvalues_ = lam.cpu().numpy()
        gen = generator(self.random_state_)
        if self.solver == "closed_form":
            Z = Zcf
        else:
            Z0 = self._init(X, Lam, self.nu_, self.gamma_, gen)
            optimizer = self.optimizer
            if optimizer == "auto":
                optimizer = "lbfgs" if alpha == 0.0 else "adam"
            n_iter = self.n_iter if self.n_iter is not None else (
                2000 if optimizer == "lbfgs" else 50)
            kwargs = dict(precision=Lam, n_components=q, nu=self.nu_, gamma=self.gamma_,
                          alpha=alpha, kernel=self.kernel, factor=W)
            reparam = _whitening(Lam) if optimizer == "lbfgs" else None
            vals, self.loss_history_ = map_estimate(
                probdr_general_model, kwargs, {"Z": Z0}, optimizer=optimizer, n_iter=n_iter,
                lr=float(self.learning_rate), tol=self._lbfgs_tol, return_history=True,
                reparam=reparam)
            Z = vals["Z"]
        Z = Z.detach()
        Z = principal_axes(Z - Z.mean(0, keepdim=True))  # centred, on its principal axes
        self.gram_eigenvalues_ = torch.linalg.eigvalsh(Z.T @ Z).flip(0).cpu().numpy()
        return Z



def _whitening(Lam: torch.Tensor) -> dict:
    r"""The change of variables :math:`Y = PZ`, :math:`P = (\Lambda + \tau I)^{1/2}` with
    :math:`\tau` lifting null directions (the constant vector of a Laplacian) to the smallest
    positive eigenvalue: the trace term :math:`\tfrac12\mathrm{tr}(Z^\top\Lambda Z)` becomes
    (about) :math:`\tfrac12\|Y\|^2`, so that L-BFGS sees a problem of unit scale. One dense
    eigendecomposition. Returns ``{"Z": (to_site, from_site)}``."""
    w, V = torch.linalg.eigh(0.5 * (Lam + Lam.T))
    top = max(float(w[-1]), 1e-300)
    positive = w > 1e-10 * top
    floor = float(w[positive].min()) if bool(positive.any()) else 1.0
    d = torch.sqrt(w.clamp_min(floor))
    P, P_inv = (V * d) @ V.T, (V / d) @ V.T
    return {"Z": (lambda Y: P_inv @ Y, lambda Z: P @ Z)}
