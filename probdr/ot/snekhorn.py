r"""SNEkhorn and t-SNEkhorn as graph couplings (Van Assel, Vayer, Flamary & Courty, NeurIPS 2023;
thesis ch. 4).

SNEkhorn minimises :math:`\mathrm{KL}(\mathbf P^{se}\,|\,\mathbf Q^{ds}_Z)` between the symmetric
entropic affinity of the data and a **doubly stochastic** latent affinity

.. math::
    \mathbf Q^{ds}_Z = \exp(\mathbf f_Z \oplus \mathbf f_Z + \log\mathbf K_Z),\qquad
    \mathbf Q^{ds}_Z\mathbf 1 = \mathbf 1,

with :math:`K_{Z,ij} = \exp(-\|z_i - z_j\|^2)` (SNEkhorn) or :math:`(1+\|z_i-z_j\|^2)^{-1}`
(t-SNEkhorn), :math:`\mathbf f_Z` the symmetric Sinkhorn potentials (bandwidth 1).

**Graph-coupling reading** (spec §6.6 suggestion, made exact here). Let the latent graph follow the
E law (:math:`n` edges, :math:`W \sim \mathcal M(n, w/w_{++})`) with kernel :math:`\mathbf K_Z`
and the edge prior :math:`\pi_{ij} = e^{f_i + f_j}` given by the Sinkhorn potentials of
:math:`\mathbf K_Z`, treated as a constant (detached). Then

* its mean :math:`n\,\pi\odot\mathbf K_Z/\sum\pi\odot\mathbf K_Z = \mathbf Q^{ds}_Z` is doubly
  stochastic (at Sinkhorn convergence :math:`\sum_{ij}\pi_{ij}K_{ij} = n`);
* its cross-entropy with the input graph of mean :math:`\mathbf P^{se}` (mass n) is
  :math:`-\sum_{i\ne j}P_{ij}(f_i+f_j+\log K_{ij}) + n\log\sum_{ij}\pi_{ij}K_{ij}
  = \langle\mathbf P^{se}, \mathbf C_Z\rangle - 2\langle\mathbf f_Z, \mathbf 1\rangle + n\log n`,
  the reduced SNEkhorn objective (thesis §4.3) up to a constant;
* its gradient with :math:`\mathbf f` detached is :math:`\nabla_{\log\mathbf K}=
  -(\mathbf P^{se} - \mathbf Q^{ds}_Z)`, the envelope-theorem gradient of the SNEkhorn objective
  (exact at Sinkhorn convergence), instead of the thesis' backpropagation through the Sinkhorn
  iterations.

So the doubly stochastic law is the E law re-weighted by the Sinkhorn edge prior: a new
:class:`~probdr.graphs.GraphPrior` (kind ``"DS"``) whose ``posterior`` runs symmetric Sinkhorn
(warm-started from the previous call) and hands the potentials to the E law. The input graph is
the E law whose mean is :math:`\mathbf P^{se}` (SEA with the diagonal excluded, since graphs have
no self-loops; the thesis keeps the self-loop).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from ..estimators import GraphCoupling
from ..graphs import DenseWeights, GraphLaw, GraphPrior, NEdgeGraph, NEdgePrior, Weights
from .sea import SEAConvergenceWarning, symmetric_entropic, symmetric_sinkhorn

__all__ = ["DoublyStochasticGraph", "DoublyStochasticPrior", "SNEkhorn", "TSNEkhorn",
           "sea_input_graph"]


class DoublyStochasticGraph(NEdgeGraph):
    r"""DS law: the E law (n edges) whose weights :math:`\pi\odot K` are Sinkhorn-scaled,
    :math:`\log w_{ij} = f_i + f_j + \log K_{ij}`, so the mean graph :math:`\mathbf Q^{ds}` is
    doubly stochastic. Built by :meth:`DoublyStochasticPrior.posterior`; ``potentials`` holds
    :math:`\mathbf f` and ``marginal_error`` the Sinkhorn residual
    :math:`\|\mathbf Q\mathbf 1 - \mathbf 1\|_\infty`."""

    prior = "DS"

    def __init__(self, weights: Weights, potentials: torch.Tensor | None = None,
                 marginal_error: float = float("nan"), validate_args=None):
        super().__init__(weights, validate_args=validate_args)
        self.potentials = potentials
        self.marginal_error = marginal_error

    def attraction(self, value) -> torch.Tensor:
        r""":math:`\sum_{i\ne j} W_{ij}\log w_{ij}`; a dense ``value`` is contracted with the
        dense log-weights (faster than gathering all n^2 pairs), sparse values as the E law."""
        if isinstance(value, torch.Tensor) and not value.is_sparse and value.ndim == 2:
            L = self.weights.dense()
            V = value.to(L.dtype)
            return torch.where(V > 0, V * L, torch.zeros_like(L)).sum()
        return super().attraction(value)


class DoublyStochasticPrior(GraphPrior):
    r"""Graph prior of SNEkhorn's latent graph (kind ``"DS"``).

    ``posterior(K)`` solves the symmetric Sinkhorn problem on :math:`\pi_0\odot K` (``edge_prior``
    :math:`\pi_0`, default all ones; diagonal excluded) in float64 without gradient, warm-started
    from the potentials of the previous call when the size matches, and returns the
    :class:`DoublyStochasticGraph` with edge prior :math:`\pi_0\odot e^{\mathbf f\oplus\mathbf f}`.

    Parameters
    ----------
    edge_prior : None or array (n, n)
    tol : float
        Sinkhorn tolerance on :math:`\|\mathbf Q\mathbf 1 - \mathbf 1\|_\infty`.
    max_iter : int
        Sinkhorn iteration cap per call (warm starts usually need a handful).
    """

    kind = "DS"
    law = DoublyStochasticGraph

    def __init__(self, edge_prior=None, tol: float = 1e-5, max_iter: int = 1000):
        super().__init__(edge_prior)
        if not tol > 0:
            raise ValueError(f"tol must be positive, got {tol}.")
        self.tol = float(tol)
        self.max_iter = int(max_iter)
        self._f: torch.Tensor | None = None
        self.n_sinkhorn_iter_: list[int] = []

    def reset(self) -> None:
        """Forget the warm start."""
        self._f = None
        self.n_sinkhorn_iter_ = []

    def posterior(self, K: Weights) -> GraphLaw:
        lp0 = self.log_edge_prior()
        K0 = K.with_log_prior(lp0) if lp0 is not None else K
        with torch.no_grad():
            L = K0.dense().detach().to(torch.float64)
            n = L.shape[0]
            f0 = self._f if (self._f is not None and self._f.shape[0] == n) else None
            _, f, n_it, err = symmetric_sinkhorn(L, f0, tol=self.tol, max_iter=self.max_iter,
                                                 domain="auto")
        if not err < self.tol:
            warnings.warn(f"DS latent law: Sinkhorn stopped at marginal error {err:.2e} > tol="
                          f"{self.tol} after {n_it} iterations (embedding scale too large for "
                          "the kernel? lower the learning rate)", SEAConvergenceWarning,
                          stacklevel=2)
        self._f = f
        self.n_sinkhorn_iter_.append(n_it)
        log_pi = f[:, None] + f[None, :]
        if lp0 is not None:
            lp0d = lp0.to_dense() if (isinstance(lp0, torch.Tensor) and lp0.is_sparse) else lp0
            log_pi = log_pi + torch.as_tensor(lp0d, dtype=torch.float64)
        return self.law(K.with_log_prior(log_pi), potentials=f, marginal_error=err)


def sea_input_graph(X: torch.Tensor, perplexity: float, tol: float = 1e-5) -> NEdgeGraph:
    r"""Input graph law of SNEkhorn: the E law with weights :math:`\mathbf P^{se}` (SEA, diagonal
    excluded), whose mean is :math:`n\mathbf P^{se}/\sum\mathbf P^{se} = \mathbf P^{se}`."""
    log_P = symmetric_entropic(X, perplexity, exclude_self=True, tol=tol, return_log=True)
    return NEdgePrior().posterior(DenseWeights(log_P))


class SNEkhorn(GraphCoupling):
    r"""SNEkhorn: couple the symmetric entropic affinity of the data with a doubly stochastic
    Gaussian latent affinity (graph coupling (E with SEA weights, DS)).

    Objective (thesis §4.3, reduced form):
    :math:`\min_Z \langle\mathbf P^{se}, \mathbf C_Z\rangle - 2\langle\mathbf f_Z,\mathbf 1\rangle`,
    :math:`\mathbf C_Z = -\log\mathbf K_Z`; see the module docstring for the graph reading.
    Optimised by the package's MAP driver. Defaults: Adam (as the thesis), learning rate 0.5
    decaying linearly to 0, no early exaggeration. With the Gaussian kernel the doubly stochastic
    normalisation gives every point a unit repulsive mass whatever its distance, so the force on
    an isolated point grows linearly with the distance: t-SNE's large gains steps make the
    embedding (and the Sinkhorn iteration count, which grows with the squared embedding scale)
    blow up. :class:`TSNEkhorn` (bounded Student forces) uses t-SNE's schedule. The envelope
    gradient replaces backpropagation through Sinkhorn.

    Parameters
    ----------
    perplexity : float
        Perplexity :math:`\xi` of SEA, in :math:`(1, n-2]`.
    n_components : int
    kernel_z : {"gaussian", "student"}
        Latent kernel (``"student"`` gives t-SNEkhorn).
    sea_tol : float
        Tolerance of SEA's dual-ascent stopping rule.
    sinkhorn_tol, sinkhorn_max_iter : float, int
        Latent symmetric Sinkhorn (warm-started at every step).
    n_iter, early_exaggeration, early_exaggeration_iter, learning_rate, momentum,
    early_momentum, optimizer, init, dtype, random_state, verbose :
        As in :class:`probdr.GraphCoupling` (``optimizer`` in {"adam", "gains", "sgd"}).

    Attributes
    ----------
    embedding_ : ndarray (n, q)
    input_graph_ : NEdgeGraph
        Its ``mean`` is :math:`\mathbf P^{se}` (dense, diagonal 0).
    latent_prior_ : DoublyStochasticPrior
        Holds the last Sinkhorn potentials and per-step iteration counts.
    loss_history_ : ndarray

    References
    ----------
    H. Van Assel, T. Vayer, R. Flamary, N. Courty, *SNEkhorn: Dimension Reduction with
    Symmetric Entropic Affinities*, NeurIPS 2023; H. Van Assel, PhD thesis (2024), ch. 4.
    """

    def __init__(self, perplexity: float = 30.0, n_components: int = 2, *,
                 kernel_z: str = "gaussian", sea_tol: float = 1e-5, sinkhorn_tol: float = 1e-5,
                 sinkhorn_max_iter: int = 1000, n_iter: int = 750,
                 early_exaggeration: float = 1.0, early_exaggeration_iter: int = 0,
                 learning_rate=0.5, momentum: float = 0.8, early_momentum: float = 0.5,
                 optimizer: str = "adam", init="pca", dtype: str = "float32",
                 random_state: int | None = None, verbose: bool = False):
        self.sea_tol = sea_tol
        self.sinkhorn_tol = sinkhorn_tol
        self.sinkhorn_max_iter = sinkhorn_max_iter
        super().__init__(
            "E", DoublyStochasticPrior(tol=sinkhorn_tol, max_iter=sinkhorn_max_iter), kernel_z,
            perplexity, n_components, affinity="sea", repulsion="exact", init=init, n_iter=n_iter,
            early_exaggeration=early_exaggeration,
            early_exaggeration_iter=early_exaggeration_iter, learning_rate=learning_rate,
            momentum=momentum, early_momentum=early_momentum, optimizer=optimizer,
            neighbors="exact", dtype=dtype, random_state=random_state, verbose=verbose)

    # the parent validates "entropic" affinities; SEA has the same perplexity constraints plus
    # the self-loop exclusion (perplexity <= n - 2)
    def _check_params(self, n: int, p: int) -> None:
        if self.kernel_z not in ("gaussian", "student"):
            raise ValueError(f"kernel_z must be 'gaussian' or 'student', got {self.kernel_z!r}.")
        if not (isinstance(self.perplexity, (int, float, np.integer, np.floating))
                and 1 < self.perplexity <= n - 2):
            raise ValueError(f"perplexity must lie in (1, n - 2] = (1, {n - 2}] for SEA without "
                             f"self-loops (n={n}), got {self.perplexity!r}.")
        if not (self.sinkhorn_tol > 0 and self.sea_tol > 0):
            raise ValueError("sinkhorn_tol and sea_tol must be positive.")
        if not (isinstance(self.sinkhorn_max_iter, (int, np.integer))
                and self.sinkhorn_max_iter >= 1):
            raise ValueError(f"sinkhorn_max_iter must be a positive integer, got "
                             f"{self.sinkhorn_max_iter!r}.")
        self.affinity = "entropic"  # reuse the parent's checks of the shared parameters
        try:
            GraphCoupling._check_params(self, n, p)
        finally:
            self.affinity = "sea"

    def _latent_prior(self) -> GraphPrior:
        prior = getattr(self, "latent_prior_", None)
        if prior is None:
            prior = self.latent_prior_ = DoublyStochasticPrior(
                tol=self.sinkhorn_tol, max_iter=self.sinkhorn_max_iter)
        return prior

    def _build_input_graph(self, X: torch.Tensor) -> GraphLaw:
        return sea_input_graph(X, self.perplexity, tol=self.sea_tol)

    def _fit(self, X: torch.Tensor) -> torch.Tensor:
        self.latent_prior_ = DoublyStochasticPrior(tol=self.sinkhorn_tol,
                                                   max_iter=self.sinkhorn_max_iter)
        self.prior_z = self.latent_prior_
        return super()._fit(X)


class TSNEkhorn(SNEkhorn):
    r"""t-SNEkhorn: SNEkhorn with the Student latent kernel :math:`(1+\|z_i-z_j\|^2)^{-1}`
    (cost :math:`\log(1+d^2)`, thesis §4.3), fitted with t-SNE's schedule (gains + momentum,
    openTSNE's learning rate, 750 steps) except an early exaggeration of 4 instead of 12 for the
    first 250 steps. (On 1000 digits, seed 0: exaggeration 4 gave silhouette 0.568 against 0.550
    with 12; :class:`probdr.TSNE` gave 0.564.)"""

    def __init__(self, perplexity: float = 30.0, n_components: int = 2, *,
                 sea_tol: float = 1e-5, sinkhorn_tol: float = 1e-5,
                 sinkhorn_max_iter: int = 1000, n_iter: int = 750,
                 early_exaggeration: float = 4.0, early_exaggeration_iter: int = 250,
                 learning_rate="auto", momentum: float = 0.8, early_momentum: float = 0.5,
                 optimizer: str = "gains", init="pca", dtype: str = "float32",
                 random_state: int | None = None, verbose: bool = False):
        super().__init__(
            perplexity, n_components, kernel_z="student", sea_tol=sea_tol,
            sinkhorn_tol=sinkhorn_tol, sinkhorn_max_iter=sinkhorn_max_iter, n_iter=n_iter,
            early_exaggeration=early_exaggeration,
            early_exaggeration_iter=early_exaggeration_iter, learning_rate=learning_rate,
            momentum=momentum, early_momentum=early_momentum, optimizer=optimizer, init=init,
            dtype=dtype, random_state=random_state, verbose=verbose)
