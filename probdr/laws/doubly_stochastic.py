r"""SNEkhorn and t-SNEkhorn as graph couplings (Van Assel, Vayer, Flamary & Courty, NeurIPS 2023;
thesis ch. 4).

SNEkhorn minimises :math:`\mathrm{KL}(\mathbf P^{se}\,|\,\mathbf Q^{ds}_Z)` between the symmetric
entropic affinity of the data and a **doubly stochastic** latent affinity

.. math::
    \mathbf Q^{ds}_Z = \exp(\mathbf f_Z \oplus \mathbf f_Z + \log\mathbf K_Z),\qquad
    \mathbf Q^{ds}_Z\mathbf 1 = \mathbf 1,

with :math:`K_{Z,ij} = \exp(-\|z_i - z_j\|^2)` (SNEkhorn) or :math:`(1+\|z_i-z_j\|^2)^{-1}`
(t-SNEkhorn), :math:`\mathbf f_Z` the symmetric Sinkhorn potentials (bandwidth 1).

**Graph-coupling reading** (probdr's reading of the SNEkhorn objective, exact). Let the latent graph follow the
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
:class:`~probdr.laws.GraphPrior` (kind ``"DS"``) whose ``posterior`` runs symmetric Sinkhorn
(warm-started from the previous call) and hands the potentials to the E law. The input graph is
the E law whose mean is :math:`\mathbf P^{se}` (SEA with the diagonal excluded, since graphs have
no self-loops; the thesis keeps the self-loop).
"""


from __future__ import annotations

import warnings

import torch

from .._compute.allpairs import pairwise_sq_distances
from .._utils import tensor_cache as _cached
from ..config import check_dense
from ..ot.entropic import SEAConvergenceWarning
from ..ot.sinkhorn import sinkhorn_kernel_domain, symmetric_sinkhorn
from .graph import GraphLaw, GraphPrior, NEdgeGraph
from .weights import KernelWeights, Weights

__all__ = ["DoublyStochasticGraph", "DoublyStochasticPrior"]


def _observed(V: torch.Tensor, dtype: torch.dtype):
    """(V in ``dtype``, row sums, column sums, symmetric?) of a dense observed graph, cached."""
    def compute():
        Vd = V.to(dtype)
        return Vd, Vd.sum(1), Vd.sum(0), bool(torch.equal(Vd, Vd.T))
    return _cached(V, f"_probdr_ds_{str(dtype).split('.')[-1]}", compute)


class _DSState:
    r"""What one Sinkhorn solve leaves for the fused log-likelihood of the DS law: the kernel
    matrix ``K`` (diagonal 0), :math:`\partial\log k/\partial d^2` (``dk``; ``None`` for the
    Cauchy kernel, where it is :math:`-K`), ``sign * logK`` = :math:`\log K` (diagonal 0; the
    Cauchy kernel keeps :math:`\log(1+d^2)`, sign -1), the coupling either as scalings ``u``
    (:math:`Q = u u^\top\odot K`) or as the matrix ``Q``, its total ``S``, and the potentials."""

    __slots__ = ("K", "dk", "logK", "sign", "u", "Q", "S", "f")

    def __init__(self, K, dk, logK, sign, u, Q, S, f):
        self.K, self.dk, self.logK, self.sign = K, dk, logK, sign
        self.u, self.Q, self.S, self.f = u, Q, S, f


