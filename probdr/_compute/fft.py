r"""Grid-interpolated all-pairs sums for 2-D embeddings (Linderman et al.'s FIt-SNE idea).

For a translation-invariant kernel :math:`\kappa`, the potentials
:math:`\phi(z_i) = \sum_j \kappa(z_i - z_j)\, q_j` are evaluated by (1) spreading the charges
:math:`q_j` on a regular grid with cubic Lagrange weights (4 x 4 nodes per point), (2) convolving the
grid with :math:`\kappa` by FFT, (3) interpolating the grid potential back at every point with the
same weights. Cost :math:`O(16 n + G^2 \log G)` for a :math:`G \times G` grid of spacing ``h``.
The self term :math:`\kappa(0) q_i` is subtracted exactly.

:func:`cauchy_log_total` uses it for t-SNE's normaliser
:math:`\log \sum_{i \ne j} (1 + \|z_i - z_j\|^2)^{-1}` and its gradient
:math:`-\frac{4}{S}\sum_j w_{ij}^2 (z_i - z_j)` (four potentials: kernels :math:`w` and
:math:`w^2`, charges :math:`1, z^x, z^y`).
"""

from __future__ import annotations

import math
import warnings
from contextlib import nullcontext

import torch

from .. import config
from .._utils import fixed_sum, one_thread, tensor_cache

#: default grid spacing: the Cauchy kernel varies on a unit scale; the gradient's relative error
#: scales as spacing^4 (measured against the exact sum: about 2.7% at 1/2, 0.7% at 1/3, 0.25% at
#: 1/4 -- Barnes-Hut at theta = 0.5 is in the same range as 1/2). On digits and mnist5k, 1/2 gave
#: the same trustworthiness and 5-NN accuracy as 1/3 (within 0.0013) at a third of the cost.
GRID_SPACING = 0.5
#: the grid never exceeds this many nodes per side (spacing grows instead)
MAX_GRID = 1024
#: grids of at most this many nodes per side are transformed on one thread: MKL's batched
#: inverse FFT of the smallest grid (16, padded to 32) rounds differently on 1 and on 2 or 4
#: threads, and a transform this small is faster on one thread anyway (measured: every ladder
#: size from 18 to 1125 gave the same bits on 1, 2 and 4 threads)
ONE_THREAD_GRID = 64


def _lagrange_weights(t: torch.Tensor) -> torch.Tensor:
    """Cubic Lagrange weights for nodes at offsets -1, 0, 1, 2 and fractional position t."""
    return torch.stack([
        -t * (t - 1) * (t - 2) / 6.0,
        (t + 1) * (t - 1) * (t - 2) / 2.0,
        -(t + 1) * t * (t - 2) / 2.0,
        (t + 1) * t * (t - 1) / 6.0,
    ], dim=-1)


def _stencil(Z: torch.Tensor, lo, h: float, G: int, clamp: bool = True):
    """``(flat_index, weight)``: the 16 grid nodes of each row of ``Z`` (n, 2) on the grid of
    corner ``lo``, spacing ``h`` and side ``G`` (flattened int64 node indices, n * 16: torch's
    ``index_add_`` along a grid's second dimension is many times slower with int32) and their
    cubic Lagrange weights (n, 16)."""
    u = (Z - lo) / h + 1.0  # node 1 is the first node at or below the minimum
    base = torch.floor(u)
    t = u - base
    base = base.long() - 1  # node indices of offset -1
    w = _lagrange_weights(t)  # (n, 2, 4): both coordinates in one set of passes
    wx, wy = w[:, 0], w[:, 1]
    if clamp:  # a no-op on the grid's own box (G >= span / h + 4), a guard against rounding
        base.clamp_(0, G - 4)
    offs = torch.arange(4, device=Z.device)
    offs = (offs[:, None] * G + offs[None, :]).reshape(-1)  # the 4 x 4 stencil's node offsets
    index = ((base[:, 0] * G + base[:, 1])[:, None] + offs).reshape(-1)
    return index, (wx[:, :, None] * wy[:, None, :]).reshape(-1, 16)


