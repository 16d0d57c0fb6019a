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
memory), up to :data:`EXACT_MAX_N` points; for t-SNE's E law with a 2-D Student kernel, above
:data:`FIELD_FROM` points, they come from the kernel's field interpolated on a grid by FFT (the
machinery of the MAP's normaliser, with the kernel's first and second derivatives sampled on
the node offsets), :math:`O(n + G^2 \log G)`; other laws and kernels are refused above
:data:`EXACT_MAX_N` points (:func:`check_laplace`). (Uniformly sampled partners are no substitute: the terms of a sum such as
:math:`\sum_j \nabla^2 k_{ij}` change sign between near and far partners and cancel, so a
sample's relative error is of order one.) A block that is not
positive definite (a point held by repulsion alone at a saddle) has its eigenvalues raised to the
prior's :math:`s^{-2}`.
"""

from __future__ import annotations

import math

import torch

__all__ = ["point_precisions", "check_laplace", "LAWS", "FIELD_FROM", "EXACT_MAX_N"]

LAWS = ("B", "D", "E")
_BLOCK = 2_000_000  # pairs per block of the exact sums
#: edges per part of the attraction's sums (each edge's temporaries are a few dozen float64s)
_EDGE_BLOCK = 1 << 19
#: above this many points the E law's all-pairs sums of a 2-D Student kernel (t-SNE) come from
#: the FFT-interpolated field, as the MAP fit's normaliser does
FIELD_FROM = 5_000
#: the field's grid spacing (times the kernel's width, as the MAP's FFT normaliser; the grid
#: has at most MAX_GRID nodes per side, so very large maps get a coarser one): 0.125 keeps the
#: curvature sums within about 1 % of the exact ones
FIELD_SPACING = 0.125
#: the all-pairs sums are refused above this many points where no field covers them
EXACT_MAX_N = 20_000


def _derivatives(fn, d2: torch.Tensor):
    r""":math:`\phi, \phi', \phi''` of an elementwise function of :math:`d^2` (autograd)."""
    with torch.enable_grad():
        x = d2.detach().requires_grad_(True)
        f = fn(x)
        (d1,) = torch.autograd.grad(f.sum(), x, create_graph=True)
        if d1.requires_grad:
            (d2_,) = torch.autograd.grad(d1.sum(), x)
        else:  # phi' constant (e.g. a Gaussian kernel's log k)
            d2_ = torch.zeros_like(x)
    return f.detach(), d1.detach(), d2_.detach()


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
    """Directed off-diagonal edges ``(rows, cols, values)`` of a dense or sparse graph."""
    if W.is_sparse:
        W = W.coalesce()
        r, c = W.indices()
        v = W.values()
    else:
        r, c = W.nonzero(as_tuple=True)
        v = W[r, c]
    keep = (r != c) & (v != 0)
    return r[keep], c[keep], v[keep]


def _row_totals(W: torch.Tensor, n: int, dtype) -> torch.Tensor:
    r, _, v = _edges(W)
    return torch.zeros(n, dtype=dtype).index_add_(0, r, v.to(dtype))


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
    return law == "E" and q == 2 and n > FIELD_FROM and bool(getattr(kernel, "has_fft", False))


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
            f"{n} points, more than {EXACT_MAX_N}); only t-SNE's E law with a 2-D Student kernel "
            "has the FFT field that makes it cheap. Use inference='svi', or a subsample.")


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
    if law == "B":
        _binary_repulsion(H, Z, W, kernel, negative_sampling)
    elif law == "E":
        _total_repulsion(H, Z, W, kernel)
    else:
        _row_repulsion(H, Z, W, kernel)
    Lam = -float(coupling_weight) * H
    if prior_precision is None:
        floor = torch.full((n,), 1e-12, dtype=Z.dtype, device=Z.device)
    else:
        prec = torch.as_tensor(prior_precision, dtype=Z.dtype, device=Z.device).expand(n, q)
        Lam = Lam + torch.diag_embed(prec)
        floor = prec.min(1).values
    return _floor_eigenvalues(0.5 * (Lam + Lam.transpose(1, 2)), floor)


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
    r, c, v = _edges(W)
    if surrogate:
        def fn(x):
            lk = kernel.log_k(x)
            return lk - torch.nn.functional.softplus(lk)
    else:
        fn = kernel.log_k
    for s in range(0, r.numel(), _EDGE_BLOCK):
        rs, cs = r[s:s + _EDGE_BLOCK], c[s:s + _EDGE_BLOCK]
        u = Z[rs] - Z[cs]
        _, d1, d2_ = _derivatives(fn, u.square().sum(-1))
        block = _hess(d1[:, None], d2_[:, None], u[:, None, :],
                      v[s:s + _EDGE_BLOCK].to(Z.dtype)[:, None])
        H.index_add_(0, rs, block)
        H.index_add_(0, cs, block)


def _binary_repulsion(H, Z, W, kernel, negative_sampling) -> None:
    r"""B: :math:`-\sum_j \omega_{ij}\nabla^2\log(1+k_{ij})`, :math:`\omega = 2` (exact law) or
    the surrogate's :math:`\gamma m (W_{i+} + W_{j+})/n`."""
    n = Z.shape[0]
    if negative_sampling is not None:
        m, gamma = negative_sampling
        tot = _row_totals(W, n, Z.dtype) * (float(gamma) * int(m) / n)

    def fn(x):
        return -torch.nn.functional.softplus(kernel.log_k(x))

    for rows, C, w in _blocks(Z):
        u, d2 = _pairs(Z, rows, C)
        _, d1, d2_ = _derivatives(fn, d2)
        om = 2.0 * w if negative_sampling is None else w * (tot[rows][:, None] + tot[C])
        H[rows] += _hess(d1, d2_, u, om)


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
    G, step = grid.G, float(grid.h)
    k = torch.arange(2 * G, dtype=Z.dtype)
    k = torch.where(k < G, k, k - 2 * G) * step
    ox, oy = k[:, None].expand(2 * G, 2 * G), k[None, :].expand(2 * G, 2 * G)
    f, d1, d2_ = _derivatives(_kernel(kernel), ox ** 2 + oy ** 2)
    kernels = (lambda: f, lambda: 2 * d1 * ox, lambda: 2 * d1 * oy,
               lambda: 2 * d1 + 4 * d2_ * ox ** 2, lambda: 4 * d2_ * ox * oy,
               lambda: 2 * d1 + 4 * d2_ * oy ** 2)
    charges = torch.fft.rfft2(grid.spread(torch.ones(1, Z.shape[0], dtype=Z.dtype)),
                              s=(2 * G, 2 * G))
    # one kernel at a time: six (2G)^2 grids and their transforms at once are a gigabyte at G=1024
    vals = torch.cat([grid.gather(torch.fft.irfft2(charges * torch.fft.rfft2(make()[None]),
                                                   s=(2 * G, 2 * G))[..., :G, :G].contiguous())
                      for make in kernels])
    f0, d10, _ = _derivatives(_kernel(kernel), torch.zeros(1, dtype=Z.dtype))
    S = vals[0] - f0
    g = vals[1:3].T
    hess = torch.stack([vals[3] - 2 * d10, vals[4], vals[4], vals[5] - 2 * d10], -1)
    return S, g, hess.view(-1, 2, 2)


def _total_repulsion(H, Z, W, kernel) -> None:
    r"""E: :math:`-N(2\sum_j\nabla^2 k_{ij}/S - 4 g_i g_i^\top/S^2)`; the sums over all pairs
    exact up to :data:`FIELD_FROM` points, by FFT interpolation above (2-D Student kernels)."""
    N = float(_edges(W)[2].sum())
    n, q = Z.shape
    if _uses_field("E", kernel, n, q):
        Si, g, h = _field_sums(Z, kernel)
        S = float(Si.sum())
        H -= N * (2.0 * h / S - 4.0 * g[:, :, None] * g[:, None, :] / S ** 2)
        return
    hk, S = [], 0.0
    for rows, C, w in _blocks(Z):
        u, d2 = _pairs(Z, rows, C)
        f, d1, d2_ = _derivatives(_kernel(kernel), d2)
        S += float((w * f).sum())
        hk.append((rows, _hess(d1, d2_, u, w), _grad(d1, u, w)))
    for rows, h, g in hk:
        H[rows] -= N * (2.0 * h / S - 4.0 * g[:, :, None] * g[:, None, :] / S ** 2)


def _row_repulsion(H, Z, W, kernel) -> None:
    r"""D: :math:`-W_{i+}\nabla^2\log S_i - \sum_j W_{j+}\nabla^2_{z_i}\log S_j`."""
    n = Z.shape[0]
    tot = _row_totals(W, n, Z.dtype)
    S = torch.zeros(n, dtype=Z.dtype, device=Z.device)
    blocks = list(_blocks(Z))
    for rows, C, w in blocks:
        _, d2 = _pairs(Z, rows, C)
        S[rows] = (w * torch.exp(kernel.log_k(d2))).sum(-1)
    for rows, C, w in blocks:
        u, d2 = _pairs(Z, rows, C)
        _, d1, d2_ = _derivatives(_kernel(kernel), d2)
        g = _grad(d1, u, w)
        own = _hess(d1, d2_, u, w) / S[rows][:, None, None] - (
            g[:, :, None] * g[:, None, :]) / S[rows][:, None, None] ** 2
        # the partner's row: W_j+ (grad^2 k_ij / S_j - grad k grad k^T / S_j^2)
        a = w * tot[C] / S[C]
        gk = 2.0 * d1[..., None] * u  # per-pair gradient of k
        other = _hess(d1, d2_, u, a) - torch.einsum("rj,rja,rjc->rac", a / S[C], gk, gk)
        H[rows] -= tot[rows][:, None, None] * own + other
