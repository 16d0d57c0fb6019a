r"""Doubly stochastic (Sinkhorn) affinities (Van Assel 2024, PhD thesis, ch. 4; Van Assel et al.,
*SNEkhorn*, NeurIPS 2023): :math:`P^{ds} = \exp((\mathbf f \oplus \mathbf f - \mathbf C)/\nu)` with
:math:`\mathbf f` the fixed point of the averaged symmetric Sinkhorn update
:math:`f_i \leftarrow \frac12\big(f_i - \nu\,\mathrm{LSE}_k((f_k - C_{ki})/\nu)\big)`, computed in the
log domain (or the kernel domain) in float64.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from .._utils import as_output
from .entropic import SEAConvergenceWarning, check_perplexity, input_cost, row_entropy

__all__ = ["symmetric_sinkhorn", "sinkhorn_kernel_domain", "sinkhorn_affinity"]

NEG_INF = float("-inf")


def symmetric_sinkhorn(
    log_K: torch.Tensor,
    f0: torch.Tensor | None = None,
    *,
    tol: float = 1e-6,
    max_iter: int = 1000,
    domain: str = "log",
) -> tuple[torch.Tensor, torch.Tensor, int, float]:
    r"""Symmetric Sinkhorn scaling of a symmetric kernel.

    Finds :math:`\mathbf g` with :math:`\sum_j \exp(g_i + g_j + \log K_{ij}) = 1` for all i by
    the averaged (well-conditioned) symmetric update

    .. math:: g_i \leftarrow \tfrac12\Big(g_i - \mathrm{LSE}_k(g_k + \log K_{ki})\Big),

    stopping when :math:`\|\mathbf Q\mathbf 1 - \mathbf 1\|_\infty < \mathrm{tol}`. With
    :math:`\log\mathbf K = -\mathbf C/\nu` this is thesis eq. (Sinkhorn) with
    :math:`\mathbf f = \nu\mathbf g`.

    Parameters
    ----------
    log_K : (n, n) tensor
        Symmetric log-kernel; ``-inf`` entries (e.g. an excluded diagonal) stay zero. Gradients
        flow through the iterations if ``log_K`` requires grad (unrolled differentiation).
    f0 : (n,) tensor, optional
        Warm start (detach it yourself if it comes from a previous graph).
    tol, max_iter : float, int
    domain : {"log", "auto"}
        ``"log"``: every iteration is a log-sum-exp (always stable). ``"auto"``: iterate on the
        scalings :math:`u = e^{g + c/2}` with the kernel :math:`e^{\log K - c}`, :math:`c =
        \max\log K`, one matrix-vector product per iteration (several times faster), when no
        row of that kernel underflows; otherwise fall back to the log domain.

    Returns
    -------
    log_Q : (n, n) tensor, :math:`g_i + g_j + \log K_{ij}`
    g : (n,) tensor
    n_iter : int
    err : float, final :math:`\|\mathbf Q\mathbf 1 - \mathbf 1\|_\infty`
    """
    n = log_K.shape[0]
    g = torch.zeros(n, dtype=log_K.dtype) if f0 is None else f0.to(log_K.dtype)
    err = float("inf")
    it = 0
    if domain not in ("log", "auto"):
        raise ValueError(f"domain must be 'log' or 'auto', got {domain!r}.")
    if domain == "auto":
        c = log_K.max()
        K = torch.exp(log_K - c)
        rowmax = K.max(1).values
        if bool(torch.isfinite(c)) and bool((rowmax > 1e-150).all()):
            u0 = torch.exp(g + 0.5 * c)
            res = (sinkhorn_kernel_domain(K, u0, tol=tol, max_iter=max_iter)
                   if bool((u0 > 1e-150).all()) else None)
            if res is not None:
                u, _, it, err = res
                g = torch.log(u) - 0.5 * c
                log_Q = g[:, None] + g[None, :] + log_K
                return log_Q, g, it, err
    for it in range(1, int(max_iter) + 1):  # noqa: B007 (it is returned)
        s = torch.logsumexp(g[None, :] + log_K, 1)
        err = float((torch.exp(g + s) - 1.0).abs().max().detach())
        if err < tol:
            break
        g = 0.5 * (g - s)
    log_Q = g[:, None] + g[None, :] + log_K
    return log_Q, g, it, err


def sinkhorn_kernel_domain(
    K: torch.Tensor,
    u0: torch.Tensor,
    *,
    tol: float = 1e-6,
    max_iter: int = 1000,
    omega: float = 0.5,
) -> tuple[torch.Tensor, torch.Tensor, int, float] | None:
    r"""Symmetric Sinkhorn on the kernel itself: the update of :func:`symmetric_sinkhorn` on the
    scalings :math:`u = e^{g}`, one matrix-vector product and no exp/log per entry,

    .. math:: u \leftarrow u \odot \big(u \odot \mathbf K u\big)^{-\omega}

    (:math:`\omega = 1/2`: :math:`u \leftarrow \sqrt{u / \mathbf K u}`, the averaged update).
    Near the solution the error contracts by :math:`\max_{\lambda}|1 - \omega(1 + \lambda)|`
    over the eigenvalues :math:`\lambda \ne 1` of :math:`\mathbf Q`, which lie in (-1, 1) with
    at least one negative (zero trace): any :math:`\omega \in (0, 1)` converges, and
    :math:`\omega = 0.7` contracts at least as fast as 1/2 whatever the spectrum (factor
    :math:`\max(0.4, 0.3 - 0.7\lambda_{\min})` against :math:`(1 - \lambda_{\min})/2`). If
    the error grows, the iteration falls back to :math:`\omega = 1/2`.

    Parameters
    ----------
    K : (n, n) tensor
        Symmetric non-negative kernel (a zero diagonal excludes self-pairs). The iteration runs in
        its dtype.
    u0 : (n,) tensor
        Positive starting scalings.
    tol, max_iter : float, int
        Stop when :math:`\|u \odot \mathbf K u - \mathbf 1\|_\infty < \mathrm{tol}`.
    omega : float in (0, 1)
        Relaxation of the update.

    Returns
    -------
    (u, s, n_iter, err) with :math:`s = \mathbf K u` at the returned ``u`` (so that
    :math:`\sum_{ij} u_i K_{ij} u_j = \langle u, s\rangle`), or ``None`` when the scalings leave
    the floating-point range (zero, infinite or NaN): use the log domain then.
    """
    if not 0.0 < omega < 1.0:
        raise ValueError(f"omega must lie in (0, 1), got {omega}.")
    u = u0.to(K.dtype)
    if not (bool(torch.isfinite(u).all()) and bool((u > 0).all())):
        return None
    err = prev = float("inf")
    it = 0
    for it in range(1, int(max_iter) + 1):  # noqa: B007 (it is returned)
        s = torch.mv(K, u)
        r = u * s
        err = float((r - 1.0).abs().max())
        if not math.isfinite(err):
            return None
        if err < tol:
            break
        if err > prev:
            omega = 0.5
        prev = err
        u = torch.sqrt(u / s) if omega == 0.5 else u * r.pow_(-omega)
    # an infinite or NaN scaling makes err non-finite (caught above); a zero one stalls at err = 1
    if not err < tol and not bool((u > 0).all()):
        return None
    return u, s, it, err


def sinkhorn_affinity(
    X: Any,
    bandwidth: float | None = 1.0,
    *,
    perplexity: float | None = None,
    precomputed: bool = False,
    exclude_self: bool = False,
    tol: float = 1e-6,
    max_iter: int = 5000,
    return_log: bool = False,
    return_info: bool = False,
) -> Any:
    r"""Doubly stochastic (Sinkhorn) affinity :math:`\mathbf P^{ds} = \exp((\mathbf f \oplus
    \mathbf f - \mathbf C)/\nu)` (thesis eq. (DS)), the solution of symmetric entropic OT with
    a global entropy constraint (SEOT).

    Parameters
    ----------
    X : array (n, p), or (n, n) cost if ``precomputed``
    bandwidth : float
        :math:`\nu > 0`, in units of the cost. Ignored if ``perplexity`` is given.
    perplexity : float, optional
        Choose :math:`\nu` by bisection so that the *average* row entropy is
        :math:`\log\xi + 1` (the global constraint :math:`\eta = n(\log\xi+1)` of SEOT; the
        protocol of thesis Fig. 4.2 for comparing :math:`\mathbf P^{ds}` with SEA).
    precomputed, exclude_self : bool
    tol, max_iter : Sinkhorn tolerance on :math:`\|\mathbf P\mathbf 1 - \mathbf 1\|_\infty`, and
        iteration cap.
    return_log, return_info : bool
        ``info`` holds ``f`` (original units), ``bandwidth``, ``n_iter``, ``marginal_violation``.

    Returns
    -------
    P : (n, n) array, symmetric, doubly stochastic
    """
    C = input_cost(X, precomputed)
    n = C.shape[0]

    def solve(nu, f0=None):
        log_K = -C / nu
        if exclude_self:
            log_K.fill_diagonal_(NEG_INF)
        return symmetric_sinkhorn(log_K, f0, tol=tol, max_iter=max_iter, domain="auto")

    if perplexity is not None:
        check_perplexity(perplexity, n, exclude_self)
        target = math.log(perplexity) + 1.0
        off = ~torch.eye(n, dtype=torch.bool)
        s = float(C[off].median())
        lo, hi = math.log(s) - 15.0, math.log(s) + 15.0
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            lq, _, _, _ = solve(math.exp(mid))
            Hm = float(row_entropy(lq).mean())
            if abs(Hm - target) < 1e-9:
                break
            if Hm < target:
                lo = mid
            else:
                hi = mid
        nu = math.exp(0.5 * (lo + hi))
    else:
        if bandwidth is None or not bandwidth > 0:
            raise ValueError(f"bandwidth must be positive, got {bandwidth}.")
        nu = float(bandwidth)
    log_Q, g, n_iter, err = solve(nu)
    if err >= tol:
        warnings.warn(f"Sinkhorn did not reach tol={tol} in {max_iter} iterations "
                      f"(marginal violation {err:.2e}).", SEAConvergenceWarning, stacklevel=2)
    log_Q = 0.5 * (log_Q + log_Q.T)
    out = as_output(log_Q if return_log else torch.exp(log_Q), X)
    if not return_info:
        return out
    return out, {"f": g * nu, "bandwidth": nu, "n_iter": n_iter, "marginal_violation": err}