def _smooth_size(m: int) -> int:
    """Smallest integer >= m whose prime factors are 2, 3 and 5 (fast FFT sizes)."""
    while True:
        k = m
        for p in (2, 3, 5):
            while k % p == 0:
                k //= p
        if k == 1:
            return m
        m += 1


def _ladder_size(m: int) -> int:
    """Grid sizes on a geometric ladder (ratio about 1.1) of 5-smooth numbers: as the embedding
    grows the size changes rarely, so the kernel spectra are reused from the cache."""
    size = 16
    while size < m:
        size = _smooth_size(int(math.ceil(size * 1.1)))
    return size


_KERNEL_FFT_CACHE: dict = {}
#: kernel spectra kept (two kernels, a couple of grid sizes)
_CACHE_ENTRIES = 6


class Grid2D:
    """Interpolation of n points in 2-D onto a regular grid (built once per step).

    ``box = (lower corner, span)``: the grid of a larger set whose rows ``Z`` are (a rank's
    block). ``fixed``: a grid of side ``MAX_GRID`` whose spacing stays on the device, so that
    building it reads nothing on the host (the sync-free mode of :mod:`probdr.config`); the
    spacing is the one the fitted size would have, the extra nodes carry no charge."""

    def __init__(self, Z: torch.Tensor, spacing: float = GRID_SPACING,
                 box: tuple | None = None, fixed: bool = False):
        lo, span = box if box is not None else (Z.min(0).values, None)
        if span is None:
            span = (Z.max(0).values - lo).max()
        if fixed:
            h = torch.clamp_min(span / (MAX_GRID - 4), spacing)
            G = MAX_GRID
        else:
            span = float(span)
            if not math.isfinite(span):
                raise FloatingPointError(
                    "the embedding is not finite: the map diverged (a graph whose components "
                    "repel without bound under a flat prior on Z spreads until it overflows; "
                    "give z_prior a scale, or use repulsion='exact' to see where it went).")
            h = max(spacing, span / (MAX_GRID - 4))
            G = _ladder_size(int(math.ceil(span / h)) + 4)
        self.h, self.G = h, G
        self.flat_index, self.weight = _stencil(Z, lo, h, G)

    def spread(self, charges: torch.Tensor) -> torch.Tensor:
        """charges (C, n) -> grids (C, G, G)."""
        C = charges.shape[0]
        vals = (charges[:, :, None] * self.weight[None]).reshape(C, -1)
        grid = torch.zeros(C, self.G * self.G, dtype=charges.dtype, device=charges.device)
        grid.index_add_(1, self.flat_index, vals)
        return grid.view(C, self.G, self.G)

    def gather(self, grids: torch.Tensor) -> torch.Tensor:
        """grids (C, G, G) -> values at the points (C, n): the grids transposed to (G^2, C), so
        that each of a point's 16 nodes is one gathered row of C values. On a CPU, the product
        of the (n, G^2) interpolation matrix (CSR, 16 weights per row) with these rows: one
        multithreaded pass, the same sums as gathering (n, 16, C) and contracting with the
        weights, a third of the time at a million points."""
        C = grids.shape[0]
        rows = grids.permute(1, 2, 0).reshape(-1, C)  # one copy of the (C, G, G) corner view
        n = self.weight.shape[0]
        if rows.device.type == "cpu" and n:
            with warnings.catch_warnings():  # torch: "Sparse CSR tensor support is in beta"
                warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support")
                S = torch.sparse_csr_tensor(
                    torch.arange(0, 16 * n + 1, 16, device=rows.device), self.flat_index,
                    self.weight.reshape(-1), size=(n, rows.shape[0]), check_invariants=False)
                return (S @ rows).t()
        vals = rows.index_select(0, self.flat_index).view(-1, 16, C)
        return torch.bmm(self.weight[:, None, :], vals).view(-1, C).t()

    def kernel_fft(self, log_kernel_of_d2, dtype, key=None, log: bool = True) -> torch.Tensor:
        """FFT of the kernel sampled on the (2G, 2G) circular grid of node offsets (cached by
        ``key``, grid size and spacing); the function gives the kernel's log, or (``log=False``)
        its values (a signed kernel: a derivative in a kernel parameter)."""
        G = self.G  # a spacing on the device (fixed grids) changes every step: no cache
        ck = (key, G, self.h, dtype) if key is not None and isinstance(self.h, float) else None
        if ck is not None and ck in _KERNEL_FFT_CACHE:
            return _KERNEL_FFT_CACHE[ck]
        while len(_KERNEL_FFT_CACHE) >= _CACHE_ENTRIES:  # drop the oldest
            _KERNEL_FFT_CACHE.pop(next(iter(_KERNEL_FFT_CACHE)))
        k = torch.arange(2 * G, dtype=dtype)
        k = torch.where(k < G, k, k - 2 * G) * self.h
        d2 = k[:, None] ** 2 + k[None, :] ** 2
        values = log_kernel_of_d2(d2)
        out = torch.fft.rfft2(torch.exp(values) if log else values, s=(2 * G, 2 * G))
        if ck is not None:
            _KERNEL_FFT_CACHE[ck] = out
        return out

    def convolve(self, grids: torch.Tensor, kernels_fft: torch.Tensor) -> torch.Tensor:
        """Circular convolution on the zero-padded (2G, 2G) grid; returns (C, G, G)."""
        G = self.G
        with _fft_threads(G):
            F = torch.fft.rfft2(grids, s=(2 * G, 2 * G))
            with one_thread():  # complex products: see _fft_threads
                F = F * kernels_fft
            out = torch.fft.irfft2(F, s=(2 * G, 2 * G))
        return out[..., :G, :G]


