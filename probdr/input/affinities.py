r"""Input affinities: bandwidth calibration on neighbour lists.

* :func:`entropic_affinity` -- entropic affinities (SNE / t-SNE / LargeVis input): row
  :math:`i` is :math:`P_{ij} \propto \exp(-C_{ij}/\varepsilon_i)` with :math:`\varepsilon_i` set by
  bisection in log space so that the Shannon perplexity :math:`\exp H(P_i)` equals the target.
* :func:`umap_membership` -- UMAP's :math:`\rho_i, \sigma_i` calibration with
  ``local_connectivity``: :math:`v_{j|i} = \exp(-\max(0, d_{ij} - \rho_i)/\sigma_i)`;
  :func:`umap_bandwidths` gives the calibration and :func:`fuzzy_membership` the memberships
  it gives to any pairs of a row (e.g. an observed network's).
* :func:`binary_knn` -- 0/1 neighbour weights.

All functions take the squared distances of neighbour lists, shape ``(n, k)`` (self
excluded), as returned by :func:`probdr.input.neighbors.knn`, numpy or torch, and return torch
per-edge values of the same shape, so they work on dense (k = n - 1) and sparse graphs alike.
A 1-D, empty, non-finite or negative ``sq_dist`` and out-of-range parameters raise ``ValueError``
or ``TypeError`` naming the argument, before any work.
"""

from __future__ import annotations

import math

import torch

from .._utils import check_array, check_number
from ..ot.entropic import bisect_log_beta
from ..ot.sea import symmetric_entropic as _ot_symmetric_entropic
from ..ot.sinkhorn import sinkhorn_affinity as _ot_sinkhorn_affinity

__all__ = ["entropic_bandwidths", "entropic_affinity", "umap_membership", "umap_bandwidths",
           "fuzzy_membership", "binary_knn", "perplexity_of_rows"]


def perplexity_of_rows(P: torch.Tensor) -> torch.Tensor:
    """Shannon perplexity :math:`\\exp(-\\sum_j P_{ij} \\log P_{ij})` of each row of the
    row-stochastic ``P`` (numpy or torch, ``(n, k)``, entries >= 0)."""
    P = check_array(P, name="P", min_samples=1, dtype=None, nonnegative=True)
    return torch.exp(-torch.special.xlogy(P, P).sum(-1))


