r"""The per-point curvature of the graph laws: each point's 2x2 block of the Hessian of the log
posterior in that point, the precision of the cheap posterior (:mod:`probdr.infer.laplace`).

For the graph couplings (latent laws B, D and E, any kernel of :math:`d^2`) the negative log
posterior at the MAP :math:`\hat Z` has, for each point :math:`i`, a :math:`q \times q` block of
its Hessian in :math:`z_i` alone,

.. math:: \Lambda_i = -\beta\, \nabla^2_{z_i} \ell(\hat Z) + s^{-2} I,

with :math:`\ell` the coupling log-likelihood, :math:`\beta` the coupling weight (inverse
temperature) and :math:`s` the scale of the isotropic Gaussian prior on Z. The approximation is
:math:`z_i \sim \mathcal N(\hat z_i, \Lambda_i^{-1})`, independently across points: the
**conditional** posterior of each point with the others held at the MAP (the field of the
training points), which is also what a mean-field Gaussian guide fits for a Gaussian target. It
ignores the correlations between points, so it is narrower than the marginal posterior; the
calibration study (``benchmarks/calibration.py``) measures by how much, and ``inflation``
multiplies the variances by a factor.

The blocks are sums over pairs of the second derivatives of :math:`\phi(d^2)` functions of the
squared distance, :math:`\nabla^2_{z_i}\phi(\|z_i-z_j\|^2) = 2\phi'\,I + 4\phi''\,u u^\top`,
:math:`u = z_i - z_j`:

* **attraction** (every law): :math:`\sum_j c_{ij}\log k_{ij}` with :math:`c_{ij} = W_{ij} + W_{ji}`
  (exactly, on the graph's edges);
* **B** (independent Bernoulli edges of odds :math:`k`): :math:`-2\sum_{j \ne i}\log(1+k_{ij})`;
  UMAP's negative-sampling surrogate (``repulsion="negative_sampling"``): attraction on
  :math:`\log\sigma(\log k)` and non-edges weighted :math:`\gamma m (W_{i+} + W_{j+})/n`, the
  expectation of the scheme (:mod:`probdr.models.coupling`);
* **E** (:math:`N = \sum W` edges over all pairs): :math:`-N\log S`, :math:`S = \sum_{a\ne b}k_{ab}`,
  whose block is :math:`-N(2\sum_j\nabla^2 k_{ij}/S - 4 g_i g_i^\top/S^2)`, :math:`g_i = \sum_j\nabla k_{ij}`;
* **D** (one edge per row): :math:`-W_{i+}\log S_i - \sum_{j} W_{j+}\log S_j`, row sums
  :math:`S_a = \sum_b k_{ab}`.

The sums over all partners are exact, in blocks of rows (:math:`O(n^2)` time, :math:`O(n)`
memory), up to :data:`FIELD_FROM` points. Above it, in 2-D, they come from a field interpolated
on a grid by FFT (the machinery of the MAP's normaliser, with the pair function's first and
second derivatives sampled on the node offsets), :math:`O(n + G^2 \log G)`: for t-SNE's E law
with a Student kernel, the kernel's own field; for the B law (UMAP, LargeVis; any kernel), whose
:math:`\log(1+k)` is singular where two points meet, the field of a smooth far part plus the
exact sums of the rest over the pairs closer than a few grid spacings (:func:`_binary_field`).
The D law and embeddings of more than 2 dimensions are refused above :data:`EXACT_MAX_N` points
(:func:`check_laplace`). (Uniformly sampled partners are no substitute: the terms of a sum such as
:math:`\sum_j \nabla^2 k_{ij}` change sign between near and far partners and cancel, so a
sample's relative error is of order one.) A likelihood block
that is not positive semi-definite -- a point that the fit left where the log-likelihood curves
up in one direction, which the stochastic negative-sampling fits of UMAP do for a tenth to a third of
the points -- counts its negative eigenvalues by their magnitude (the curvature's size without
its sign, as the saddle-free Newton method and the SoftAbs metric do; Dauphin et al., NeurIPS
2014; Betancourt, GSI 2013) before the prior's :math:`s^{-2}` is added. Raising them to the
prior's precision instead gives such a point the prior's scale, the whole map, as its spread;
on UMAP's digits map that made the reliability unrelated to how points move across seeds
(Spearman 0.05 against 0.58 with the magnitudes, ``benchmarks/reliability.py``).
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch

from .._compute.pair_field import (
    FIELD_SPACING,
    NEAR_NODES,
    NearFarSplit,
    convolve,
    derivatives,
    kernel_length,
    near_spacing,
    non_edge_term,
    offsets,
)
from .._utils import one_thread

__all__ = ["point_precisions", "check_laplace", "LAWS", "FIELD_FROM", "EXACT_MAX_N"]

LAWS = ("B", "D", "E")
_BLOCK = 2_000_000  # pairs per block of the exact sums
#: edges per part of the attraction's sums (each edge's temporaries are a few dozen float64s)
_EDGE_BLOCK = 1 << 19
#: above this many points the E law's all-pairs sums of a 2-D Student kernel (t-SNE) come from
#: the FFT-interpolated field, as the MAP fit's normaliser does
FIELD_FROM = 5_000
#: the all-pairs sums are refused above this many points where no field covers them
EXACT_MAX_N = 20_000


def _hess(d1, d2_, u, w):
    r""":math:`\sum w (2\phi' I + 4\phi'' u u^\top)` over the last pair axis: (..., q, q)."""
    q = u.shape[-1]
    eye = torch.eye(q, dtype=u.dtype, device=u.device)
    a = (w * d1).sum(-1)[..., None, None] * 2.0 * eye
    b = 4.0 * torch.einsum("...j,...ja,...jb->...ab", w * d2_, u, u)
    return a + b


def _grad(d1, u, w):
    r""":math:`\sum w\, 2\phi' u` over the pair axis: (..., q)."""
    return 2.0 * torch.einsum("...j,...ja->...a", w * d1, u)


def _edges(W: torch.Tensor):
    """Directed off-diagonal edges ``(rows, cols, values)`` of a graph, in parts of at most
    :data:`_EDGE_BLOCK` edges: a sparse graph's are views of its index and value arrays, the
    diagonal and zero entries dropped part by part (a million-point t-SNE graph has about 10^8
    edges: copying them whole would be gigabytes)."""
    if W.is_sparse:
        W = W.coalesce()
        rows, cols = W.indices()
        vals = W.values()
    else:
        rows, cols = W.nonzero(as_tuple=True)
        vals = W[rows, cols]
    for s in range(0, rows.numel(), _EDGE_BLOCK):
        r, c, v = rows[s:s + _EDGE_BLOCK], cols[s:s + _EDGE_BLOCK], vals[s:s + _EDGE_BLOCK]
        keep = (r != c) & (v != 0)
        yield r[keep], c[keep], v[keep]


def _row_totals(W: torch.Tensor, n: int, dtype) -> torch.Tensor:
    tot = torch.zeros(n, dtype=dtype)
    for r, _, v in _edges(W):
        tot.index_add_(0, r, v.to(dtype))
    return tot


def _blocks(Z: torch.Tensor):
    """Blocks of rows against every other point: ``(rows, cols (b, n), weights (b, n))``, the
    weight 0 on the diagonal, about :data:`_BLOCK` pairs each."""
    n = Z.shape[0]
    b = max(1, _BLOCK // n)
    cols = torch.arange(n, device=Z.device)
    for s in range(0, n, b):
        rows = torch.arange(s, min(n, s + b), device=Z.device)
        C = cols.expand(rows.numel(), n)
        yield rows, C, (C != rows[:, None]).to(Z.dtype)


def _pairs(Z, rows, C):
    u = Z[rows][:, None, :] - Z[C]
    return u, u.square().sum(-1)


def _uses_field(law: str, kernel, n: int, q: int) -> bool:
    """Whether the all-pairs sums come from a 2-D field: the B law's for any kernel, the E
    law's for Student kernels (the MAP's FFT normaliser)."""
    if q != 2 or n <= FIELD_FROM:
        return False
    return law == "B" or (law == "E" and bool(getattr(kernel, "has_fft", False)))


def check_laplace(law: str, kernel, n: int, q: int, negative_sampling=None) -> None:
    """Refuse, before any work, a Laplace approximation this module cannot compute in
    reasonable time: all-pairs sums above :data:`EXACT_MAX_N` points where no FFT field covers
    them (only the E law with a 2-D Student kernel has one)."""
    if law not in LAWS:
        raise ValueError(f"law must be one of {LAWS}, got {law!r}.")
    if negative_sampling is not None and law != "B":
        raise ValueError("negative sampling is the B law's surrogate.")
    if n > EXACT_MAX_N and not _uses_field(law, kernel, n, q):
        raise ValueError(
            f"inference='laplace' sums the {law} law's curvature over all pairs here (O(n^2): "
            f"{n} points, more than {EXACT_MAX_N}); only 2-D embeddings with the B law (UMAP, "
            "LargeVis) or t-SNE's E law with a Student kernel have the field that makes it "
            "cheap. Use inference='svi', or a subsample.")


def point_precisions(Z: torch.Tensor, W: torch.Tensor, law: str, kernel, *,
                     coupling_weight: float = 1.0, prior_precision=None,
                     negative_sampling: tuple[int, float] | None = None) -> torch.Tensor:
    r"""The per-point posterior precision blocks :math:`\Lambda_i` (module docstring).

    Parameters
    ----------
    Z : tensor (n, q)
        The MAP embedding.
    W : tensor (n, n), dense or sparse
        The observed graph (the coupling's :math:`\mathbb E[W_X]`).
    law : {"B", "D", "E"}
        The latent graph law.
    kernel : probdr.kernels.Kernel
        The latent kernel (fixed numbers).
    coupling_weight : float
        :math:`\beta`.
    prior_precision : float or tensor (n, q), optional
        The Gaussian prior's precision per coordinate (:math:`s^{-2}` for the isotropic prior
        of scale :math:`s`); ``None``: no prior term (the likelihood's curvature alone).
    negative_sampling : (m, gamma), optional
        The B law's negative-sampling surrogate with ``m`` negatives of weight ``gamma``.

    Returns
    -------
    tensor (n, q, q)
    """
    check_laplace(law, kernel, Z.shape[0], Z.shape[1], negative_sampling)
    Z = Z.detach().to(torch.float64)
    n, q = Z.shape
    H = torch.zeros(n, q, q, dtype=Z.dtype, device=Z.device)  # Hessian of the log-likelihood
    _attraction(H, Z, W, kernel, surrogate=negative_sampling is not None)
    # the exact all-pairs sums reduce long blocks, whose last bits depend on the thread count
    with nullcontext() if _uses_field(law, kernel, n, q) else one_thread():
        if law == "B":
            _binary_repulsion(H, Z, W, kernel, negative_sampling)
        elif law == "E":
            _total_repulsion(H, Z, W, kernel)
        else:
            _row_repulsion(H, Z, W, kernel)
    Lam = _absolute_eigenvalues(-float(coupling_weight) * 0.5 * (H + H.transpose(1, 2)))
    if prior_precision is None:
        return _floor_eigenvalues(Lam, torch.full((n,), 1e-12, dtype=Z.dtype, device=Z.device))
    prec = torch.as_tensor(prior_precision, dtype=Z.dtype, device=Z.device).expand(n, q)
    return Lam + torch.diag_embed(prec)


def _absolute_eigenvalues(Lam: torch.Tensor) -> torch.Tensor:
    """Each block with its negative eigenvalues replaced by their magnitudes."""
    vals, vecs = torch.linalg.eigh(Lam)
    neg = (vals < 0).any(1)
    if not bool(neg.any()):
        return Lam
    Lam = Lam.clone()
    Lam[neg] = vecs[neg] @ torch.diag_embed(vals[neg].abs()) @ vecs[neg].transpose(1, 2)
    return Lam


def _floor_eigenvalues(Lam: torch.Tensor, floor: torch.Tensor) -> torch.Tensor:
    """Raise the eigenvalues of each block to at least its ``floor`` (n,)."""
    vals, vecs = torch.linalg.eigh(Lam)
    low = (vals < floor[:, None]).any(1)
    if not bool(low.any()):
        return Lam
    vals = torch.maximum(vals[low], floor[low][:, None])
    Lam = Lam.clone()
    Lam[low] = vecs[low] @ torch.diag_embed(vals) @ vecs[low].transpose(1, 2)
    return Lam


def _attraction(H, Z, W, kernel, surrogate: bool) -> None:
    r""":math:`\sum_j c_{ij}\nabla^2\log k_{ij}` (or :math:`\log\sigma(\log k)`) on the edges,
    both endpoints of each directed edge; in parts of :data:`_EDGE_BLOCK` edges (a whole large
    graph's temporaries would be gigabytes)."""
    if surrogate:
        def fn(x):
            lk = kernel.log_k(x)
            return lk - torch.nn.functional.softplus(lk)
    else:
        fn = kernel.log_k
    for rs, cs, v in _edges(W):
        u = Z[rs] - Z[cs]
        _, d1, d2_ = derivatives(fn, u.square().sum(-1))
        block = _hess(d1[:, None], d2_[:, None], u[:, None, :], v.to(Z.dtype)[:, None])
        H.index_add_(0, rs, block)
        H.index_add_(0, cs, block)


def _binary_repulsion(H, Z, W, kernel, negative_sampling) -> None:
    r"""B: :math:`-\sum_j \omega_{ij}\nabla^2\log(1+k_{ij})`, :math:`\omega = 2` (exact law) or
    the surrogate's :math:`\gamma m (W_{i+} + W_{j+})/n`; over all pairs exactly, or from the
    near pairs and the far field in 2-D above :data:`FIELD_FROM` points
    (:func:`_binary_field`)."""
    n, q = Z.shape
    tot = None
    if negative_sampling is not None:
        m, gamma = negative_sampling
        tot = _row_totals(W, n, Z.dtype) * (float(gamma) * int(m) / n)
    if _uses_field("B", kernel, n, q):
        _binary_field(H, Z, kernel, tot)
        return

    fn = non_edge_term(kernel)

    for rows, C, w in _blocks(Z):
        u, d2 = _pairs(Z, rows, C)
        _, d1, d2_ = derivatives(fn, d2)
        om = 2.0 * w if tot is None else w * (tot[rows][:, None] + tot[C])
        H[rows] += _hess(d1, d2_, u, om)


def _binary_field(H, Z, kernel, tot) -> None:
    r"""The B law's repulsion sums :math:`\sum_{j\ne i}\omega_{ij}\nabla^2\phi(d_{ij}^2)`,
    :math:`\phi = -\log(1+k)`, in 2-D without the all-pairs loop
    (:mod:`probdr._compute.pair_field`). :math:`\phi` is split at
    :math:`r` = :data:`NEAR_NODES` grid spacings: the far part equals :math:`\phi` beyond
    :math:`r` and its second-order Taylor polynomial in :math:`d^2` inside (so it is smooth
    and finite at 0), summed for every pair by the FFT field on a grid of spacing
    :data:`FIELD_SPACING` times the kernel's length
    (:func:`~probdr._compute.pair_field.kernel_length`); the near part,
    :math:`\phi` minus the far part, vanishes beyond :math:`r` and is summed exactly over the
    pairs within it (a k-d tree). :math:`\omega_{ij} = t_i + t_j` (the surrogate, ``tot`` =
    :math:`t`) takes two sets of charges, 1 and :math:`t`; the exact law's
    :math:`\omega = 2` one."""
    from scipy.spatial import cKDTree

    from .._compute.fft import Grid2D

    fn = non_edge_term(kernel)

    n = Z.shape[0]
    points = Z.cpu().numpy()
    tree = cKDTree(points)
    grid = Grid2D(Z, near_spacing(points, tree, FIELD_SPACING * kernel_length(kernel)))
    split = NearFarSplit(fn, (NEAR_NODES * float(grid.h)) ** 2, Z.dtype)
    r2, inner, far = split.r2, split.inner, split.far
    ox, oy = offsets(grid, Z.dtype)
    d1, d2_ = far(ox ** 2 + oy ** 2)
    kernels = (lambda: 2 * d1 + 4 * d2_ * ox ** 2, lambda: 4 * d2_ * ox * oy,
               lambda: 2 * d1 + 4 * d2_ * oy ** 2)
    ones = torch.ones(1, n, dtype=Z.dtype)
    charges = ones if tot is None else torch.cat([ones, tot[None]])
    vals = convolve(grid, charges, kernels)  # (3, C, n)
    self_d1 = split.self_d1  # phi_far'(0): the j = i term of the field is 2 phi_far'(0) I
    if tot is None:
        parts, own = 2.0 * vals[:, 0], torch.full((n,), 4.0 * self_d1, dtype=Z.dtype)
    else:
        parts, own = tot * vals[:, 0] + vals[:, 1], 4.0 * self_d1 * tot
    hxx, hxy, hyy = parts[0] - own, parts[1], parts[2] - own
    H += torch.stack([hxx, hxy, hxy, hyy], -1).view(n, 2, 2)
    pairs = torch.as_tensor(tree.query_pairs(math.sqrt(r2), output_type="ndarray"))
    for s in range(0, pairs.shape[0], _EDGE_BLOCK):
        i, j = pairs[s:s + _EDGE_BLOCK].T.to(Z.device)
        u = Z[i] - Z[j]
        x = u.square().sum(-1)
        _, e1, e2 = derivatives(fn, x)
        f1, f2 = inner(x)  # every near pair lies inside r
        w = torch.full_like(x, 2.0) if tot is None else tot[i] + tot[j]
        block = _hess((e1 - f1)[:, None], (e2 - f2)[:, None], u[:, None, :], w[:, None])
        H.index_add_(0, i, block)
        H.index_add_(0, j, block)


def _kernel(kernel):
    return lambda x: torch.exp(kernel.log_k(x))


def _field_sums(Z: torch.Tensor, kernel):
    r"""The kernel's field at every point by FFT interpolation (2-D, Student kernels: t-SNE's
    grid, :mod:`probdr._compute.fft`): :math:`\sum_{j\ne i}` of :math:`k`, of
    :math:`\nabla k` (2) and of :math:`\nabla^2 k` (xx, xy, yy) -- the six kernels sampled on
    the grid's node offsets, one transform of the points' unit charges, six products, one
    batched inverse; the self terms removed. Returns ``(S_i (n,), g (n, 2), h (n, 2, 2))``."""
    from .._compute.fft import Grid2D

    fixed = kernel.fixed()
    h = FIELD_SPACING * min(1.0, math.sqrt(2.0 * fixed.dof * fixed.scale ** 2 / (fixed.dof + 1.0)))
    grid = Grid2D(Z, h)
    ox, oy = offsets(grid, Z.dtype)
    f, d1, d2_ = derivatives(_kernel(kernel), ox ** 2 + oy ** 2)
    kernels = (lambda: f, lambda: 2 * d1 * ox, lambda: 2 * d1 * oy,
               lambda: 2 * d1 + 4 * d2_ * ox ** 2, lambda: 4 * d2_ * ox * oy,
               lambda: 2 * d1 + 4 * d2_ * oy ** 2)
    vals = convolve(grid, torch.ones(1, Z.shape[0], dtype=Z.dtype), kernels)[:, 0]
    f0, d10, _ = derivatives(_kernel(kernel), torch.zeros(1, dtype=Z.dtype))
    S = vals[0] - f0
    g = vals[1:3].T
    hess = torch.stack([vals[3] - 2 * d10, vals[4], vals[4], vals[5] - 2 * d10], -1)
    return S, g, hess.view(-1, 2, 2)


def _total_repulsion(H, Z, W, kernel) -> None:
    r"""E: :math:`-N(2\sum_j\nabla^2 k_{ij}/S - 4 g_i g_i^\top/S^2)`; the sums over all pairs
    exact up to :data:`FIELD_FROM` points, by FFT interpolation above (2-D Student kernels)."""
    N = sum(float(v.sum()) for _, _, v in _edges(W))
    n, q = Z.shape
    if _uses_field("E", kernel, n, q):
        Si, g, h = _field_sums(Z, kernel)
        S = float(Si.sum())
        H -= N * (2.0 * h / S - 4.0 * g[:, :, None] * g[:, None, :] / S ** 2)
        return
    hk, S = [], 0.0
    for rows, C, w in _blocks(Z):
        u, d2 = _pairs(Z, rows, C)
        f, d1, d2_ = derivatives(_kernel(kernel), d2)
        S += float((w * f).sum())
        hk.append((rows, _hess(d1, d2_, u, w), _grad(d1, u, w)))
    for rows, h, g in hk:
        H[rows] -= N * (2.0 * h / S - 4.0 * g[:, :, None] * g[:, None, :] / S ** 2)


def _row_repulsion(H, Z, W, kernel) -> None:
    r"""D: :math:`-W_{i+}\nabla^2\log S_i - \sum_j W_{j+}\nabla^2_{z_i}\log S_j`. Each term is a
    ratio of kernel sums of one row, so each row's kernel is taken relative to its largest
    entry (:math:`k_{ij} e^{-m_i}`, :math:`m_i = \max_j \log k_{ij}`): a point far from all
    others under a light-tailed kernel (a Gaussian's :math:`k` underflows to 0) keeps a finite
    curvature."""
    n = Z.shape[0]
    tot = _row_totals(W, n, Z.dtype)
    S = torch.zeros(n, dtype=Z.dtype, device=Z.device)
    top = torch.zeros(n, dtype=Z.dtype, device=Z.device)
    blocks = list(_blocks(Z))
    for rows, C, w in blocks:
        _, d2 = _pairs(Z, rows, C)
        lk = torch.where(w > 0, kernel.log_k(d2), torch.full_like(d2, float("-inf")))
        top[rows] = lk.amax(-1)
        S[rows] = (w * torch.exp(lk - top[rows][:, None])).sum(-1)
    for rows, C, w in blocks:
        u, d2 = _pairs(Z, rows, C)
        _, d1, d2_ = derivatives(_shifted_kernel(kernel, top[rows][:, None]), d2)
        g = _grad(d1, u, w)
        own = _hess(d1, d2_, u, w) / S[rows][:, None, None] - (
            g[:, :, None] * g[:, None, :]) / S[rows][:, None, None] ** 2
        # the partner's row: W_j+ (grad^2 k_ij / S_j - grad k grad k^T / S_j^2), in row j's scale
        _, d1, d2_ = derivatives(_shifted_kernel(kernel, top[C]), d2)
        a = w * tot[C] / S[C]
        gk = 2.0 * d1[..., None] * u  # per-pair gradient of k
        other = _hess(d1, d2_, u, a) - torch.einsum("rj,rja,rjc->rac", a / S[C], gk, gk)
        H[rows] -= tot[rows][:, None, None] * own + other


def _shifted_kernel(kernel, shift: torch.Tensor):
    """:math:`k(x) e^{-\text{shift}}` (``shift`` broadcast against x, constant in it), at most 1:
    the shift is a row's largest off-diagonal log-kernel, so only the diagonal (weight 0) is
    cut, where the unshifted :math:`e^{-\text{shift}}` could overflow."""
    return lambda x: torch.exp((kernel.log_k(x) - shift).clamp(max=0.0))