def _fft_threads(G: int):
    """The threads of the transforms of a (2G, 2G) padded grid: one on small CPU grids
    (:data:`ONE_THREAD_GRID`), torch's otherwise. The complex products of the spectra run on one
    thread at every size: torch's vectorised complex product rounds differently from its scalar
    loop, which takes the last elements of each thread's chunk, so on several threads the
    chunk edges (a function of the thread count) change the last bits."""
    return one_thread() if G <= ONE_THREAD_GRID else nullcontext()


def _potential_grids(grid: Grid2D, Z: torch.Tensor, c: torch.Tensor, reduce=None,
                     spectra=None, sums: bool = False):
    r"""The potential grids of charges at ``Z`` (n, 2) spread on ``grid``, for a kernel
    :math:`k` with :math:`\kappa = -\partial k / \partial d^2`: :math:`\sum_j k_j`,
    :math:`\sum_j \kappa_j (1, z_j^x - c^x, z_j^y - c^y)` and, for each learnable number
    :math:`\theta` of the kernel, :math:`\sum_j \partial_\theta k_j` -- ``(4 + P, G, G)``.
    ``spectra`` (:func:`kernel_spectra`) gives the kernels' transforms; ``None``: the Cauchy
    kernel :math:`w = 1/(1 + d^2)`, :math:`\kappa = w^2`. Centring the charges on ``c`` keeps
    float32 accurate (potentials are translation-covariant). One forward transform of the three
    charge grids, one batched inverse of the products. ``reduce`` (in place) combines the charge
    grids of several processes (an all-reduce).

    ``sums``: the potentials of :math:`k` and of the :math:`\partial_\theta k` are wanted only
    summed over the points (a normaliser and its derivatives): returns the three
    :math:`\kappa` grids and those sums (float64, ``(1 + P,)``), the sums from the spectra by
    Parseval's identity (:func:`_charge_sums`), with no inverse transform of their own."""
    n = Z.shape[0]
    charges = torch.stack([torch.ones(n, dtype=Z.dtype, device=Z.device), Z[:, 0] - c[0],
                           Z[:, 1] - c[1]])
    g = grid.spread(charges)
    if reduce is not None:
        reduce(g)
    if spectra is None:
        kw = grid.kernel_fft(lambda d2: -torch.log1p(d2), Z.dtype, key="cauchy")
        kw2 = grid.kernel_fft(lambda d2: -2.0 * torch.log1p(d2), Z.dtype, key="cauchy2")
        kth = ()
    else:
        kw, kw2, kth = spectra
    G = grid.G
    with _fft_threads(G):
        F = _padded_transform(g, G)
        if sums:
            with one_thread():  # complex products: see _fft_threads
                prods = F * kw2
            return _corner_inverse(prods, G), _charge_sums(F[0], (kw, *kth), G)
        with one_thread():
            prods = torch.cat([F[:1] * kw, F * kw2, *(F[:1] * t for t in kth)])
        return _corner_inverse(prods, G)


