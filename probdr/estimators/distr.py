r"""Distributional Reduction (DistR): joint dimensionality reduction and clustering with
semi-relaxed Gromov-Wasserstein (Van Assel, Vincent-Cuaz, Courty, Flamary, Frossard & Vayer,
2024; thesis ch. 5).

DistR looks for a small weighted point cloud :math:`\mu_Z = \sum_k [\mathbf h_Z]_k\delta_{z_k}`,
:math:`z_k\in\mathbb R^d`, :math:`k\le n` (prototypes), closest to the data in the GW sense:

.. math::
    \min_{\mathbf Z\in\mathbb R^{n\times d},\,\mathbf h_Z\in\Sigma_n}
    \mathrm{GW}_L(\mathbf C_X(\mathbf X), \mathbf C_Z(\mathbf Z), \mathbf h_X, \mathbf h_Z)
    = \min_{\mathbf Z}\ \min_{\mathbf T\in\mathcal U_n(\mathbf h_X)}
    E_L(\mathbf C_X, \mathbf C_Z(\mathbf Z), \mathbf T),\qquad \mathbf h_Z = \mathbf T^\top\mathbf 1_N,

solved by block-coordinate descent (thesis §5.3.3): a **Z-step** (Adam steps of probdr's MAP
driver :class:`probdr.infer.map.MAPFit` on the Pyro model
:func:`probdr.models.ot_distr.distr_model`, T fixed; the optimiser keeps its moments from one
round to the next) alternates with a **T-step** (semi-relaxed
GW for fixed Z: POT's conditional gradient with exact line search, warm-started, or KL mirror
descent :math:`\mathbf T\leftarrow\mathrm{diag}(\mathbf h/\mathbf K\mathbf 1)\mathbf K`,
:math:`\mathbf K = \mathbf T\odot\exp(-\nabla F/\varepsilon)`). The coupling is a soft assignment
of samples to prototypes; conditional gradient returns membership matrices in practice, whence
the clustering ``labels_`` (:math:`\arg\max_k T_{ik}`). Prototypes that receive no mass are
"dead": DistR selects an effective number of clusters.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from .._utils import generator
from ..infer.map import MAPFit, Phase
from ..init import pad_columns
from ..input.calibration import InputGraph
from ..input.graph import sea_affinity
from ..models.ot_distr import distr_model, prototype_affinity, srgw_energy
from ..ot.srgw import gw_f1
from .base import DREstimator, in_fit_environment
from .docs import reference
from .params import InvalidParameterError, StrOptions

__all__ = ["DistR"]

AFFINITIES_IN = ("sea", "gram")
AFFINITIES_OUT = ("student", "gaussian", "gram")


@reference
class DistR(DREstimator):
    """Distributional Reduction (Van Assel et al. 2024): dimensionality reduction and clustering
    at once, by semi-relaxed Gromov-Wasserstein. DistR looks for a few low-dimensional
    prototypes z_k with weights h_k, and a soft assignment T of the samples to them, such that
    the prototypes' affinity C_Z(Z) matches the data's C_X(X) in the Gromov-Wasserstein sense:
    min over Z and T of E_L(C_X, C_Z(Z), T), T with row sums h_X = 1/N, h_Z = Tᵀ1.

    ``fit_transform(X)`` returns one row per sample, the barycentric projection
    Σ_k T_ik z_k / h_X,i (each sample placed on its prototype, or between prototypes for a soft
    assignment); the prototypes are ``prototypes_``, and ``labels_`` gives each sample's
    prototype. Prototypes that receive no mass are dead: DistR selects an effective number of
    clusters.

    Parameters
    ----------
    n_prototypes : int
        Number of prototypes, an upper bound on the number of clusters, in [2, N].
    n_components : int
        Dimension d of the prototypes, smaller than the number of features.
    affinity_in : {"sea", "gram"}
        C_X: the symmetric entropic affinity (with self-loops) scaled to mean 1 under
        h_X h_Xᵀ (i.e. N P^se, thesis Fig. 5.2), or the Gram matrix XXᵀ of the centred data
        (the srGW analogue of PCA, with ``affinity_out="gram"`` and ``loss="square"``).
    perplexity : float
        Perplexity of the symmetric entropic affinity (> 1).
    affinity_out : {"student", "gaussian", "gram"}
        C_Z: the Student kernel 1/(1 + ‖z_k - z_l‖²) or the Gaussian kernel, rescaled to mean
        1 over pairs of prototypes, or ZZᵀ.
    loss : {"kl", "square"}
        Inner loss L: the generalised KL a log(a/b) - a + b, or (a - b)².
    solver : {"cg", "md"}
        T-step solver: conditional gradient (POT's semirelaxed_gromov_wasserstein) or KL mirror
        descent (POT's entropic_semirelaxed_gromov_wasserstein, step ``md_epsilon``).
    md_epsilon : float
        Regularisation ε of the mirror descent (``solver="md"``).
    n_outer : int
        Maximum number of block-coordinate rounds (a Z-step and a T-step each).
    z_steps : int
        Adam steps on Z per round.
    learning_rate : float
        Adam's learning rate in the Z-step.
    init : {"pca", "random"} or array of shape (n_prototypes, n_components)
        The prototypes' initial positions: PCA scores of the initial clusters' barycentres
        (standardised), or N(0, 1).
    init_T : {"kmeans", "random"}
        Initial assignment: k-means membership (``n_init=1``, seeded) or a random soft
        assignment. (The product coupling h 1ᵀ/n is a symmetric saddle that collapses onto one
        prototype, so it is not offered.)
    tol : float
        Stop when the relative change of the objective between rounds is below ``tol``.
    srgw_max_iter : int
        Iteration cap of each T-step.
    callbacks : callable, list of callables or None
        Called as ``callback(round, embedding, loss)`` every ``callbacks_every`` rounds, with
        the samples' current positions and the objective; the fit stops when one returns True
        (``stopped_by_callback_``).
    callbacks_every : int
        Rounds between two calls of the callbacks.

    Attributes
    ----------
    embedding_ : ndarray of shape (n_samples, n_components)
        The samples' barycentric projection onto the prototypes.
    prototypes_ : ndarray of shape (n_prototypes, n_components)
        The prototypes' positions Z.
    weights_ : ndarray of shape (n_prototypes,)
        h_Z = Tᵀ1 (sums to 1; 0 for dead prototypes).
    assignment_ : ndarray of shape (n_samples, n_prototypes)
        The coupling T (rows sum to 1/N).
    labels_ : ndarray of shape (n_samples,)
        Each sample's prototype, argmax_k T_ik.
    n_effective_ : int
        Number of prototypes with positive mass.
    medoids_ : ndarray of shape (n_prototypes,)
        For each prototype, argmax_i (C_X T)_ik (-1 if dead).
    input_
    input_affinity_ : ndarray of shape (n_samples, n_samples)
        C_X.
    loss_history_ : ndarray
        E_L after every round.
    n_iter_
    stopped_by_callback_
    n_threads_
    device_
    random_state_

    See Also
    --------
    GWMDS : Gromov-Wasserstein multidimensional scaling, one point per sample.
    SNEkhorn : the symmetric entropic affinity with one point per sample.

    Notes
    -----
    The fit alternates a Z-step (Adam steps of probdr's MAP driver on the Pyro model
    probdr.models.ot_distr.distr_model, T fixed; the optimiser keeps its moments from one round
    to the next) with a T-step (semi-relaxed GW for fixed Z, warm-started). Conditional
    gradient returns membership matrices in practice, whence the clustering. ``predict`` gives
    the prototype of new points and ``transform`` its position.

    References
    ----------
    H. Van Assel, C. Vincent-Cuaz, N. Courty, R. Flamary, P. Frossard, T. Vayer. Distributional
    Reduction: Unifying Dimensionality Reduction and Clustering with Gromov-Wasserstein.
    arXiv:2402.02239 (2024). H. Van Assel, PhD thesis (2024), ch. 5.

    Examples
    --------
    >>> import probdr
    >>> X, y = probdr.datasets.load("digits", n_samples=200)
    >>> distr = probdr.DistR(n_prototypes=10, perplexity=20, random_state=0)
    >>> Z = distr.fit_transform(X)
    >>> Z.shape, distr.prototypes_.shape
    ((200, 2), (10, 2))
    >>> distr.predict(X[:5]).shape
    (5,)
    """

    _constraint_overrides = {
        "affinity_in": [StrOptions(set(AFFINITIES_IN))],
        "affinity_out": [StrOptions(set(AFFINITIES_OUT))],
        "loss": [StrOptions({"kl", "square"})],
        "solver": [StrOptions({"cg", "md"})],
        "init": [StrOptions({"pca", "random"}), "array-like"],
        "init_T": [StrOptions({"kmeans", "random"})]}

    def __init__(
        self,
        n_prototypes: int = 10,
        n_components: int = 2,
        *,
        affinity_in: str = "sea",
        perplexity: float = 30.0,
        affinity_out: str = "student",
        loss: str = "kl",
        solver: str = "cg",
        md_epsilon: float = 0.1,
        n_outer: int = 50,
        z_steps: int = 20,
        learning_rate: float = 0.1,
        init="pca",
        init_T: str = "kmeans",
        tol: float = 1e-6,
        srgw_max_iter: int = 1000,
        random_state: int | None = None,
        verbose: bool = False,
        callbacks=None,
        callbacks_every: int = 50,
        n_jobs: int | None = None,
        device="auto",
    ):
        self.n_prototypes = n_prototypes
        self.n_components = n_components
        self.affinity_in = affinity_in
        self.perplexity = perplexity
        self.affinity_out = affinity_out
        self.loss = loss
        self.solver = solver
        self.md_epsilon = md_epsilon
        self.n_outer = n_outer
        self.z_steps = z_steps
        self.learning_rate = learning_rate
        self.init = init
        self.init_T = init_T
        self.tol = tol
        self.srgw_max_iter = srgw_max_iter
        self.random_state = random_state
        self.verbose = verbose
        self.callbacks = callbacks
        self.callbacks_every = callbacks_every
        self.n_jobs = n_jobs
        self.device = device

    # ------------------------------------------------------------------------------------------
    def _check_params_together(self) -> None:
        super()._check_params_together()
        if self.loss == "kl" and (self.affinity_out == "gram" or self.affinity_in == "gram"):
            raise InvalidParameterError(
                "loss='kl' needs positive affinities: use affinity_in='sea' and a kernel "
                "affinity_out ('student' or 'gaussian'), or loss='square'.")
        if self.affinity_in == "sea" and not self.perplexity > 1:
            raise InvalidParameterError(f"perplexity must exceed 1 for affinity_in='sea', got "
                                        f"{self.perplexity!r}.")
        if not isinstance(self.init, str):
            shape = np.shape(self.init)
            if shape != (self.n_prototypes, self.n_components):
                raise InvalidParameterError(
                    f"init array must have shape (n_prototypes, n_components) = "
                    f"({self.n_prototypes}, {self.n_components}), got {shape}.")

    def _check_init_shape(self, n: int) -> None:
        """The prototypes' ``init`` (n_prototypes rows) is checked with the parameters."""

    def _check_params_vs_input(self, n: int, p: int) -> None:
        if self.n_prototypes > n:
            raise ValueError(f"n_prototypes must be an integer in [2, n_samples] = [2, {n}], "
                             f"got {self.n_prototypes!r}.")
        if self.affinity_in == "sea" and self.perplexity > n - 1:
            raise ValueError(f"perplexity must lie in (1, n - 1] = (1, {n - 1}], got "
                             f"{self.perplexity!r}.")

    # -- new points -----------------------------------------------------------------------------
    def _new_assignment(self, X) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
        Xt = self._validate_new(X)
        T = self.assignment_ / self.assignment_.sum(1, keepdims=True).clip(1e-300)
        side = self._fitted_input()
        return side.averaged(Xt, T, validated=True), side.matches(Xt, validated=True), Xt

    @in_fit_environment
    def predict(self, X) -> np.ndarray:
        """The prototype of each new point: the largest entry of its neighbours' average
        assignment Σ_j p_ij T_j / p_i+ (p_i its entropic input row against the training
        samples, at the fit's perplexity, T_j a training sample's row of the coupling); a
        training sample keeps its ``labels_``."""
        A, match, _ = self._new_assignment(X)
        labels = A.argmax(1)
        seen = (match >= 0).cpu().numpy()
        labels[seen] = self.labels_[match.cpu().numpy()[seen]]
        return labels

    @in_fit_environment
    def transform(self, X):
        """The positions of the new points' prototypes (:meth:`predict`), ``prototypes_[
        predict(X)]``; a training sample keeps its fitted position."""
        A, match, Xt = self._new_assignment(X)
        Z = torch.as_tensor(self.prototypes_[A.argmax(1)].copy())
        seen = match >= 0
        Z[seen] = torch.as_tensor(self.embedding_)[match[seen]]
        return self._output(Z, X)

    def _input_affinity(self, X: torch.Tensor) -> torch.Tensor:
        N = X.shape[0]
        if self.affinity_in == "sea":
            P = sea_affinity(X, self.perplexity)
            return P * N  # mean 1 under h h^T with h = 1/N
        Xc = X - X.mean(0, keepdim=True)
        G = Xc @ Xc.T
        return G / G.abs().mean()

    def _init_T(self, X: torch.Tensor, h: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        N, k = X.shape[0], self.n_prototypes
        if self.init_T == "kmeans":
            from sklearn.cluster import KMeans

            lab = KMeans(k, n_init=1, random_state=self.random_state_).fit_predict(X.cpu().numpy())
            T = torch.zeros(N, k, dtype=torch.float64)
            T[torch.arange(N), torch.as_tensor(lab)] = 1.0
        else:
            T = torch.rand(N, k, dtype=torch.float64, generator=gen) + 1e-3
            T = T / T.sum(1, keepdim=True)
        return T * h[:, None]

    def _init_Z(self, X: torch.Tensor, T: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        k, d = self.n_prototypes, self.n_components
        if not isinstance(self.init, str):
            return torch.as_tensor(np.asarray(self.init), dtype=torch.float64).clone()
        if self.init == "random":
            return torch.randn(k, d, dtype=torch.float64, generator=gen)
        q = T.sum(0)
        alive = q > 0
        B = (T.T @ X) / q.clamp_min(1e-300)[:, None]
        B[~alive] = X.mean(0)
        Bc = B - (q[:, None] * B).sum(0) / q.sum()
        U, S, Vh = torch.linalg.svd(Bc, full_matrices=False)
        Z = U[:, :d] * S[:d]
        Z = pad_columns(Z / Z[:, 0].std().clamp_min(1e-12), d, gen)
        return Z + 1e-3 * torch.randn(Z.shape, dtype=Z.dtype, generator=gen)

    def _t_step(self, C_X: np.ndarray, Cbar: np.ndarray, h: np.ndarray, T: np.ndarray):
        import ot

        loss_fun = "square_loss" if self.loss == "square" else "kl_loss"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self.solver == "cg":
                T_new = ot.gromov.semirelaxed_gromov_wasserstein(
                    C_X, Cbar, h, loss_fun=loss_fun, symmetric=True, G0=T,
                    max_iter=int(self.srgw_max_iter), tol_rel=1e-9, tol_abs=1e-9)
            else:
                T_new = ot.gromov.entropic_semirelaxed_gromov_wasserstein(
                    C_X, Cbar, h, loss_fun=loss_fun, epsilon=float(self.md_epsilon),
                    symmetric=True, G0=T, max_iter=int(self.srgw_max_iter), tol=1e-9)
        if not np.isfinite(T_new).all():
            raise FloatingPointError("DistR: the srGW T-step produced a non-finite coupling; "
                                     "try solver='cg' or a larger md_epsilon.")
        return T_new

    def _make_input(self) -> InputGraph:
        # new points: their entropic rows at the fit's perplexity average the training points'
        return InputGraph("D", "entropic", perplexity=self.perplexity)

    def _fit(self, X: torch.Tensor, y=None) -> torch.Tensor:
        N, d = X.shape[0], self.n_components
        self.input_ = self._make_input().reference(X)
        gen = generator(self.random_state_)
        C_X = self._input_affinity(X)
        self.input_affinity_ = C_X.cpu().numpy()
        h = torch.full((N,), 1.0 / N, dtype=torch.float64)
        const = float((gw_f1(C_X, self.loss) * h[:, None] * h[None, :]).sum())
        T = self._init_T(X, h, gen)
        Z0 = self._init_Z(X, T, gen)
        kind, loss = self.affinity_out, self.loss
        C_np, h_np = C_X.cpu().numpy(), h.cpu().numpy()

        # the Z-steps are MAP steps of the Pyro model (one Adam optimiser over all rounds)
        z_phase = Phase(int(self.z_steps), float(self.learning_rate), name="Z-step")
        history: list[float] = []
        Z = Z0
        it = 0
        callback = self._callback()
        self.stopped_by_callback_ = False
        with MAPFit(distr_model, {"Z": Z0}, optimizer="adam", collapse_floor=None,
                    desc="DistR Z-step", callback=False) as fit:
            for it in range(1, int(self.n_outer) + 1):
                # Z-step (T fixed): A = T^T C_X T is cached
                kw = dict(A=T.T @ C_X @ T, q=T.sum(0), n_components=d, kind=kind, loss=loss,
                          const=const)
                fit.run(z_phase, kw)
                Z = fit.values(kw)["Z"]
                # T-step (Z fixed)
                Cbar = prototype_affinity(Z, kind).cpu().numpy()
                T = torch.as_tensor(self._t_step(C_np, Cbar, h_np, T.cpu().numpy()))
                with torch.no_grad():
                    E = float(srgw_energy(Z, T.T @ C_X @ T, T.sum(0), kind, loss, const))
                if not np.isfinite(E):
                    raise FloatingPointError("DistR: the objective became non-finite; lower "
                                             "the learning rate.")
                history.append(E)
                if self.verbose:
                    print(f"DistR round {it}: E = {E:.6g}, effective prototypes "
                          f"{int((T.sum(0) > 1e-10 / N).sum())}")
                if callback is not None and it % self.callbacks_every == 0 and callback(
                        it, ((T @ Z) / T.sum(1, keepdim=True)).cpu().numpy(), E):
                    self.stopped_by_callback_ = True
                    break
                if len(history) >= 2 and abs(history[-2] - E) <= self.tol * max(
                        abs(history[-2]), 1e-300):
                    break
        self.loss_history_ = np.asarray(history)
        self.n_iter_ = it
        Tn = T.cpu().numpy()
        self.assignment_ = Tn
        self.weights_ = Tn.sum(0)
        self.labels_ = Tn.argmax(1)
        alive = self.weights_ > 1e-10 / N
        self.n_effective_ = int(alive.sum())
        self.prototypes_ = Z.cpu().numpy().copy()
        samples = (Tn @ self.prototypes_) / Tn.sum(1, keepdims=True)
        med = (C_np @ Tn).argmax(0)
        self.medoids_ = np.where(alive, med, -1)
        return torch.as_tensor(samples)
