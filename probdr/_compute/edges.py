r"""Edge sums over an edge list: :math:`\sum_e v_e \log k(\|z_{r_e} - z_{c_e}\|^2)` and the
per-edge :math:`\log k`, with hand-written gradients (:func:`edge_log_kernel_sum`,
:func:`edge_log_kernel`).

Autograd through ``index_select -> pow -> sum -> log_k -> where -> sum`` keeps ten (E, q)
intermediates and scatters twice; here the gradient is written out and the memory traffic, which
is what costs on large edge lists, is cut: the differences :math:`z_r - z_c` are gathered in parts
on torch's threads (a complex vector for 2-D embeddings), the row and column sums of the gradient
are sums over sorted rows (segment sums, or scatters for short rows), and the lists of large
graphs take one fused pass over a locality-ordered layout (:mod:`probdr._compute.edge_layout`).
The parts depend on the list only, so the numbers do not depend on the number of threads.

:func:`values_deferred` lets the steps of a long fit whose loss is not recorded skip the sums'
values (their gradients are the same, number for number). For negative sampling:
:func:`epoch_edges` (the edges a step uses, a Pyro effect that the driver's handler sets) and :func:`bernoulli_log_prob` (the sampled edges'
log-likelihood, its gradient independent of the thread count).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F
from pyro.poutine.runtime import effectful

from .._utils import fixed_sum, one_thread, tensor_cache
from ..config import sync_free_for
from . import edge_layout
from .alloc import buffer

#: the gradient), which torch runs on one core each, are cut into parts of about this many edges
#: and run on torch's threads. The parts depend on the list only: the numbers do not depend on
#: the number of threads.
PART_EDGES = 1 << 24
#: shorter edge lists run those passes on the calling thread (a thread pool costs more than it
#: saves)
THREADED_MIN_EDGES = 1 << 20
#: sorted rows with fewer edges than this per row on average are summed by a scatter, longer
#: ones by ``segment_reduce`` (the same sums in the same order: segment_reduce costs about 10 ns
#: a row, a scatter reads the index too; the crossover is near 28 edges a row at 70,000 rows)
SEGMENT_MIN_MEAN = 24


def _run(tasks, device, m: int) -> None:
    """Run the callables (passes over an edge list of length ``m``), on up to
    ``torch.get_num_threads()`` threads when there are several, the list is long and the device
    is a CPU. Each writes its own buffer, allocated beforehand on the calling thread (a worker's
    large allocations would be fresh pages from its own arena at every step)."""
    threads = min(len(tasks), torch.get_num_threads())
    if threads < 2 or m < THREADED_MIN_EDGES or torch.device(device).type != "cpu":
        for task in tasks:
            task()
        return
    with ThreadPoolExecutor(threads) as pool:
        for job in [pool.submit(task) for task in tasks]:
            job.result()


def _parts(m: int) -> list[tuple[int, int]]:
    """Equal parts of an edge list of length ``m``, about ``PART_EDGES`` each."""
    k = max(1, -(-m // PART_EDGES))
    cuts = [m * i // k for i in range(k + 1)]
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def _gather_diff(z: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, reuse: str = ""):
    """``z[rows] - z[cols]`` for a vector ``z`` (the gathers in parts, on torch's threads);
    ``reuse``: a name, the buffers are the loop's scratch (:func:`probdr._compute.alloc.buffer`)."""
    def new(name):
        if reuse:
            return buffer(reuse + name, (rows.shape[0],), z.dtype, z.device)
        return torch.empty(rows.shape[0], dtype=z.dtype, device=z.device)
    a, b = new("a"), new("b")
    tasks = []
    for s, e in _parts(a.shape[0]):
        tasks += [lambda s=s, e=e: torch.index_select(z, 0, rows[s:e], out=a[s:e]),
                  lambda s=s, e=e: torch.index_select(z, 0, cols[s:e], out=b[s:e])]
    _run(tasks, z.device, a.shape[0])
    return a.sub_(b)


def edge_diffs(Z: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, reuse: bool = False):
    """``(diff, d2)``: the differences :math:`z_r - z_c` (a complex vector for 2-D embeddings,
    one number per point so that each random gather moves both coordinates; else a list of
    per-coordinate vectors) and the squared distances. ``reuse``: in the loop's scratch buffers
    (for a caller done with them when it returns)."""
    q = Z.shape[1]
    d2 = (buffer("edge_d2", (rows.shape[0],), Z.dtype, Z.device) if reuse
          else torch.empty(rows.shape[0], dtype=Z.dtype, device=Z.device))
    if q == 2:
        d = _gather_diff(torch.view_as_complex(Z.contiguous()), rows, cols,
                         "edge_diff_" if reuse else "")
        dr = torch.view_as_real(d)
        torch.mul(dr[:, 0], dr[:, 0], out=d2)
        return [d], d2.addcmul_(dr[:, 1], dr[:, 1])
    Zt = Z.t().contiguous()  # (q, n)
    diff = [_gather_diff(z, rows, cols, f"edge_diff{k}_" if reuse else "")
            for k, z in enumerate(Zt)]
    torch.mul(diff[0], diff[0], out=d2)
    for d in diff[1:]:
        d2.addcmul_(d, d)
    return diff, d2


def _row_parts(rows: torch.Tensor, n: int):
    """For sorted rows: ``[(s, e, r0, r1)]``, the parts of the edge list cut at row starts (edges
    ``s:e`` are those of rows ``r0:r1``), and the row counts; else None (cached)."""
    lengths = _segments(rows, n)
    if lengths is None:
        return None

    def compute():
        starts = torch.zeros(n + 1, dtype=torch.int64, device="cpu")  # host bookkeeping
        torch.cumsum(lengths.cpu(), 0, out=starts[1:])
        m = int(starts[-1])
        cut_rows = [0] + [int(torch.searchsorted(starts, e, side="left")) for _, e in
                          _parts(m)[:-1]] + [n]
        cut_rows = sorted(set(cut_rows))
        return [(int(starts[r0]), int(starts[r1]), r0, r1)
                for r0, r1 in zip(cut_rows[:-1], cut_rows[1:], strict=True)], lengths
    return tensor_cache(rows, f"_probdr_row_parts_{n}", compute)


def _row_and_col_sums(src, rows, cols, n):
    """``(R, C)``: :math:`R_i = \\sum_{e: r_e = i} s_e` and :math:`C_j = \\sum_{e: c_e = j} s_e`.
    Sorted rows (coalesced edge lists) are summed in parts cut at row starts (the numbers of one
    pass), by ``segment_reduce`` or, for short rows, a scatter (:data:`SEGMENT_MIN_MEAN`); the
    column sums (and unsorted rows) by ``index_add_`` in parts, each into its own buffer, added
    in order. The parts run on torch's threads."""
    dev, real = src.device, torch.view_as_real(src) if src.is_complex() else src
    col_parts = _parts(src.shape[0])
    cbuf = buffer("edge_col_sums", (len(col_parts), n), src.dtype, dev).zero_()
    tasks = [lambda k=k, s=s, e=e: _index_add(cbuf[k], cols[s:e], src[s:e])
             for k, (s, e) in enumerate(col_parts)]
    row_parts = _row_parts(rows, n)
    if row_parts is not None:
        parts, lengths = row_parts
        row = torch.zeros(n, dtype=src.dtype, device=dev)
        rreal = torch.view_as_real(row) if src.is_complex() else row

        def seg(s, e, r0, r1):  # the parts write disjoint rows
            if _short_segments(e - s, r1 - r0):
                _index_add(row, rows[s:e], src[s:e])
            else:
                rreal[r0:r1] = torch.segment_reduce(real[s:e], "sum", lengths=lengths[r0:r1],
                                                    axis=0)
        tasks += [lambda p=p: seg(*p) for p in parts]
    else:
        rbuf = buffer("edge_row_sums", (len(col_parts), n), src.dtype, dev).zero_()
        tasks += [lambda k=k, s=s, e=e: _index_add(rbuf[k], rows[s:e], src[s:e])
                  for k, (s, e) in enumerate(col_parts)]
    _run(tasks, dev, src.shape[0])
    col = cbuf[0]
    for k in range(1, len(col_parts)):
        col += cbuf[k]
    if row_parts is None:
        row = rbuf[0].clone()
        for k in range(1, len(col_parts)):
            row += rbuf[k]
    return row, col


def pair_grad(diff, coef, rows, cols, n, clip, inplace=False, own=False):
    r"""Gradient on Z of a loss whose derivative w.r.t. :math:`d^2_e` is ``coef / 2``: pair e adds
    ``coef_e (z_r - z_c)`` (clamped per coordinate at ``clip``) to row r and subtracts it from
    row c. Sorted rows (coalesced edge lists) are reduced with ``segment_reduce`` unless they are
    short (:data:`SEGMENT_MIN_MEAN`). Indices may be int32 or int64.

    ``inplace``: ``diff`` may be overwritten, and the row and column sums are taken in parts on
    torch's threads into their own buffers (:func:`_row_and_col_sums`), the column sums
    subtracted once (no pass negating the edge list; other rounding than the negated scatter).
    ``own``: ``diff`` may be overwritten, the sums are those of ``inplace=False`` (the same
    numbers, no copy of the differences)."""
    lengths = None if inplace or _short_segments(rows.numel(), n) else _segments(rows, n)
    if diff[0].is_complex():  # 2-D
        d = _scale_(diff[0] if inplace or own else diff[0].clone(), coef)
        gr = torch.view_as_real(d)
        if clip is not None:
            gr.clamp_(-clip, clip)
        if inplace:
            row, col = _row_and_col_sums(d, rows, cols, n)
            return torch.view_as_real(row.sub_(col))
        if lengths is not None:
            grad = torch.segment_reduce(gr, "sum", lengths=lengths, axis=0)
        else:
            grad = torch.view_as_real(_index_add(d.new_zeros(n), rows, d))
        _index_add(torch.view_as_complex(grad), cols, d.neg_())
        return grad
    grad = coef.new_zeros(len(diff), n)
    for a, d in enumerate(diff):
        gd = d.mul_(coef) if inplace or own else d * coef
        if clip is not None:
            gd.clamp_(-clip, clip)
        if inplace:
            row, col = _row_and_col_sums(gd, rows, cols, n)
            grad[a] = row.sub_(col)
            continue
        if lengths is not None:
            grad[a] = torch.segment_reduce(gd, "sum", lengths=lengths)
        else:
            _index_add(grad[a], rows, gd)
        _index_add(grad[a], cols, gd.neg_())
    return grad.t()


def _scale_(d: torch.Tensor, coef: torch.Tensor) -> torch.Tensor:
    """``d *= coef`` for a complex ``d`` and a real ``coef``: the real and imaginary parts each
    multiplied by ``coef`` (a third faster than the product broadcast over the (m, 2) real view,
    the same numbers)."""
    dr = torch.view_as_real(d)
    dr[:, 0].mul_(coef)
    dr[:, 1].mul_(coef)
    return d


def _short_segments(m: int, rows: int) -> bool:
    """Whether ``m`` sorted edges over ``rows`` rows are summed faster by a scatter than by
    ``segment_reduce`` (:data:`SEGMENT_MIN_MEAN`)."""
    return m < SEGMENT_MIN_MEAN * rows


def _index_add(out, index, src):
    """``out[index[e]] += src[e]`` in place: ``scatter_add_`` (the faster) for int64 indices,
    ``index_add_`` (the same sums) for int32 ones."""
    if index.dtype == torch.int64:
        return out.scatter_add_(0, index, src)
    return out.index_add_(0, index, src)


_deferred = threading.local()


@contextmanager
def _thread_setting(store: threading.local, name: str, value):
    """Inside, ``store.name`` is ``value`` on this thread (restored after)."""
    outer = getattr(store, name, None)
    setattr(store, name, value)
    try:
        yield
    finally:
        setattr(store, name, outer)


@contextmanager
def values_deferred():
    """Inside, the edge sums (:func:`edge_log_kernel_sum`) compute their gradients only and
    return 0 as their value: for the steps of a long fit whose loss is not recorded (the MAP
    driver's ``loss_every``, :mod:`probdr.config`). The value is a pass of logarithms over the
    edge list; the gradient does not use it and is the same number for number."""
    with _thread_setting(_deferred, "on", True):
        yield


class _EdgeLogKernelSum(torch.autograd.Function):
    """Fused forward/backward of :math:`\\sum_e v_e \\log k(\\|z_{r_e} - z_{c_e}\\|^2)`.

    Autograd through ``index_select -> pow -> sum -> log_k -> where -> sum`` keeps ten (E, q)
    intermediates and scatters twice. Here the gradient is written out,
    :math:`\\partial / \\partial (z_r - z_c) = 2 v_e \\, \\partial_{d^2}\\log k \\, (z_r - z_c)`
    (optionally clamped per coordinate, umap-learn's clip), and the memory traffic, which is what
    costs on large edge lists, is cut (see :func:`edge_diffs`, :func:`pair_grad`).
    """

    @staticmethod
    def forward(ctx, Z, rows, cols, v, kernel, clip, *params):
        positive = all_positive(v)
        ctx.kernel, ctx.clip, ctx.n, ctx.positive = kernel, clip, Z.shape[0], positive
        ctx.early = clip is None and ctx.needs_input_grad[0]
        ctx.learn = any(ctx.needs_input_grad[6:])
        value = not (getattr(_deferred, "on", False) and ctx.needs_input_grad[0])
        if ctx.early:
            # the gradient is linear in the incoming g without a clip: computed here, only the
            # (n, q) gradient is kept (not the edge-list intermediates, gigabytes at scale)
            fused = None
            if edge_layout.use_for(Z, rows.shape[0], kernel):  # large lists: one fused pass
                fused = edge_layout.value_and_grad(Z.detach(), rows, cols, v, kernel, value)
            out, grad, pgrads = (*fused, ()) if fused is not None else \
                edges_value_and_grad(Z.detach(), rows, cols, v.to(Z.dtype), ctx, value)
            ctx.save_for_backward(grad, *pgrads)
            return out
        diff, d2 = edge_diffs(Z.detach(), rows, cols)
        vv = v.to(d2.dtype)
        out = edge_value(kernel, d2, vv, positive) if value else d2.new_zeros(())
        ctx.save_for_backward(rows, cols, vv, d2, *diff)
        return out

    @staticmethod
    def backward(ctx, g):
        if ctx.early:
            grad, *pgrads = ctx.saved_tensors
            return (grad * g.to(grad.dtype), None, None, None, None, None,
                    *_scaled(pgrads, g, ctx.kernel))
        rows, cols, vv, d2, *diff = ctx.saved_tensors
        pgrads = _param_grads(ctx, d2, vv)  # before the gradient overwrites d2
        grad = edge_sum_grad(diff, d2, vv, rows, cols, ctx, 2.0 * g.to(d2.dtype), False)
        return (grad, None, None, None, None, None, *_scaled(pgrads, g, ctx.kernel))


def _param_grads(ctx, d2, vv) -> tuple:
    r""":math:`\sum_e v_e\,\partial_\theta \log k(d^2_e)` for the kernel's learnable numbers
    (terms with :math:`v_e \le 0` dropped); ``()`` when none is learned."""
    if not ctx.learn:
        return ()
    w = vv if ctx.positive else torch.where(vv > 0, vv, vv.new_zeros(()))
    return ctx.kernel.param_grads(d2, w)


def _scaled(pgrads, g, kernel) -> tuple:
    """The parameters' gradients times the incoming ``g`` (``None`` for each when not learned)."""
    if not pgrads:
        return (None,) * len(kernel.learnable())
    return tuple(p * g.to(p.dtype) for p in pgrads)


def edge_value(kernel, d2, vv, positive):
    """:math:`\\sum_e v_e \\log k(d^2_e)`, terms with :math:`v_e \\le 0` dropped."""
    lw, s = kernel.log_k_factored(d2)
    if positive:  # a summation, not a dot: torch's dot loses digits over millions of terms
        return fixed_sum(lw.mul_(vv)) * s
    return fixed_sum(torch.where(vv > 0, vv * lw, lw.new_zeros(()))) * s


def edges_value_and_grad(Z, rows, cols, vv, ctx, value=True):
    """The edge sum (0 unless ``value``), its gradient on Z (the intermediates overwritten as
    they go) and on the kernel's learnable numbers."""
    diff, d2 = edge_diffs(Z, rows, cols, reuse=True)
    out = edge_value(ctx.kernel, d2, vv, ctx.positive) if value else d2.new_zeros(())
    pgrads = _param_grads(ctx, d2, vv)
    return out, edge_sum_grad(diff, d2, vv, rows, cols, ctx, 2.0, True), pgrads


def edge_sum_grad(diff, d2, vv, rows, cols, ctx, factor, inplace):
    r"""The gradient of :math:`\sum_e v_e \log k(d^2_e)` times ``factor`` (overwrites ``d2``, and
    ``diff`` if ``inplace``). The kernel's number ``s`` (:meth:`Kernel.weighted_dlog_k_`) scales
    the (n, q) gradient, or, under a per-pair clip, the pairs."""
    coef, s = ctx.kernel.weighted_dlog_k_(d2, vv)
    if not ctx.positive:
        coef = torch.where(vv > 0, coef, d2.new_zeros(()))
    if ctx.clip is not None:
        return pair_grad(diff, coef.mul_(s * factor), rows, cols, ctx.n, ctx.clip, inplace)
    return pair_grad(diff, coef, rows, cols, ctx.n, None, inplace).mul_(s * factor)


class _EdgeLogKernel(torch.autograd.Function):
    """Per-edge :math:`\\log k(\\|z_{r_e} - z_{c_e}\\|^2)` with the same hand-written gradient
    (negative sampling, Monte Carlo normalisers)."""

    @staticmethod
    def forward(ctx, Z, rows, cols, kernel, clip, *params):
        diff, d2 = edge_diffs(Z.detach(), rows, cols)
        ctx.save_for_backward(rows, cols, d2, *diff)
        ctx.kernel, ctx.clip, ctx.n = kernel, clip, Z.shape[0]
        ctx.learn = any(ctx.needs_input_grad[5:])
        return kernel.log_k(d2)

    @staticmethod
    def backward(ctx, g):
        rows, cols, d2, *diff = ctx.saved_tensors
        gd = g.to(d2.dtype)
        pgrads = ctx.kernel.param_grads(d2, gd) if ctx.learn else ()
        coef = ctx.kernel.dlog_k(d2).mul_(gd).mul_(2.0)
        return (pair_grad(diff, coef, rows, cols, ctx.n, ctx.clip), None, None, None, None,
                *(pgrads or (None,) * len(ctx.kernel.learnable())))


def edge_log_kernel(Z, rows, cols, kernel, clip=None):
    r"""Per-edge :math:`\log k(\|z_{r_e} - z_{c_e}\|^2)` with a hand-written gradient (in Z and
    in the kernel's learnable numbers); ``clip`` clamps each pair's gradient per coordinate."""
    return _EdgeLogKernel.apply(Z, rows, cols, kernel, clip, *kernel.learnable())


def all_positive(v: torch.Tensor) -> bool:
    """Whether every edge value is positive (cached on the value tensor)."""
    return tensor_cache(v, "_probdr_positive", lambda: bool((v > 0).all()))


def _segments(rows: torch.Tensor, n: int):
    """Row counts when ``rows`` is sorted (then scatters become segment sums), else None; cached
    on the index tensor. None off the CPU in sync-free mode: on CUDA ``segment_reduce`` reads
    its lengths on the host at each call (measured on an H200), ``index_add_`` does not."""
    if rows.device.type != "cpu" and sync_free_for(rows.device):
        return None

    def compute():
        ok = rows.numel() > 0 and bool((rows[1:] >= rows[:-1]).all())
        return torch.bincount(rows, minlength=n) if ok else None
    return tensor_cache(rows, f"_probdr_segments_{n}", compute)


def edge_log_kernel_sum(Z, rows, cols, v, kernel, clip=None):
    r""":math:`\sum_e v_e \log k(\|z_{r_e} - z_{c_e}\|^2)` with a hand-written gradient; terms with
    :math:`v_e \le 0` are dropped; ``clip`` clamps each pair's gradient per coordinate. The
    kernel's learnable numbers (:meth:`probdr.kernels.Kernel.learnable`) get their gradient too."""
    return _EdgeLogKernelSum.apply(Z, rows, cols, v, kernel, clip, *kernel.learnable())


# --------------------------------------------------------------------------------------------
# sampled edges (negative sampling)
# --------------------------------------------------------------------------------------------
def _no_pair_grad_clip():
    return None


#: The clip of each pair's gradient that the optimiser wants, asked where latent weights are
#: made (:class:`probdr.laws.weights.KernelWeights`): a Pyro effect, ``None`` unless a handler
#: of the driver's answers it (:class:`probdr.infer.schedule.OptimiserHooks`). umap-learn's
#: heuristic belongs to the optimiser, not to the model, which never names it.
optimiser_pair_grad_clip = effectful(_no_pair_grad_clip, type="pair_grad_clip")


class EpochSchedule:
    r"""Which edges each optimiser step of a negative-sampling fit uses (umap-learn's scheme,
    an epoch cut into ``steps`` optimiser steps).

    At the start of each epoch one uniform number :math:`u_e` per edge gives its slot
    :math:`\lfloor u_e\, \mathrm{steps}\, v_{\max} / v_e \rfloor`; step ``s`` of the
    epoch uses the edges of slot ``s`` and slots ``>= steps`` are not used this epoch. So a step
    uses edge e with probability :math:`v_e / (v_{\max}\, \mathrm{steps})`, the law of an
    independent draw per step, but an edge acts at most once per epoch (as in umap-learn, whose
    edges act at fixed intervals), and the epoch costs one uniform number per edge, a step one
    comparison of small integer keys, not a draw over all edges at every step.

    The step ``index`` comes from the MAP driver (:func:`epoch_edges`): step ``i`` is slot
    ``i % steps`` of epoch ``i // steps``, so a fit stopped in an epoch and continued
    (``optimize``) takes the edges it would have taken. Outside a fit's steps (``index`` None: a
    model traced on its own, a guide's setup), and with one step per epoch, each call is an
    independent draw of the same law, which leaves the epoch's draw alone."""

    def __init__(self, v: torch.Tensor, vmax: float, steps: int, generator=None):
        self.v, self.vmax, self.steps, self.generator = v, float(vmax), int(steps), generator
        self.epoch = self.slots = self.order = None
        self.bounds: list[int] = []
        #: the systematic sample's running sum of v / vmax, picks per epoch, and the epoch's
        #: positions and use flags per step (:meth:`systematic`)
        self.cumulative = self.positions = self.used = None
        self.picks = 0

    @classmethod
    def of(cls, v: torch.Tensor, vmax: float, steps: int, generator=None) -> EpochSchedule:
        """The schedule of the edge values ``v`` (kept on the tensor, one per ``steps``), drawing
        from ``generator``, the caller's stream at this call (a fit continued by ``optimize``
        draws from its own, not the first fit's)."""
        schedule = tensor_cache(v, f"_probdr_epoch_schedule_{int(steps)}",
                                lambda: cls(v, vmax, steps, generator))
        schedule.generator = generator
        return schedule

    def _uniform(self, generator=None) -> torch.Tensor:
        v = self.v
        return torch.rand(v.shape, dtype=v.dtype, device=v.device,
                          generator=self.generator if generator is None else generator)

    def _draw_epoch(self, epoch: int) -> None:
        steps = self.steps
        slot = self._uniform().mul_(self.vmax * steps).div_(self.v)
        slot = slot.floor_().nan_to_num_(steps).clamp_(0, steps)
        self.slots = slot.to(torch.uint8 if steps < 255 else torch.int32)
        self.epoch, self.order = epoch, None

    def _positions(self, s: int) -> torch.Tensor:
        """The positions of slot ``s``'s edges, ascending (rows stay sorted). On the CPU with
        byte slots, the epoch's positions sorted by slot once (numpy's stable sort of bytes, a
        radix sort), each step's a slice of them: about a third of the cost of a comparison and
        a ``nonzero`` at every step, the same positions. Elsewhere, that comparison."""
        slots = self.slots
        if slots.device.type != "cpu" or slots.dtype != torch.uint8 or self.steps == 1:
            return _flat_nonzero(slots == s)
        if self.order is None:
            keys = slots.numpy()
            counts = np.bincount(keys, minlength=self.steps + 1)
            self.order = torch.from_numpy(np.argsort(keys, kind="stable"))
            self.bounds = np.concatenate([[0], np.cumsum(counts)]).tolist()
        return self.order[self.bounds[s]:self.bounds[s + 1]]

    def next(self, index: int | None = None, as_mask: bool = False,
             generator=None) -> torch.Tensor:
        """The edges of step ``index`` (``None``: an independent draw): their positions,
        ascending, or (``as_mask``) a boolean per edge (fixed shapes, no host
        synchronisation). An independent draw takes ``generator``, the caller's (the schedule
        is shared by the chains of a posterior, which may run on threads), else the
        schedule's."""
        if index is None or self.steps == 1:  # an independent draw
            used = self._uniform(generator).mul_(self.vmax * self.steps) < self.v
            return used if as_mask else _flat_nonzero(used)
        epoch, s = divmod(int(index), self.steps)
        if epoch != self.epoch:
            self._draw_epoch(epoch)
        return self.slots == s if as_mask else self._positions(s)

    def systematic(self, index: int, rows: torch.Tensor, cols: torch.Tensor):
        r"""The edges of step ``index`` at a shape fixed for the whole fit (sync-free mode), the
        epoch's used edges only. At the start of an epoch, systematic sampling with
        probabilities :math:`p_e = v_e / v_{\max}` (Madow 1949): one uniform :math:`u`, and
        edge e is used if an integer :math:`k` has :math:`C_{e-1} \le u + k < C_e`, with
        :math:`C` the running sum of :math:`p`. So edge e is used with probability
        :math:`p_e` (at most once, as :meth:`next`'s), and an epoch uses
        :math:`\lfloor P\rfloor` or :math:`\lceil P\rceil` edges, :math:`P = \sum_e p_e`,
        found by a binary search at a shape known from the first epoch (one host read of
        :math:`P`, when the schedule is made): no work on unused edges, no shape from the
        draw. The used edges are dealt to the epoch's steps in a random order (each in one step
        drawn at random, as :meth:`next`'s slots do), each step sorted by position (rows stay
        sorted). Returns ``(rows, cols, used)`` of :math:`\lceil (\lfloor P\rfloor + 1) /
        \mathrm{steps}\rceil` edges, ``used`` false on the padding."""
        epoch, s = divmod(int(index), self.steps)
        if epoch != self.epoch:
            self._deal_epoch(epoch)
        at = self.positions[s]
        return rows.index_select(0, at), cols.index_select(0, at), self.used[s]

    def _deal_epoch(self, epoch: int) -> None:
        """Draw the epoch's systematic sample and deal it to its steps (:meth:`systematic`)."""
        if self.cumulative is None:
            self.cumulative = (self.v.double() / self.vmax).cumsum(0)
            self.picks = int(float(self.cumulative[-1])) + 1  # the one host read
        v, c, picks, steps = self.v, self.cumulative, self.picks, self.steps
        u = torch.rand((), dtype=c.dtype, device=c.device, generator=self.generator)
        t = torch.arange(picks, dtype=c.dtype, device=c.device).add_(u)
        at = torch.searchsorted(c, t, right=True).clamp_max_(v.numel() - 1)
        used = t < c[-1]
        order = torch.randperm(picks, device=c.device, generator=self.generator)
        per = -(-picks // steps)
        pad = per * steps - picks
        at = torch.cat([at.index_select(0, order), at.new_zeros(pad)]).view(steps, per)
        used = torch.cat([used.index_select(0, order), used.new_zeros(pad)]).view(steps, per)
        at, sort = at.sort(dim=1)
        self.positions, self.used = at, used.gather(1, sort)
        self.epoch, self.slots, self.order = epoch, None, None


def _flat_nonzero(mask: torch.Tensor) -> torch.Tensor:
    """The positions of a boolean vector's true entries, ascending (int64): ``nonzero``; on the
    CPU numpy's ``flatnonzero`` (the same positions, at about half the cost)."""
    if mask.device.type == "cpu":
        return torch.from_numpy(np.flatnonzero(mask.numpy()))
    return mask.nonzero().squeeze(1)


def scheduled_edges(v, vmax, rows, cols, n: int, m: int, steps: int, generator=None,
                    index: int | None = None):
    """The edges that step ``index`` (``None``: an independent draw) of an epoch of ``steps``
    steps uses (:class:`EpochSchedule`), and the rows of ``m`` negative samples for each, as
    ``(rows, cols, neg_rows, mask, neg_mask)``.

    Selected by index: the masks are ``None``, and the rows (edge lists are sorted by row) and
    the negatives' rows are sorted (segment sums in the backward; their row counts are set
    here, not found at every step). On a device in sync-free mode
    (:func:`probdr.config.sync_free_for`), fixed shapes instead: in a fit's steps the epoch's
    used edges, a systematic sample dealt to its steps (:meth:`EpochSchedule.systematic`), else
    (an independent draw) every edge; the masks (a boolean per edge and per negative) leave the
    unused edges (the padding) and their negatives out."""
    schedule = EpochSchedule.of(v, vmax, steps, generator)
    if sync_free_for(v.device):
        if index is not None:  # the epoch's used edges, dealt to its steps, at fixed shapes
            rows, cols, used = schedule.systematic(index, rows, cols)
            return rows, cols, rows.repeat_interleave(m), used, used.repeat_interleave(m)
        used = schedule.next(index, as_mask=True, generator=generator)
        neg_rows = tensor_cache(rows, f"_probdr_ns_neg_rows_{m}", lambda: rows.repeat_interleave(m))
        return rows, cols, neg_rows, used, used.repeat_interleave(m)
    sorted_rows = _segments(rows, n) is not None  # then so are the rows of any selection
    used = schedule.next(index, generator=generator)
    rows, cols = rows.index_select(0, used), cols.index_select(0, used)
    neg_rows = rows.repeat_interleave(m)
    # the row counts, known without checking the order, where segment sums would use them
    if sorted_rows and rows.numel() and not _short_segments(neg_rows.numel(), n):
        lengths = torch.bincount(rows, minlength=n)
        tensor_cache(rows, f"_probdr_segments_{n}", lambda: lengths)
        tensor_cache(neg_rows, f"_probdr_segments_{n}", lambda: lengths * m)
    return rows, cols, neg_rows, None, None


def _epoch_edges(v, vmax, rows, cols, n: int, m: int, generator=None, *, steps: int = 1,
                 index: int | None = None, whole_epoch: bool = False):
    """:func:`scheduled_edges` and the weight of the step's edges: ``(rows, cols, neg_rows,
    mask, neg_mask, weight)``, the weight ``vmax``, or ``vmax * steps`` with ``whole_epoch``
    (each step's log-likelihood then estimates the whole epoch's, not its ``1 / steps``
    share)."""
    edges = scheduled_edges(v, vmax, rows, cols, n, m, steps, generator, index)
    return (*edges, vmax * steps if whole_epoch else vmax)


#: The edges of a negative-sampling step, as a Pyro effect: by default (a model run on its own)
#: one step per epoch, an independent draw; the optimiser's handler
#: (:class:`probdr.infer.schedule.OptimiserHooks`) sets the epoch's ``steps``, the step
#: ``index`` and ``whole_epoch`` -- the driver's schedule, which the model does not hold.
epoch_edges = effectful(_epoch_edges, type="epoch_edges")


class _BernoulliLogProb(torch.autograd.Function):
    r"""``Bernoulli(logits).log_prob(value)`` with torch's gradient :math:`(y - \sigma(x)) g`,
    the same numbers, the sigmoid taken on one thread: its vector loop and its scalar tail
    (the last elements of each thread's chunk) round differently, so on several threads the
    gradient's last bits would depend on the thread count."""

    @staticmethod
    def forward(ctx, logits, value):
        ctx.save_for_backward(logits, value)
        return -F.binary_cross_entropy_with_logits(logits, value, reduction="none")

    @staticmethod
    def backward(ctx, g):
        logits, value = ctx.saved_tensors
        with one_thread():
            s = torch.sigmoid(logits)
        return s.sub_(value).mul_(g.neg()), None


def bernoulli_log_prob(logits: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """The Bernoulli log-likelihood of ``value`` (0 or 1 per edge) under ``logits``, elementwise
    (broadcast), with a gradient that does not depend on the number of threads."""
    logits, value = torch.broadcast_tensors(logits, value)
    return _BernoulliLogProb.apply(logits, value)