def _padded_transform(g: torch.Tensor, G: int) -> torch.Tensor:
    """The spectra (C, 2G, G + 1) of grids (C, G, G) zero-padded to (2G, 2G): the real transform
    of the G non-zero rows, then the columns' (the numbers of ``rfft2(g, s=(2G, 2G))``, without
    transforming G rows of zeros)."""
    return torch.fft.fft(torch.fft.rfft(g, n=2 * G, dim=-1), n=2 * G, dim=-2)


def _corner_inverse(prods: torch.Tensor, G: int) -> torch.Tensor:
    """The (C, G, G) corner of the inverse of spectra (C, 2G, G + 1): the columns' inverse,
    then the real inverse of the G rows kept (the numbers of ``irfft2(...)[..., :G, :G]``,
    without the G rows that are cut)."""
    rows = torch.fft.ifft(prods, dim=-2)[..., :G, :]
    return torch.fft.irfft(rows, n=2 * G, dim=-1)[..., :G]


def _charge_sums(F: torch.Tensor, kernels, G: int) -> torch.Tensor:
    r""":math:`\sum_x g(x)\,(K * g)(x)` for each kernel K (spectrum ``kernels``, real: an even
    kernel) of the charge grid g whose padded spectrum is ``F`` (2G, G + 1), by Parseval's
    identity, :math:`(2G)^{-2} \sum_k |\hat g_k|^2 \hat K_k` over the whole spectrum (the
    half-spectrum's inner columns twice): the sum over the points of the potential that
    :func:`_corner_inverse` and :meth:`Grid2D.gather` would give, the gather's weights being
    the spread's. Summed in float64."""
    power = torch.view_as_real(F).square().sum(-1)  # |F|^2, contiguous
    return torch.stack([fixed_sum(power * _half_spectrum_weights(k, G), dtype=torch.float64)
                        for k in kernels])


def _half_spectrum_weights(k: torch.Tensor, G: int) -> torch.Tensor:
    """The real part of a kernel's half spectrum (2G, G + 1), its inner columns doubled and the
    whole divided by (2G)^2 (:func:`_charge_sums`), kept on the spectrum tensor (the kernels'
    spectra are cached between steps)."""
    def weights():
        w = k.real.contiguous() / float(4 * G * G)
        w[:, 1:G].mul_(2.0)
        return w
    return tensor_cache(k, "_probdr_parseval", weights)


def kernel_spectra(grid: Grid2D, kernel, dtype):
    r"""The transforms of :math:`k`, :math:`-\partial k/\partial d^2` and of
    :math:`\partial_\theta k` for each learnable number of ``kernel`` on ``grid``, and the
    self terms (their values at :math:`d = 0`) as ``(spectra, self_terms)``; ``(None, (1.0,))``
    for the fixed Cauchy kernel or ``kernel=None`` (closed forms, cached). A kernel whose
    numbers take no gradient has its spectra cached by their values (a learned number held
    between its steps too); one that takes a gradient does not."""
    if kernel is None or kernel.is_cauchy:
        return None, (1.0,)
    key = repr(kernel.fixed()) if not kernel.learnable() else None
    zero = torch.zeros(1, dtype=dtype)
    k0 = float(torch.exp(kernel.log_k(zero)).detach())
    self_terms = (k0, *(k0 * float(t) for t in kernel.dlog_k_dparams(zero)))
    kw = grid.kernel_fft(kernel.log_k, dtype, key=None if key is None else ("k", key))
    kw2 = grid.kernel_fft(lambda d2: kernel.log_k(d2) + torch.log(-kernel.dlog_k(d2)), dtype,
                          key=None if key is None else ("dk", key))
    kth = tuple(grid.kernel_fft(lambda d2, i=i: torch.exp(kernel.log_k(d2))
                                * kernel.dlog_k_dparams(d2)[i], dtype, log=False)
                for i in range(len(kernel.learnable())))
    return (kw, kw2, kth), self_terms