class _DSTerms(torch.autograd.Function):
    r"""Both Z-dependent pieces of the DS law's log-likelihood at a dense observed graph V, with
    the Sinkhorn potentials f held constant (envelope gradient):

    * attraction :math:`A = \sum_{i\ne j} V_{ij}(f_i + f_j + \log K_{ij})`,
    * log-normaliser :math:`T = \log\sum_{i\ne j} e^{f_i+f_j}K_{ij}`,

    from the matrices of one Sinkhorn solve (no second pass over the distances). Backward:
    :math:`M = (g_A V + g_T Q/S)\odot\partial\log k/\partial d^2`,
    :math:`\nabla_{z_i} = 2\sum_j (M_{ij} + M_{ji})(z_i - z_j)`."""

    @staticmethod
    def forward(ctx, Z, V, st):
        Vd, r, c, sym = _observed(V, st.logK.dtype)
        f = st.f.to(Vd.dtype)
        A = (st.sign * torch.dot(Vd.flatten(), st.logK.flatten()) + torch.dot(f, r)
             + torch.dot(f, c))
        T = torch.log(st.S)
        ctx.st, ctx.V, ctx.sym = st, Vd, sym
        ctx.save_for_backward(Z)
        return A.to(Z.dtype), T.to(Z.dtype)

    @staticmethod
    def backward(ctx, gA, gT):
        (Z,) = ctx.saved_tensors
        st, V = ctx.st, ctx.V
        dt = V.dtype
        c = float(gT) / float(st.S)
        # M = (gA V + c Q) * dlogk, built in place
        if st.dk is None:  # Cauchy: dlogk = -K, M = (-c Q - gA V) * K
            if st.Q is not None:
                M = st.Q * (-c)
            else:
                M = torch.mul(st.K, st.u[:, None]).mul_((st.u * (-c))[None, :])
            M.sub_(V, alpha=float(gA)).mul_(st.K)
        else:
            M = st.Q * c if st.Q is not None else \
                torch.mul(st.K, st.u[:, None]).mul_((st.u * c)[None, :])
            M.add_(V, alpha=float(gA)).mul_(st.dk)
        Zd = Z.detach().to(dt)
        # grad_i = 2 sum_j (M_ij + M_ji)(z_i - z_j), by matrix-vector products (faster than a
        # product with the skinny Z); V symmetric, and Q and K are (up to rounding): M = M^T
        if ctx.sym:
            rs, Ms = 2.0 * M.sum(1), [2.0 * torch.mv(M, Zd[:, k]) for k in range(Zd.shape[1])]
        else:
            Mt = M.t()
            rs = M.sum(1) + M.sum(0)
            Ms = [torch.mv(M, Zd[:, k]) + torch.mv(Mt, Zd[:, k]) for k in range(Zd.shape[1])]
        grad = 2.0 * (rs[:, None] * Zd - torch.stack(Ms, 1))
        ctx.st = ctx.V = None
        return grad.to(Z.dtype), None, None


def _sq_distances(Z: torch.Tensor) -> torch.Tensor:
    """Squared distances of the centred embedding (centring keeps the |a|^2 + |b|^2 - 2ab
    expansion accurate)."""
    return pairwise_sq_distances(Z - Z.mean(0))


class _PotentialWeights(KernelWeights):
    r"""Kernel weights with the edge prior :math:`\log\pi_{ij} = f_i + f_j` of the Sinkhorn
    potentials, the dense n x n prior built only when something asks for it (the fused
    log-likelihood does not)."""

    def __init__(self, Z, kernel, f: torch.Tensor):
        self._f_pot, self._lp = f, None
        super().__init__(Z, kernel)

    @property
    def log_pi(self):
        if self._lp is None and self._f_pot is not None:
            f = self._f_pot
            self._lp = (f[:, None] + f[None, :]).to(self.Z.dtype)
        return self._lp

    @log_pi.setter
    def log_pi(self, value):
        if value is not None:
            self._f_pot, self._lp = None, value