def entropic_bandwidths(
    sq_dist: torch.Tensor, perplexity: float, tol: float = 1e-6, max_iter: int = 200
) -> torch.Tensor:
    r"""Bandwidths :math:`\varepsilon_i` such that row :math:`i` of
    :math:`\mathrm{softmax}(-C_i/\varepsilon_i)` has Shannon perplexity ``perplexity``.

    Bisection on :math:`\log \beta_i = -\log \varepsilon_i` (:func:`probdr.ot.entropic.bisect_log_beta`,
    the one entropic bisection, shared with the dense EA), vectorised over rows, in float64.
    The entropy is a decreasing function of :math:`\beta`, so bisection always converges; rows whose
    target cannot be reached (fewer distinct distances than the perplexity) get the closest value.
    """
    sq_dist = _check_sq_dist(sq_dist)
    n, k = sq_dist.shape
    perplexity = check_number(perplexity, "perplexity", low=1.0, high=k)
    tol = check_number(tol, "tol", low=0.0, low_open=True)
    max_iter = check_number(max_iter, "max_iter", integer=True, low=1)
    # every row's bisection runs the same number of halvings (one bracket width for all rows), so
    # blocks of rows give the numbers of one pass over all rows, with (block, k) temporaries
    bs = max(1, BISECTION_BLOCK // k)
    return torch.cat([_row_bandwidths(sq_dist[s:s + bs], perplexity, tol, max_iter)
                      for s in range(0, n, bs)]) if n else sq_dist.new_zeros(0, dtype=torch.float64)


def _check_sq_dist(sq_dist):
    return check_array(sq_dist, name="sq_dist", min_samples=1, dtype=None, nonnegative=True,
                       shape="(n_points, n_neighbors)")


#: entries of the cost rows per block of the bandwidth bisection (float64: 8 MiB)
BISECTION_BLOCK = 2**20


def _row_bandwidths(sq_dist, perplexity, tol, max_iter):
    C = sq_dist.to(torch.float64)
    n = C.shape[0]
    C = C - C.min(1, keepdim=True).values  # shift: P is unchanged, exp stays bounded
    scale = C.max(1, keepdim=True).values.clamp_min(1e-300)
    target = math.log(perplexity)
    Cs = C / scale

    def entropy_at(t):  # Shannon entropy of each row at log(beta * scale) = t
        logits = -torch.exp(t) * Cs
        logp = logits - torch.logsumexp(logits, 1, keepdim=True)
        return -(logp.exp() * logp).sum(1, keepdim=True)

    t = bisect_log_beta(entropy_at, n, target, 50.0, max_iter, tol_interval=tol)
    beta = torch.exp(t) / scale
    # a row whose neighbours are all at the same distance (duplicated points) has the uniform
    # affinity whatever the bandwidth, and its bisection ends at beta = inf: take bandwidth 1
    spread = (C.max(1, keepdim=True).values > 0)
    return torch.where(spread, 1.0 / beta, torch.ones_like(beta)).squeeze(1)


def entropic_affinity(sq_dist: torch.Tensor, perplexity: float, **kw) -> torch.Tensor:
    """Row-stochastic entropic affinities :math:`P^D_{ij}` on the given neighbour lists."""
    sq_dist = _check_sq_dist(sq_dist)
    eps = entropic_bandwidths(sq_dist, perplexity, **kw)
    logits = -(sq_dist.to(torch.float64) - sq_dist.to(torch.float64).min(1, keepdim=True).values)
    return torch.softmax(logits / eps[:, None], dim=1)


def umap_membership(
    sq_dist: torch.Tensor,
    n_neighbors: int | None = None,
    local_connectivity: float = 1.0,
    n_iter: int = 64,
    tol: float = 1e-5,
    min_k_dist_scale: float = 1e-3,
) -> torch.Tensor:
    r"""UMAP fuzzy memberships :math:`v_{j|i}` on the neighbour lists (self excluded).

    :math:`\rho_i` is the distance to the ``local_connectivity``-th nearest non-identical neighbour
    (interpolated for fractional values); :math:`\sigma_i` solves
    :math:`\sum_j \exp(-\max(0, d_{ij} - \rho_i)/\sigma_i) = \log_2(\text{n\_neighbors})` by
    bisection, where ``n_neighbors`` counts the point itself as umap-learn does (so the lists
    hold ``n_neighbors - 1`` others). :math:`\sigma_i` is floored at ``min_k_dist_scale`` times
    the mean neighbour distance. The calibration is :func:`umap_bandwidths`, the memberships
    :func:`fuzzy_membership`.
    """
    rho, sigma = umap_bandwidths(sq_dist, n_neighbors, local_connectivity, n_iter, tol,
                                 min_k_dist_scale)
    return fuzzy_membership(_check_sq_dist(sq_dist).to(torch.float64).sqrt(), rho, sigma)


def fuzzy_membership(d: torch.Tensor, rho: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    r"""UMAP memberships :math:`v_{j|i} = \exp(-\max(0, d_{ij} - \rho_i)/\sigma_i)` (1 where
    :math:`d_{ij} \le \rho_i` or :math:`\sigma_i = 0`) of distances ``d`` ``(m, c)`` (not
    squared) with the rows' calibration ``rho``, ``sigma`` ``(m,)`` (:func:`umap_bandwidths`):
    the neighbour lists, or any pairs of a row with that row's calibration."""
    v = torch.exp(-(d - rho[:, None]).clamp_min(0) / sigma[:, None])
    return torch.where((d - rho[:, None] <= 0) | (sigma[:, None] == 0), torch.ones_like(v), v)


def umap_bandwidths(
    sq_dist: torch.Tensor,
    n_neighbors: int | None = None,
    local_connectivity: float = 1.0,
    n_iter: int = 64,
    tol: float = 1e-5,
    min_k_dist_scale: float = 1e-3,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""UMAP's calibration of each row on its neighbour lists: :math:`(\rho_i, \sigma_i)`, each
    ``(n,)`` float64 (see :func:`umap_membership`, which returns the memberships they give)."""
    d = _check_sq_dist(sq_dist).to(torch.float64).sqrt()
    n, k = d.shape
    n_neighbors = k + 1 if n_neighbors is None else n_neighbors
    n_neighbors = check_number(n_neighbors, "n_neighbors", integer=True, low=2)
    local_connectivity = check_number(local_connectivity, "local_connectivity", low=0.0, high=k)
    n_iter = check_number(n_iter, "n_iter", integer=True, low=1)
    tol = check_number(tol, "tol", low=0.0, low_open=True)
    min_k_dist_scale = check_number(min_k_dist_scale, "min_k_dist_scale", low=0.0)
    target = math.log2(n_neighbors)
    rho = _umap_rho(d, local_connectivity)
    lo = torch.zeros(n, dtype=torch.float64, device=d.device)
    hi = torch.full((n,), float("inf"), dtype=torch.float64, device=d.device)
    mid = torch.ones(n, dtype=torch.float64, device=d.device)
    excess = (d - rho[:, None]).clamp_min(0)
    for _ in range(n_iter):
        psum = torch.exp(-excess / mid[:, None]).sum(1)
        done = (psum - target).abs() < tol
        bigger = psum > target
        hi = torch.where(done, hi, torch.where(bigger, mid, hi))
        lo = torch.where(done | bigger, lo, mid)
        new_mid = torch.where(bigger, 0.5 * (lo + hi), torch.where(torch.isinf(hi), mid * 2, 0.5 * (lo + hi)))
        mid = torch.where(done, mid, new_mid)
        if done.all():
            break
    mean_all = d.mean()
    mean_row = d.mean(1)
    floor = torch.where(rho > 0, min_k_dist_scale * mean_row, min_k_dist_scale * mean_all)
    return rho, torch.maximum(mid, floor)


def _umap_rho(d: torch.Tensor, local_connectivity: float) -> torch.Tensor:
    r""":math:`\rho_i`: the ``local_connectivity``-th smallest non-zero distance of each row of
    ``d`` ``(n, k)``, interpolated."""
    n, k = d.shape
    pos = d > 0
    nz = torch.where(pos, d, torch.full_like(d, float("inf"))).sort(1).values
    n_nz = pos.sum(1)
    index = int(math.floor(local_connectivity))
    interp = local_connectivity - index
    rho = torch.zeros(n, dtype=torch.float64, device=d.device)
    enough = n_nz >= local_connectivity
    if index > 0:
        base = nz[:, index - 1]
        rho_full = base.clone()
        if interp > 1e-5 and index < k:
            rho_full = base + interp * (nz[:, index] - base)
        rho = torch.where(enough, rho_full, rho)
    elif interp > 1e-5:
        rho = torch.where(enough, interp * nz[:, 0], rho)
    few = (~enough) & (n_nz > 0)
    if few.any():  # fewer positive distances than local_connectivity: the largest one
        rho = torch.where(few, torch.where(pos, d, torch.zeros_like(d)).max(1).values, rho)
    return rho


def binary_knn(sq_dist: torch.Tensor) -> torch.Tensor:
    """Binary kNN weights: 1 on every listed neighbour."""
    return torch.ones_like(_check_sq_dist(sq_dist), dtype=torch.float64)


def _moved(func, new: str):
    """``func`` under its name of 0.1.0 here, warning that it moved to ``new``."""
    import functools
    import warnings

    @functools.wraps(func)
    def old(*args, **kwargs):
        warnings.warn(f"probdr.affinities.{func.__name__} moved to {new}.{func.__name__} (the old "
                      "name will be removed in the next release).", DeprecationWarning,
                      stacklevel=2)
        return func(*args, **kwargs)
    return old


#: moved to :mod:`probdr.ot`; importable from here, with a ``DeprecationWarning``, for one more
#: release
symmetric_entropic = _moved(_ot_symmetric_entropic, "probdr.ot")
sinkhorn_affinity = _moved(_ot_sinkhorn_affinity, "probdr.ot.sinkhorn")