def _cauchy_grids(grid: Grid2D, Z: torch.Tensor, c: torch.Tensor, reduce=None) -> torch.Tensor:
    """The four Cauchy potential grids (:func:`_potential_grids` of the Cauchy kernel)."""
    return _potential_grids(grid, Z, c, reduce)


def _total_forward(Z, kernel, spacing, rows, reduce, pdtypes=()):
    r"""The FFT-interpolated :math:`\log S` (in Z's dtype) and the state of its gradient."""
    Zd = Z.detach()
    fixed = config.sync_free_for(Zd.device)
    if rows is None:
        grid, Zb = Grid2D(Zd, spacing, fixed=fixed), Zd
    else:  # a rank's block of points on the grid of all points
        lo = Zd.min(0).values
        grid = Grid2D(Zd[rows[0]:rows[1]], spacing,
                      box=(lo, (Zd.max(0).values - lo).max()), fixed=fixed)
        Zb = Zd[rows[0]:rows[1]]
    c = Zd.mean(0)
    spectra, self_terms = kernel_spectra(grid, kernel, Zd.dtype)
    if reduce is None:  # the kernel's potentials only summed: by Parseval's identity
        grids, sums = _potential_grids(grid, Zb, c, None, spectra, sums=True)
        pots, m = grid.gather(grids), Zb.shape[0]  # (3, block)
        S = (sums[0] - m * self_terms[0]).clamp_min(1e-300)
        dS = [sums[1 + i] - m * t for i, t in enumerate(self_terms[1:])]
        A, B = pots[0], pots[1:3].T
    else:
        pots = grid.gather(_potential_grids(grid, Zb, c, reduce, spectra))  # (4 + P, block)
        S = (pots[0] - self_terms[0]).sum(dtype=torch.float64).clamp_min(1e-300)
        dS = [(pots[4 + i] - t).sum(dtype=torch.float64) for i, t in enumerate(self_terms[1:])]
        A, B = pots[1], pots[2:4].T
    # sum_j kappa_ij (z_i - z_j) = A_i (z_i - c) - B_i; the self terms cancel
    state = dict(saved=(Zb - c, A, B, S, *dS), dtype=Z.dtype, rows=rows, n=Z.shape[0],
                 pdtypes=list(pdtypes))
    return torch.log(S).to(Z.dtype), state


def _total_backward(state, g):
    r"""The gradients on Z and on the kernel's learnable numbers of ``g`` times :math:`\log S`."""
    Zd, A, B, S, *dS = state["saved"]
    grad = (A[:, None] * Zd - B).mul_(-4.0 * g / S.to(Zd.dtype))
    rows = state["rows"]
    if rows is not None:  # the block's rows of the full sum's gradient (see below)
        full = grad.new_zeros(state["n"], 2)
        full[rows[0]:rows[1]] = grad
        grad = full
    pgrads = tuple((d / S * g.to(torch.float64)).to(t)
                   for d, t in zip(dS, state["pdtypes"], strict=False))
    return grad.to(state["dtype"]), pgrads


class _KernelLogTotalFFT(torch.autograd.Function):
    @staticmethod
    def forward(ctx, Z, kernel, spacing, rows, reduce, *params):
        out, state = _total_forward(Z, kernel, spacing, rows, reduce, [p.dtype for p in params])
        ctx.save_for_backward(*state.pop("saved"))
        ctx.state = state
        return out

    @staticmethod
    def backward(ctx, g):
        grad, pgrads = _total_backward(dict(ctx.state, saved=ctx.saved_tensors), g)
        return (grad, None, None, None, None, *pgrads)


def _check_2d(Z, kernel) -> None:
    if Z.ndim != 2 or Z.shape[1] != 2:
        raise ValueError("the FFT normaliser is implemented for 2-D embeddings only.")
    if not kernel.has_fft:
        raise ValueError("the FFT normaliser covers the Student kernels (t-SNE's family); use "
                         "repulsion='sampled' or 'exact' for other kernels.")