class DoublyStochasticGraph(NEdgeGraph):
    r"""DS law: the E law (n edges) whose weights :math:`\pi\odot K` are Sinkhorn-scaled,
    :math:`\log w_{ij} = f_i + f_j + \log K_{ij}`, so the mean graph :math:`\mathbf Q^{ds}` is
    doubly stochastic. Built by :meth:`DoublyStochasticPrior.posterior`; ``potentials`` holds
    :math:`\mathbf f` and ``marginal_error`` the Sinkhorn residual
    :math:`\|\mathbf Q\mathbf 1 - \mathbf 1\|_\infty`.

    When the posterior kept the matrices of its Sinkhorn solve (kernel weights, no edge prior),
    the log-likelihood at a dense observed graph is evaluated from them by one fused function
    with a hand-written gradient (:class:`_DSTerms`): the same value and envelope gradient as
    autograd through the dense log-weights, without recomputing the n x n distances."""

    prior = "DS"

    def __init__(self, weights: Weights, potentials: torch.Tensor | None = None,
                 marginal_error: float = float("nan"), validate_args=None,
                 state: _DSState | None = None):
        super().__init__(weights, validate_args=validate_args)
        self.potentials = potentials
        self.marginal_error = marginal_error
        self._state = state
        self._terms_memo = None

    def _fused(self, value) -> bool:
        return (self._state is not None and isinstance(value, torch.Tensor)
                and not value.is_sparse and value.ndim == 2)

    def _terms(self, value):
        memo = self._terms_memo
        if memo is not None and memo[0] is value:
            return memo[1]
        out = _DSTerms.apply(self.weights.Z, value, self._state)
        self._terms_memo = (value, out)
        return out

    def attraction(self, value) -> torch.Tensor:
        r""":math:`\sum_{i\ne j} W_{ij}\log w_{ij}`; a dense ``value`` is contracted with the
        dense log-weights (faster than gathering all n^2 pairs), sparse values as the E law."""
        if self._fused(value):
            return self._terms(value)[0]
        if isinstance(value, torch.Tensor) and not value.is_sparse and value.ndim == 2:
            L = self.weights.dense()
            V = value.to(L.dtype)
            return torch.where(V > 0, V * L, torch.zeros_like(L)).sum()
        return super().attraction(value)

    def normaliser(self, value) -> torch.Tensor:
        if self._fused(value):
            total = _cached(value, "_probdr_ds_total", value.sum)
            return total * self._terms(value)[1]
        return super().normaliser(value)

    def log_combinatorial(self, value) -> torch.Tensor:
        # constant in Z: computed once per observed dense graph, not at every step
        if isinstance(value, torch.Tensor) and not value.is_sparse:
            return _cached(value, "_probdr_ds_logcomb",
                                 lambda: super(DoublyStochasticGraph, self).log_combinatorial(value))
        return super().log_combinatorial(value)


