r"""Entropic, symmetric entropic (SEA) and doubly stochastic (Sinkhorn) affinities.

Van Assel (2024, PhD thesis, ch. 4; Van Assel et al., *SNEkhorn*, NeurIPS 2023). Throughout,
:math:`\mathbf C` is a cost matrix (squared Euclidean distances by default) and the entropy has
the thesis' "+1" convention, :math:`H(\mathbf p) = -\sum_j p_j(\log p_j - 1)`, so that a
stochastic row with perplexity :math:`\xi` has :math:`H = \log\xi + 1`.

* **Entropic affinity (EA)**: :math:`P^e_{ij} = \exp(-C_{ij}/\varepsilon_i) /
  \sum_\ell \exp(-C_{i\ell}/\varepsilon_i)` with :math:`\varepsilon_i` set by root finding so that
  :math:`H(P^e_{i:}) = \log\xi + 1` (:func:`entropic_affinity_matrix`). Row-stochastic, not
  symmetric.
* **Symmetric entropic affinity (SEA)**: the unique solution of

  .. math::
      \min_{\mathbf P \in \mathbb R_+^{n\times n}} \langle \mathbf P, \mathbf C\rangle
      \ \text{s.t.}\ \mathbf P\mathbf 1 = \mathbf 1,\ \mathbf P = \mathbf P^\top,\
      H(\mathbf P_{i:}) \ge \log\xi + 1\ \forall i,

  written :math:`P^{se}_{ij} = \exp\big((\lambda_i + \lambda_j - 2C_{ij})/(\gamma_i+\gamma_j)\big)`
  at the optimal duals (thesis eq. (4.2), with the division of its KKT derivation). The duals
  maximise the concave dual function, which has the closed form [derived from the Lagrangian
  at :math:`\mathbf P(\boldsymbol\gamma, \boldsymbol\lambda)`, using symmetry]

  .. math::
      q(\boldsymbol\gamma, \boldsymbol\lambda) = (\log\xi + 1)\sum_i\gamma_i + \sum_i\lambda_i
      - \sum_i \gamma_i \sum_j P_{ij}(\boldsymbol\gamma, \boldsymbol\lambda),
      \qquad
      \nabla_{\gamma_i} q = \log\xi + 1 - H(\mathbf P_{i:}),\quad
      \nabla_{\lambda_i} q = 1 - \textstyle\sum_j P_{ij},

  and (Dual-SEA) is solved by dual ascent (L-BFGS-B with :math:`\gamma \ge \gamma_{\min}`, or
  Adam with :math:`\gamma = g^2` as in the thesis) until **both** constraint violations are
  below ``tol`` in sup norm (:func:`symmetric_entropic`). Symmetric, doubly stochastic and
  entropy-calibrated (thesis Table 4.1).
* **Doubly stochastic (Sinkhorn) affinity**: :math:`P^{ds} = \exp((\mathbf f \oplus \mathbf f -
  \mathbf C)/\nu)` with :math:`\mathbf f` the fixed point of the averaged symmetric Sinkhorn
  update :math:`f_i \leftarrow \frac12\big(f_i - \nu\,\mathrm{LSE}_k((f_k - C_{ki})/\nu)\big)`
  (:func:`symmetric_sinkhorn`, :func:`sinkhorn_affinity`).

Everything is computed in the log domain in float64. ``exclude_self=False`` (the thesis'
convention) keeps the diagonal: each point gives part of its unit mass to itself. With
``exclude_self=True`` the diagonal is forced to zero, which is what graph laws without
self-loops (the SNEkhorn coupling) need.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch

from .._utils import as_output
from ..optim import Adam
from .entropic import (
    SEA_BLOCK,
    SEAConvergenceWarning,
    check_perplexity,
    ea_log,
    input_cost,
    row_entropy,
)

__all__ = ["symmetric_entropic"]

NEG_INF = float("-inf")
#: log-affinities are clamped here during dual ascent (trial points far from the optimum only)
_MAX_LOG = 100.0
#: lower bound of the entropy duals gamma (costs scaled to median 1)
_GAMMA_MIN = 1e-10
#: Newton iterations without a 1% fall of the constraint violation after which the ascent stops
STALL_ITER = 50
_STALLED = (f"the Newton ascent stalled (no 1% fall of the constraint violation in {STALL_ITER} "
            "iterations; the duals of the smallest violation are kept)")
#: optimizer="auto" runs Newton up to this n (its 2n x 2n Cholesky is cheap there), L-BFGS-B
#: with a Newton polish beyond
_NEWTON_AUTO_MAX_N = 500


class _Converged(Exception):
    pass


def _sea_logP(gamma, lam, Cs2, exclude_self, rows: slice = slice(None)):
    """log P(gamma, lambda) = (lambda_i + lambda_j - 2 C_ij) / (gamma_i + gamma_j) for the rows
    ``rows``, computed in place (``Cs2`` holds 2C); the excluded diagonal is left finite here
    and masked by callers."""
    lp = lam[rows, None] + lam[None, :]
    lp.sub_(Cs2[rows])
    lp.div_(gamma[rows, None] + gamma[None, :])
    lp.clamp_(max=_MAX_LOG)
    return lp


def _sea_eval(gamma, lam, Cs2, target, exclude_self, need_lp: bool = True):
    r"""Dual value q, its gradient, and the log-affinity at (gamma, lambda) (``None`` unless
    ``need_lp``: then the row sums are computed block by block, without the n x n matrix).

    Entropies use :math:`H_i = r_i - \sum_j P_{ij}\log P_{ij}` with :math:`r_i` the row sums."""
    if need_lp:
        lp = _sea_logP(gamma, lam, Cs2, exclude_self)
        P = torch.exp(lp)
        if exclude_self:
            P.fill_diagonal_(0.0)
            lp.fill_diagonal_(0.0)
        r = P.sum(1)
        H = r - (P.mul_(lp)).sum(1)
        if exclude_self:
            lp.fill_diagonal_(NEG_INF)
    else:
        lp = None
        n = gamma.shape[0]
        r = torch.empty(n, dtype=gamma.dtype)
        plogp = torch.empty(n, dtype=gamma.dtype)
        for a in range(0, n, SEA_BLOCK):
            b = min(a + SEA_BLOCK, n)
            blk = _sea_logP(gamma, lam, Cs2, exclude_self, slice(a, b))
            P = torch.exp(blk)
            if exclude_self:
                P[:, a:b].diagonal().zero_()
            r[a:b] = P.sum(1)
            plogp[a:b] = P.mul_(blk).sum(1)
        H = r - plogp
    q = target * gamma.sum() + lam.sum() - (gamma * r).sum()
    return q, target - H, 1.0 - r, lp


def _sea_hessian(gamma, lam, Cs2, exclude_self):
    r"""Hessian of the dual q in (gamma, lambda) (negative semi-definite).

    With :math:`b_{ij} = \gamma_i + \gamma_j`, :math:`\ell_{ij} = \log P_{ij}` and
    :math:`W^{(m)} = P\odot\ell^{m}/b`, :math:`D^{(m)} = \mathrm{diag}(W^{(m)}\mathbf 1)`:
    :math:`\partial^2_{\gamma\gamma} q = -(D^{(2)} + W^{(2)})`,
    :math:`\partial^2_{\gamma\lambda} q = D^{(1)} + W^{(1)}`,
    :math:`\partial^2_{\lambda\lambda} q = -(D^{(0)} + W^{(0)})`."""
    lp = _sea_logP(gamma, lam, Cs2, exclude_self)
    P = torch.exp(lp)
    if exclude_self:
        P.fill_diagonal_(0.0)
        lp.fill_diagonal_(0.0)
    W0 = P / (gamma[:, None] + gamma[None, :])
    W1 = W0 * lp
    W2 = W1 * lp
    Hgg = -(torch.diag(W2.sum(1)) + W2)
    Hgl = torch.diag(W1.sum(1)) + W1
    Hll = -(torch.diag(W0.sum(1)) + W0)
    return torch.cat([torch.cat([Hgg, Hgl], 1), torch.cat([Hgl.T, Hll], 1)], 0)


def _sea_newton(gamma, lam, Cs2, target, exclude_self, tol, max_iter, violations):
    """Damped, projected Newton ascent on the dual (gamma >= _GAMMA_MIN). The step is accepted
    when it increases q or decreases the projected gradient norm (near the optimum q changes
    below float64 resolution, the gradient does not).

    Returns ``(gamma, lambda, converged, iterations, stalled)``. The ascent stops early, stalled,
    when ``STALL_ITER`` iterations in a row bring the constraint violation no 1% below its best
    (each iteration costs a Hessian, a solve and up to 34 line-search evaluations, so a stalled
    ascent would otherwise run minutes to ``max_iter``); short of convergence, the duals returned
    are those of the smallest violation seen."""
    n = gamma.shape[0]
    converged = stalled = False
    best, best_at, since = math.inf, (gamma, lam), 0
    it = 0
    for it in range(1, int(max_iter) + 1):  # noqa: B007 (it is returned)
        q, gg, gl, _ = _sea_eval(gamma, lam, Cs2, target, exclude_self, need_lp=False)
        ev, mv = violations(gamma, gg, gl)
        if ev < tol and mv < tol:
            converged = True
            break
        since = 0 if max(ev, mv) < 0.99 * best else since + 1
        if max(ev, mv) < best:
            best, best_at = max(ev, mv), (gamma, lam)
        if since >= STALL_ITER:
            stalled = True
            break
        active = (gamma <= _GAMMA_MIN * 2.0) & (gg < 0)
        free = torch.cat([~active, torch.ones(n, dtype=torch.bool)])
        H = _sea_hessian(gamma, lam, Cs2, exclude_self)
        G = torch.cat([gg, gl])
        A = -H[free][:, free]
        A.diagonal().add_(1e-12 * float(A.diagonal().abs().max()))
        # A = -H is positive semi-definite (concave dual), plus the ridge: Cholesky (half the
        # work of LU); LU if it fails numerically
        Lc, info = torch.linalg.cholesky_ex(A)
        if int(info) == 0:
            step_f = torch.cholesky_solve(G[free][:, None], Lc).squeeze(1)
        else:
            try:
                step_f = torch.linalg.solve(A, G[free])
            except RuntimeError:  # singular: fall back to a gradient step
                step_f = G[free]
        step = torch.zeros(2 * n, dtype=torch.float64)
        step[free] = step_f
        gnorm = max(ev, mv)
        t = 1.0
        accepted = False
        while t > 1e-10:
            g_new = (gamma + t * step[:n]).clamp_min(_GAMMA_MIN)
            l_new = lam + t * step[n:]
            q2, gg2, gl2, _ = _sea_eval(g_new, l_new, Cs2, target, exclude_self, need_lp=False)
            if torch.isfinite(q2):
                ev2, mv2 = violations(g_new, gg2, gl2)
                if q2 > q + 1e-4 * t * float(G @ step) or max(ev2, mv2) < gnorm:
                    accepted = True
                    break
            t *= 0.5
        if not accepted:
            break
        gamma, lam = g_new, l_new
    if not converged:
        gamma, lam = best_at
    return gamma, lam, converged, it, stalled


def symmetric_entropic(
    X: Any,
    perplexity: float = 30.0,
    *,
    precomputed: bool = False,
    exclude_self: bool = False,
    tol: float = 1e-5,
    max_iter: int = 3000,
    optimizer: str = "auto",
    lr: float = 0.1,
    init: str = "ea",
    newton_max_n: int = 3000,
    return_log: bool = False,
    return_info: bool = False,
    verbose: bool = False,
) -> Any:
    r"""Symmetric entropic affinity :math:`\mathbf P^{se}` (SEA) by dual ascent.

    Solves (SEA) through its concave dual (Dual-SEA); see the module docstring for the
    closed-form dual value and gradients. The dual ascent stops when

    .. math::
        \max_i |H(\mathbf P_{i:}) - (\log\xi + 1)| < \mathrm{tol}
        \quad\text{and}\quad \max_i |\textstyle\sum_j P_{ij} - 1| < \mathrm{tol},

    the stopping rule of the thesis' dual-ascent pseudo-code; :math:`\mathbf P` is symmetric by
    construction. The entropy constraint is an inequality: a row whose dual :math:`\gamma_i`
    sits at its lower bound while :math:`H(\mathbf P_{i:}) > \log\xi + 1` satisfies
    complementary slackness and counts as converged (the entropy term of the rule is the sup
    norm of the *projected* dual gradient). Prop. 4.2 of the thesis allows at most one such
    row; ``info["n_unsaturated"]`` reports how many there are. Costs are rescaled by their median off-diagonal value before the ascent (the
    affinity is scale-free; the duals are reported in the original units).

    Parameters
    ----------
    X : array (n, p), or (n, n) cost if ``precomputed``
        Data (squared Euclidean costs are used) or a cost in :math:`\mathcal D` (symmetric,
        zero diagonal, positive off the diagonal: duplicated points break uniqueness).
    perplexity : float
        :math:`\xi \in (1, n-1]` (:math:`(1, n-2]` with ``exclude_self``).
    precomputed : bool
    exclude_self : bool
        Force :math:`P_{ii} = 0` (graph laws have no self-loops). The thesis keeps the diagonal.
    tol : float
        Tolerance of the stopping rule (sup norm of both constraint violations).
    max_iter : int
        Maximum number of dual-ascent iterations.
    optimizer : {"auto", "lbfgs", "newton", "adam"}
        ``"auto"``: ``"newton"`` up to n = 500, ``"lbfgs"`` beyond (the damped Newton ascent
        takes over a hundred short steps when many entropy duals approach their bound, which
        L-BFGS-B's projected search handles better; timings in ``docs/ot-results.md``). ``"lbfgs"``: L-BFGS-B on
        the concave dual with :math:`\gamma \ge 10^{-10}`, polished by Newton steps if it
        stalls before ``tol`` (the dual value then changes below float64 resolution) and
        n <= ``newton_max_n``. ``"newton"``: damped
        projected Newton ascent with the exact Hessian (:math:`O(n^3)` per step; quadratic
        convergence, best for small n or badly conditioned data). ``"adam"``: Adam ascent with
        :math:`\gamma = g^2` and learning rate ``lr`` (the thesis' choice; slower).
    lr : float
        Adam learning rate (on costs scaled to median 1).
    newton_max_n : int
        Largest n for the Newton polish of ``"lbfgs"`` (a 2n x 2n linear solve per step).
    init : {"ea", "ones"}
        ``"ea"``: :math:`\gamma_i = \varepsilon_i`, :math:`\lambda_i = -\varepsilon_i\log Z_i`
        from the entropic affinity (which the solution is close to); ``"ones"``:
        :math:`\gamma = 1`, :math:`\lambda = 0`.
    return_log : bool
        Return :math:`\log\mathbf P^{se}` (``-inf`` on an excluded diagonal).
    return_info : bool
        Also return a dict with ``gamma``, ``lambda`` (duals, original cost units), ``n_iter``,
        ``converged``, ``entropy_violation``, ``marginal_violation`` and ``perplexity``
        (per point, :math:`e^{H-1}`).

    Returns
    -------
    P : (n, n) array, symmetric and doubly stochastic (numpy in, numpy out; torch in, torch out)
    info : dict, only if ``return_info``

    Raises
    ------
    ValueError
        Invalid input (NaN, not 2-D, empty), or perplexity out of range.
    FloatingPointError
        The ascent produced non-finite values.

    References
    ----------
    H. Van Assel, *A Contribution to Dimensionality Reduction with Probabilistic Modelling and
    Optimal Transport*, PhD thesis, ENS Lyon (2024), §4.2.2, Prop. 4.2-4.3.
    H. Van Assel, T. Vayer, R. Flamary, N. Courty, *SNEkhorn: Dimension Reduction with Symmetric
    Entropic Affinities*, NeurIPS 2023.
    """
    C = input_cost(X, precomputed)
    n = C.shape[0]
    xi = check_perplexity(perplexity, n, exclude_self)
    optimizer = _check_options(optimizer, init, tol, max_iter, n)
    off = ~torch.eye(n, dtype=torch.bool)
    s = float(C[off].median())
    if not s > 0:
        s = float(C[off].mean())
    if not s > 0:
        warnings.warn("symmetric_entropic: all points coincide (the cost is identically zero); "
                      "the affinity is uniform.", RuntimeWarning, stacklevel=2)
        return _uniform_affinity(X, n, exclude_self, return_log, return_info)
    Cs = C / s
    target = math.log(xi) + 1.0
    gamma0, lam0 = _dual_start(Cs, xi, exclude_self, init)
    problem = (2.0 * Cs, target, exclude_self, tol)
    if optimizer == "lbfgs":
        gamma, lam, converged, n_iter, message = _ascent_lbfgs(gamma0, lam0, problem, max_iter,
                                                               newton_max_n)
    elif optimizer == "newton":
        gamma, lam, converged, n_iter, stalled = _sea_newton(gamma0, lam0, *problem, max_iter,
                                                             _violations)
        message = _STALLED if stalled else None
    else:
        gamma, lam, converged, n_iter = _ascent_adam(gamma0, lam0, problem, max_iter, lr)
        message = None
    _, gg, gl, lp = _sea_eval(gamma, lam, 2.0 * Cs, target, exclude_self)
    ev, mv = _violations(gamma, gg, gl)
    if torch.isnan(lp).any():
        raise FloatingPointError("SEA produced NaN log-affinities.")
    if not converged:
        warnings.warn(
            f"symmetric_entropic did not meet tol={tol} in {n_iter} iterations (entropy "
            f"violation {ev:.2e}, marginal violation {mv:.2e}"
            + (f"; optimizer: {message}" if message is not None else "")
            + ("); a larger tol or perplexity may help." if message == _STALLED
               else "); increase max_iter or tol."),
            SEAConvergenceWarning, stacklevel=2)
    if verbose:
        print(f"SEA: {n_iter} iterations/evaluations, entropy violation {ev:.2e}, "
              f"marginal violation {mv:.2e}, converged={converged}")
    lp = 0.5 * (lp + lp.T)  # exact symmetry (it is symmetric up to rounding)
    out = as_output(lp if return_log else torch.exp(lp), X)
    if not return_info:
        return out
    return out, {
        "gamma": gamma * s, "lambda": lam * s, "n_iter": n_iter, "converged": converged,
        "entropy_violation": ev, "marginal_violation": mv,
        "perplexity": torch.exp(row_entropy(lp) - 1.0),
        "n_unsaturated": int((gg.abs() > tol).sum()), "cost_scale": s,
        "message": message if message is not None else (
            "converged" if converged else "max_iter reached"),
    }


def _check_options(optimizer: str, init: str, tol: float, max_iter, n: int) -> str:
    """Validate the solver's options; returns the optimizer (``"auto"`` resolved)."""
    if optimizer not in ("auto", "lbfgs", "newton", "adam"):
        raise ValueError(f"optimizer must be 'auto', 'lbfgs', 'newton' or 'adam', got "
                         f"{optimizer!r}.")
    if init not in ("ea", "ones"):
        raise ValueError(f"init must be 'ea' or 'ones', got {init!r}.")
    if not (tol > 0):
        raise ValueError(f"tol must be positive, got {tol}.")
    if not (isinstance(max_iter, (int, np.integer)) and max_iter >= 1):
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}.")
    if optimizer == "auto":
        return "newton" if n <= _NEWTON_AUTO_MAX_N else "lbfgs"
    return optimizer


def _uniform_affinity(X, n: int, exclude_self: bool, return_log: bool, return_info: bool):
    """All points coincide: every row's cost is constant, so the uniform affinity (maximal
    entropy, symmetric, unit row sums) solves (SEA) whatever the perplexity."""
    k = n - 1 if exclude_self else n
    lp = torch.full((n, n), -math.log(k), dtype=torch.float64)
    if exclude_self:
        lp.fill_diagonal_(float("-inf"))
    out = as_output(lp if return_log else torch.exp(lp), X)
    if not return_info:
        return out
    zeros = torch.zeros(n, dtype=torch.float64)
    return out, {"gamma": zeros, "lambda": zeros, "n_iter": 0, "converged": True,
                 "entropy_violation": 0.0, "marginal_violation": 0.0,
                 "perplexity": torch.full((n,), float(k)), "n_unsaturated": n,
                 "cost_scale": 0.0, "message": "all points coincide: uniform affinity"}


def _dual_start(Cs: torch.Tensor, xi: float, exclude_self: bool, init: str):
    """The duals' starting point ``(gamma0, lambda0)``."""
    n = Cs.shape[0]
    if init != "ea":
        return torch.ones(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    # EA: P_ij = exp(-C_ij/eps_i)/Z_i. With gamma_i = eps_i and lambda_i = -eps_i log Z_i,
    # (4.2) reproduces it exactly on the diagonal and approximately where eps_i ~ eps_j
    _, eps = ea_log(Cs, xi, exclude_self)
    Cm = Cs.clone()
    if exclude_self:
        Cm.fill_diagonal_(float("inf"))
    logZ = torch.logsumexp(-Cm / eps[:, None], 1)
    return eps.clone(), -eps * logZ


def _violations(gamma, g_gamma, g_lam) -> tuple[float, float]:
    """Sup norms of the *projected* dual gradient: a row whose gamma sits at its lower bound and
    whose entropy exceeds the target satisfies complementary slackness (Prop. 4.2 allows one
    such row)."""
    at_bound = gamma <= _GAMMA_MIN * 2.0
    pg = torch.where(at_bound & (g_gamma < 0), torch.zeros_like(g_gamma), g_gamma)
    return float(pg.abs().max()), float(g_lam.abs().max())


def _ascent_lbfgs(gamma0, lam0, problem, max_iter: int, newton_max_n: int):
    r"""L-BFGS-B on the concave dual (:math:`\gamma \ge 10^{-10}`), stopped as soon as the rule
    holds, polished by Newton if it stalls first and n <= ``newton_max_n``. Returns ``(gamma,
    lambda, converged, n_iter, message)``."""
    from scipy.optimize import minimize

    Cs2, target, exclude_self, tol = problem
    n = gamma0.shape[0]
    state: dict[str, Any] = {"n_eval": 0, "best": None}

    def fun(x):
        gamma = torch.as_tensor(x[:n])
        q, gg, gl, _ = _sea_eval(gamma, torch.as_tensor(x[n:]), Cs2, target, exclude_self,
                                 need_lp=False)
        state["n_eval"] += 1
        if not torch.isfinite(q):
            raise FloatingPointError("SEA dual ascent produced a non-finite dual value.")
        ev, mv = _violations(gamma, gg, gl)
        if ev < tol and mv < tol:
            state["best"] = x.copy()
            raise _Converged
        return -float(q), -torch.cat([gg, gl]).cpu().numpy()

    x0 = torch.cat([gamma0, lam0]).cpu().numpy()
    bounds = [(_GAMMA_MIN, None)] * n + [(None, None)] * n
    message = None
    try:
        res = minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=bounds,
                       options={"maxiter": int(max_iter), "maxfun": 2 * int(max_iter),
                                "ftol": 0.0, "gtol": 0.0, "maxcor": 20})
        x, converged, n_iter, message = res.x, False, int(res.nit), str(res.message)
    except _Converged:
        x, converged, n_iter = state["best"], True, state["n_eval"]
    gamma, lam = torch.as_tensor(x[:n]).clone(), torch.as_tensor(x[n:]).clone()
    if not converged and n <= newton_max_n:
        # L-BFGS stalls when the dual changes below float64 resolution: polish by Newton
        budget = max(min(50, int(max_iter)), int(max_iter) - n_iter)
        gamma, lam, converged, k, stalled = _sea_newton(gamma, lam, Cs2, target, exclude_self,
                                                        tol, budget, _violations)
        n_iter += k
        if stalled:
            message = _STALLED
    return gamma, lam, converged, n_iter, message


def _ascent_adam(gamma0, lam0, problem, max_iter: int, lr: float):
    r"""Adam ascent with :math:`\gamma = g^2` (the thesis' choice). Returns ``(gamma, lambda,
    converged, n_iter)``."""
    Cs2, target, exclude_self, tol = problem
    g = torch.sqrt(gamma0).clone().requires_grad_(False)
    lam = lam0.clone()
    opt = Adam([g.requires_grad_(True), lam.requires_grad_(True)], lr=lr)
    converged, n_iter = False, 0
    for it in range(int(max_iter)):
        with torch.no_grad():
            gamma = (g.detach() ** 2).clamp_min(_GAMMA_MIN)
            q, gg, gl, _ = _sea_eval(gamma, lam.detach(), Cs2, target, exclude_self,
                                     need_lp=False)
        if not torch.isfinite(q):
            raise FloatingPointError("SEA dual ascent produced a non-finite dual value.")
        n_iter = it + 1
        ev, mv = _violations(gamma, gg, gl)
        if ev < tol and mv < tol:
            converged = True
            break
        opt.zero_grad(set_to_none=True)
        g.grad = -(2.0 * g.detach() * gg)  # ascent: minimise -q; chain rule for gamma = g^2
        lam.grad = -gl
        opt.step()
    return (g.detach() ** 2).clamp_min(_GAMMA_MIN), lam.detach(), converged, n_iter