def _kernel_spacing(kernel, spacing: float | None) -> float:
    """The grid spacing of :func:`kernel_log_total` for this kernel."""
    h = GRID_SPACING if spacing is None else spacing
    if not kernel.is_cauchy:
        fixed = kernel.fixed()
        h = h * min(1.0, math.sqrt(2.0 * fixed.dof * fixed.scale ** 2 / (fixed.dof + 1.0)))
    return h


def kernel_log_total(Z: torch.Tensor, kernel, spacing: float | None = None, *,
                     rows: tuple[int, int] | None = None, reduce=None) -> torch.Tensor:
    r"""FFT-interpolated :math:`\log \sum_{i \ne j} k(\|z_i - z_j\|^2)` for 2-D ``Z`` and a
    Student kernel (any ``dof`` and ``scale``, fixed or learned), with its gradient in ``Z``
    and in the kernel's learnable numbers (:math:`\partial_\theta \log S = \sum_{i\ne j}
    \partial_\theta k_{ij} / S`, one more potential per number).

    The grid spacing is ``spacing`` (default :data:`GRID_SPACING`) times
    :math:`\min(1, \ell)`, :math:`\ell^2 = 2\nu s^2/(\nu + 1)` the kernel's squared width
    (1 for Cauchy; :math:`\approx 2\nu s^2` for heavy tails, whose kernel bends at
    :math:`d^2 \approx \nu s^2`; :math:`2 s^2` as it nears a Gaussian), so heavier tails and
    smaller scales get a finer grid and about the Cauchy kernel's accuracy. Data-parallel (``rows``, ``reduce``): as :func:`cauchy_log_total`."""
    _check_2d(Z, kernel)
    return _KernelLogTotalFFT.apply(Z, kernel, _kernel_spacing(kernel, spacing), rows, reduce,
                                    *kernel.learnable())


def kernel_log_total_value_and_grad(Z: torch.Tensor, kernel, g: torch.Tensor):
    r""":func:`kernel_log_total` (a fixed kernel, all the points) and ``g`` times its gradient
    on Z, by the same formulas without autograd (the fused MAP step,
    :mod:`probdr._compute.fused`)."""
    _check_2d(Z, kernel)
    out, state = _total_forward(Z, kernel, _kernel_spacing(kernel, None), None, None)
    return out, _total_backward(state, g)[0]


def cauchy_log_total(Z: torch.Tensor, spacing: float | None = None, *,
                     rows: tuple[int, int] | None = None, reduce=None) -> torch.Tensor:
    r"""FFT-interpolated :math:`\log \sum_{i \ne j} 1/(1 + \|z_i - z_j\|^2)` for 2-D ``Z``.

    Data-parallel (``rows``, a rank's block of points, and ``reduce``, an in-place all-reduce):
    each rank spreads its block's charges, the grids are summed over ranks by ``reduce``, and
    the result is the log of the block's partial sum :math:`S_r = \sum_{i \in r} \sum_{j \ne i}
    w_{ij}`; its backward gives the block's rows of the gradient of the full sum, scaled by
    :math:`g / S_r` -- the full gradient once the partial sums are combined by an all-reduce
    (:meth:`probdr._compute.distributed.Shard.logsumexp`) and the ranks' gradients summed."""
    if Z.ndim != 2 or Z.shape[1] != 2:
        raise ValueError("the FFT normaliser is implemented for 2-D embeddings only.")
    return _KernelLogTotalFFT.apply(Z, None, GRID_SPACING if spacing is None else spacing,
                                    rows, reduce)


def box_grid(corners: torch.Tensor, Z: torch.Tensor, spacing: float):
    """The grid of the box ``corners`` (2, 2) (lower and upper corner), with the stencils of
    the points ``Z`` on it, and ``(lower corner, spacing, side)``: a field of ``Z`` computed
    once on it is then read at any point of the box (:func:`read_grid`)."""
    grid = Grid2D(torch.cat([corners, Z]), spacing)  # the box's grid, on the corners and Z
    grid.flat_index, grid.weight = grid.flat_index[32:], grid.weight[2:]
    return grid, (corners[0], grid.h, grid.G)