class DoublyStochasticPrior(GraphPrior):
    r"""Graph prior of SNEkhorn's latent graph (kind ``"DS"``).

    ``posterior(K)`` solves the symmetric Sinkhorn problem on :math:`\pi_0\odot K` (``edge_prior``
    :math:`\pi_0`, default all ones; diagonal excluded) without gradient, warm-started from the
    potentials of the previous call when the size matches, and returns the
    :class:`DoublyStochasticGraph` with edge prior :math:`\pi_0\odot e^{\mathbf f\oplus\mathbf f}`.

    Kernel weights without edge prior (the presets) take a fused path: the distances are
    computed once per call, Sinkhorn runs on the kernel matrix itself for heavy-tailed kernels
    (t-SNEkhorn's :math:`1/(1+d^2)` lies in (0, 1]: matrix-vector products in the embedding's
    dtype, relaxed update :math:`\omega` = ``omega`` = 0.7, float64 log-domain fallback if the
    scalings over/underflow) and in float64 otherwise (Gaussian), and the law evaluates its
    log-likelihood and envelope gradient from the same matrices. Other weights: float64 Sinkhorn
    on the dense log-weights, autograd through them.

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
        #: relaxation of the kernel-domain Sinkhorn update (see ``sinkhorn_kernel_domain``)
        self.omega = 0.7
        self.n_sinkhorn_iter_: list[int] = []

    def reset(self) -> None:
        """Forget the warm start."""
        self._f = None
        self.n_sinkhorn_iter_ = []

    def posterior(self, K: Weights) -> GraphLaw:
        lp0 = self.log_edge_prior()
        if lp0 is None and isinstance(K, KernelWeights) and K.log_pi is None \
                and K.normaliser == "exact":
            return self._posterior_fused(K)
        K0 = K.with_log_prior(lp0) if lp0 is not None else K
        with torch.no_grad():
            L = K0.dense().detach().to(torch.float64)
            n = L.shape[0]
            f0 = self._f if (self._f is not None and self._f.shape[0] == n) else None
            _, f, n_it, err = symmetric_sinkhorn(L, f0, tol=self.tol, max_iter=self.max_iter,
                                                 domain="auto")
        self._record(f, n_it, err)
        log_pi = f[:, None] + f[None, :]
        if lp0 is not None:
            lp0d = lp0.to_dense() if (isinstance(lp0, torch.Tensor) and lp0.is_sparse) else lp0
            log_pi = log_pi + torch.as_tensor(lp0d, dtype=torch.float64)
        return self.law(K.with_log_prior(log_pi), potentials=f, marginal_error=err)

    def _record(self, f, n_it, err):
        if not err < self.tol:
            warnings.warn(f"DS latent law: Sinkhorn stopped at marginal error {err:.2e} > tol="
                          f"{self.tol} after {n_it} iterations (embedding scale too large for "
                          "the kernel? lower the learning rate)", SEAConvergenceWarning,
                          stacklevel=3)
        self._f = f
        self.n_sinkhorn_iter_.append(n_it)

    def _posterior_fused(self, K: KernelWeights) -> GraphLaw:
        r"""Kernel weights without edge prior: one pass over the distances gives the kernel
        matrix, Sinkhorn runs on it, and the law keeps the matrices for its fused
        log-likelihood. Heavy-tailed kernels (t-SNEkhorn's Student kernel lies in (0, 1]) run
        Sinkhorn in the kernel domain in the embedding's dtype (matrix-vector products), with a
        float64 log-domain fallback if the scalings leave the floating-point range; other
        kernels (Gaussian) in float64 as :func:`~probdr.ot.sea.symmetric_sinkhorn` ``"auto"``."""
        kern, Z = K.kernel, K.Z
        n = K.n
        check_dense(n, "the dense latent kernel matrix of the DS law",
                    "SNEkhorn's doubly stochastic latent law needs all pairs.", copies=3)
        f0 = self._f if (self._f is not None and self._f.shape[0] == n) else None
        with torch.no_grad():
            D2 = _sq_distances(Z.detach())
            dt = D2.dtype
            diag = torch.arange(n)
            res = None
            if kern.is_cauchy:  # log K = -log(1 + d2) (log1p is cheaper than log), K = 1/(1 + d2)
                logK, sign, dk = torch.log1p(D2), -1.0, None
                Km = D2.add_(1.0).reciprocal_()
            else:
                logK, sign = kern.log_k(D2), 1.0
                if kern.heavy_tailed:
                    Km, dk = kern.k_and_dlog_k(D2)
                    Km[diag, diag] = 0.0
                else:
                    Km, dk = None, kern.dlog_k(D2)
                dk[diag, diag] = 0.0
            logK[diag, diag] = 0.0
            if Km is not None:
                Km[diag, diag] = 0.0
                u0 = torch.ones(n, dtype=dt) if f0 is None else torch.exp(f0).to(dt)
                res = sinkhorn_kernel_domain(Km, u0, tol=self.tol, max_iter=self.max_iter,
                                             omega=self.omega)
            if res is not None:
                u, s, n_it, err = res
                f = torch.log(u.to(torch.float64))
                st = _DSState(Km, dk, logK, sign, u, None, torch.dot(u, s), f)
            else:  # float64 log domain (kernel domain inside when no entry underflows)
                L = (sign * logK).to(torch.float64)
                L[diag, diag] = float("-inf")
                _, f, n_it, err = symmetric_sinkhorn(
                    L, f0, tol=self.tol, max_iter=self.max_iter,
                    domain="auto" if Km is None else "log")
                Q = torch.exp(L.add_(f[:, None]).add_(f[None, :])).to(dt)
                if dk is None:
                    dk = -Km
                st = _DSState(None, dk, logK, sign, None, Q, Q.sum(), f)
        self._record(f, n_it, err)
        return self.law(_PotentialWeights(Z, kern, f), potentials=f, marginal_error=err,
                        state=st)