def read_grid(grids: torch.Tensor, Z: torch.Tensor, lo, h, G: int) -> torch.Tensor:
    """Node grids (C, G, G) of the grid with lower corner ``lo``, spacing ``h`` and side ``G``
    (:func:`box_grid`) read at the points ``Z`` (m, 2), which lie at least two spacings inside:
    ``(C, m)``."""
    grid = Grid2D.__new__(Grid2D)
    grid.G, grid.h = G, h
    grid.flat_index, grid.weight = _stencil(Z, lo, h, G, clamp=False)
    return grid.gather(grids)


class CauchyField:
    r"""The field :math:`S(z) = \sum_j (1 + \|z - z_j\|^2)^{-1}` of fixed 2-D reference points
    :math:`z_j`, and its gradient, interpolated from a grid computed once (one FFT): new points
    placed against a fitted embedding (``transform``) then cost :math:`O(m)` per step instead of
    :math:`O(mn)`. The grid covers the references' box with a margin; points outside it are
    summed exactly. :meth:`log_sum` is differentiable (its gradient is the interpolated
    :math:`\nabla \log S = -2 \sum_j w_j^2 (z - z_j) / S`, as :func:`cauchy_log_total`)."""

    def __init__(self, Z_ref: torch.Tensor, spacing: float = 1 / 3, margin: float = 0.25):
        Zr = Z_ref.detach()
        lo, hi = Zr.min(0).values, Zr.max(0).values
        pad = margin * float((hi - lo).max()) + 5.0
        ref, (self.lo, self.h, self.G) = box_grid(torch.stack([lo - pad, hi + pad]), Zr, spacing)
        self.Z_ref = Zr
        self.c = Zr.mean(0)
        self.grids = _cauchy_grids(ref, Zr, self.c).contiguous()
        self._by_dtype = {self.grids.dtype: self.grids}

    def _grids(self, dtype) -> torch.Tensor:
        if dtype not in self._by_dtype:
            self._by_dtype[dtype] = self.grids.to(dtype)
        return self._by_dtype[dtype]

    def _inside(self, Z: torch.Tensor) -> torch.Tensor:
        u = (Z - self.lo.to(Z.dtype)) / self.h
        return ((u >= 2) & (u <= self.G - 3)).all(-1)

    def potentials(self, Z: torch.Tensor) -> torch.Tensor:
        """``(4, m)``: :math:`S`, :math:`\\sum_j w_j^2` and :math:`\\sum_j w_j^2 (z_j - c)` at the
        rows of ``Z`` (m, 2); exact sums for rows outside the grid."""
        Z = Z.detach()
        out = torch.empty(4, Z.shape[0], dtype=Z.dtype)
        inside = self._inside(Z)
        if bool(inside.any()):
            out[:, inside] = read_grid(self._grids(Z.dtype), Z[inside], self.lo.to(Z.dtype),
                                       self.h, self.G)
        if not bool(inside.all()):
            w = (1.0 + torch.cdist(Z[~inside], self.Z_ref.to(Z.dtype)).square()).reciprocal()
            w2 = w * w
            R = self.Z_ref.to(Z.dtype) - self.c.to(Z.dtype)
            out[:, ~inside] = torch.cat([w.sum(1)[None], w2.sum(1)[None], (w2 @ R).T])
        return out

    def log_sum(self, Z: torch.Tensor) -> torch.Tensor:
        """:math:`\\log S(z)` for ``Z`` (..., m, 2), differentiable."""
        return _FieldLogSum.apply(Z, self)


class _FieldLogSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, Z, field):
        flat = Z.detach().reshape(-1, 2)
        pots = field.potentials(flat)
        S = pots[0].clamp_min(1e-300)
        ctx.save_for_backward(flat - field.c.to(flat.dtype), pots[1], pots[2:].T, S)
        ctx.shape = Z.shape
        return torch.log(S).reshape(Z.shape[:-1])

    @staticmethod
    def backward(ctx, g):
        Zc, A, B, S = ctx.saved_tensors
        grad = (A[:, None] * Zc - B) * (-2.0 * g.reshape(-1)[:, None] / S[:, None])
        return grad.reshape(ctx.shape), None
