r"""The edge sums of large graphs in one fused pass over a locality-ordered layout.

At a million points, t-SNE's attraction :math:`\sum_e v_e \log k(\|z_{r_e} - z_{c_e}\|^2)` runs
over 64 million pairs, and its gradient, written with torch's operations
(:func:`probdr._compute.edges.edges_value_and_grad`), is a chain of gathers, products and scatters over
the edge list, each writing its own 64-million-entry intermediate: it is bound by memory and
by the random reads of the embedding. Here the same sums are taken over another layout of the
same edges:

* **A locality order of the points.** The points are relabelled by the reverse Cuthill-McKee
  order of the graph (:func:`scipy.sparse.csgraph.reverse_cuthill_mckee`), so that the
  neighbours of consecutive points have nearby labels: the reads of :math:`z_j` hit the cache.
  The embedding is permuted into that order at each pass and the gradient permuted back.
* **Both directions, row by row, in slices of** ``SLICE`` **slots.** Pair (i, j) is listed in
  row i and in row j; each row is cut into slices of ``SLICE`` neighbours (the last one padded
  with the point itself at weight 0), a dense (slices, ``SLICE``) array. The gradient of row i is
  then a sum along its slices, :math:`\nabla_{z_i} = 2 \sum_j v_{ij}\,\partial_{d^2}\log
  k(d^2_{ij})\,(z_i - z_j)`, with no scatter, and the sum's value is half the sum over the
  slots (each pair twice).
* **One compiled loop.** :func:`torch.compile` fuses the gathers, the kernel and the sums over
  a slice into one loop over the slices (no intermediate of the edge list's length). In torch's
  operations the same function would be two to three times slower than the edge-list path, so
  where torch cannot compile (no C++ compiler: warned once) or compilation is off
  (``probdr.config.set_compile(False)``), the edge sums keep the edge-list path.

The numbers are those of the edge-list path up to rounding (another order of summation); they do
not depend on the number of threads (each slice is summed in order, slices are summed into rows
in order). Used on CPU for lists of at least ``MIN_EDGES`` pairs (:func:`use_for`).
"""

from __future__ import annotations

import dataclasses
import threading
import types
import warnings

import numpy as np
import torch

from .. import config
from .._utils import tensor_cache
from .alloc import release_free

#: slots per slice of a row's neighbour list (rows of the padded layout)
SLICE = 32
#: shortest edge list that takes this path (a million-point t-SNE has 64 million pairs)
MIN_EDGES = 1 << 20
#: edges per part of the layout's construction (its int64 temporaries)
BUILD_PART_EDGES = 1 << 22


@dataclasses.dataclass
class EdgeLayout:
    """An edge list in locality order, both directions, rows cut in slices.

    ``perm[i']``: the point of label ``i'`` (new label to old); ``cols`` (slices, SLICE), the
    new labels of the neighbours (the row's own label in padding); ``vals`` their weights (0 in
    padding); ``slice_row`` the new label of each slice's row; ``slices`` the number of slices
    of each row (rows in new label order)."""

    perm: torch.Tensor
    cols: torch.Tensor
    vals: torch.Tensor
    slice_row: torch.Tensor
    slices: torch.Tensor


def use_for(Z: torch.Tensor, m: int, kernel) -> bool:
    """Whether an edge sum over ``m`` pairs of the embedding ``Z`` takes this path: on CPU, for
    kernels whose numbers are plain floats (not per-point bandwidths, not tensors: the compiled
    pass is made once per kernel), while compilation is on and has not failed."""
    return (m >= MIN_EDGES and Z.device.type == "cpu" and config.get_compile()
            and not _compile_failed
            and Z.dtype in (torch.float32, torch.float64)
            and kernel.is_fixed)


def layout(rows: torch.Tensor, cols: torch.Tensor, v: torch.Tensor, n: int,
           dtype: torch.dtype | None = None) -> EdgeLayout:
    """The layout of the edge list, its weights in ``dtype`` (cached on the weights ``v``, which
    the graph caches keep alive across steps). Terms with :math:`v_e \\le 0` are left out (the
    edge sums drop them)."""
    dtype = v.dtype if dtype is None else dtype

    def compute():
        release_free()  # the heap's free memory (a fold's temporaries) before the build
        out = build(rows, cols, v.to(dtype), n)
        release_free()  # its temporaries, a few GB at scale, which heap reuse would keep
        return out
    return tensor_cache(v, f"_probdr_edge_layout_{n}_{dtype}", compute)


def _parts(m: int):
    k = max(1, -(-m // BUILD_PART_EDGES))
    return [(m * p // k, m * (p + 1) // k) for p in range(k)]


def build(rows: torch.Tensor, cols: torch.Tensor, v: torch.Tensor, n: int) -> EdgeLayout:
    """The layout of an edge list (see the module docstring)."""
    keep = v > 0
    if not bool(keep.all()):
        rows, cols, v = rows[keep], cols[keep], v[keep]
    del keep
    index = torch.int32 if n < 2**31 else torch.int64
    rows, cols = rows.to(index), cols.to(index)
    if not _sorted(rows):
        order = torch.argsort(rows, stable=True)
        rows, cols, v = rows[order], cols[order], v[order]
        del order
    out_deg = torch.bincount(rows, minlength=n)
    in_deg = torch.bincount(cols, minlength=n)
    # the edges in order of their column: the k-th holds slot k - col_start[c] of c's second group
    by_col = torch.argsort(cols, stable=True).to(index)
    perm = _locality_order(rows, cols, by_col, out_deg, in_deg, n)
    inv = torch.empty(n, dtype=torch.int64)
    inv[perm] = torch.arange(n)
    # the slices in the new labels; a row's own edges first, in the order of the list, then the
    # edges where it is the column, in the order of the list
    slices = ((out_deg + in_deg)[perm] + SLICE - 1) // SLICE
    first_slice = _starts(slices)
    n_slices = int(first_slice[-1])
    slice_row = torch.repeat_interleave(torch.arange(n, dtype=index), slices)
    out_cols = slice_row.repeat_interleave(SLICE)  # padding: the row itself
    out_vals = torch.zeros(n_slices * SLICE, dtype=v.dtype)
    first = first_slice[:-1][inv].mul_(SLICE)  # first slot of each row, by old label
    for s, e, own, other in _slots(rows, by_col, out_deg, in_deg, first):
        out_cols.index_copy_(0, own, inv.index_select(0, cols[s:e].long()).to(index))
        out_vals.index_copy_(0, own, v[s:e])
        idx = by_col[s:e]
        out_cols.index_copy_(0, other, inv.index_select(0, rows.index_select(0, idx).long())
                             .to(index))
        out_vals.index_copy_(0, other, v.index_select(0, idx))
    return EdgeLayout(perm, out_cols.view(n_slices, SLICE), out_vals.view(n_slices, SLICE),
                      slice_row, slices)


def _slots(rows, by_col, out_deg, in_deg, first):
    """For parts ``s:e`` of the list: the slots of edges ``s:e`` in their rows' lists, and of
    edges ``by_col[s:e]`` in their columns' lists (after the row's own edges), a row's list
    starting at slot ``first[row]``."""
    row_start, col_start = _starts(out_deg), _starts(in_deg)
    second = first + out_deg
    for s, e in _parts(rows.shape[0]):
        r = rows[s:e].long()
        own = torch.arange(s, e).sub_(row_start.index_select(0, r)).add_(first.index_select(0, r))
        c = _group_ids(col_start, in_deg, s, e)
        other = torch.arange(s, e).sub_(col_start.index_select(0, c)).add_(second.index_select(0, c))
        yield s, e, own, other


def _locality_order(rows, cols, by_col, out_deg, in_deg, n) -> torch.Tensor:
    """The reverse Cuthill-McKee order of the graph (new label to old): its neighbour lists (CSR,
    a row's own edges then those where it is the column) are built for scipy and freed."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    m = rows.shape[0]
    indptr = _starts(out_deg + in_deg)
    nbr = torch.empty(2 * m, dtype=rows.dtype)
    for s, e, own, other in _slots(rows, by_col, out_deg, in_deg, indptr[:-1]):
        nbr.index_copy_(0, own, cols[s:e])
        nbr.index_copy_(0, other, rows.index_select(0, by_col[s:e]))
    A = csr_matrix((np.ones(2 * m, dtype=np.int8), nbr.numpy(), indptr.numpy()), shape=(n, n))
    return torch.from_numpy(reverse_cuthill_mckee(A, symmetric_mode=True).astype(np.int64))


def _group_ids(start: torch.Tensor, counts: torch.Tensor, s: int, e: int) -> torch.Tensor:
    """The groups of positions ``s:e`` of a list sorted by group (``start``: each group's first
    position, ``counts`` its size), without the whole list's array of groups."""
    if e <= s:
        return torch.zeros(0, dtype=torch.int64)
    first = int(torch.searchsorted(start, s, right=True)) - 1
    last = int(torch.searchsorted(start, e - 1, right=True)) - 1
    sizes = counts[first:last + 1].clone()
    sizes[0] = min(int(start[first + 1]), e) - s
    if last > first:
        sizes[-1] = e - int(start[last])
    return torch.repeat_interleave(torch.arange(first, last + 1), sizes)


def _starts(counts: torch.Tensor) -> torch.Tensor:
    """``[0, c0, c0 + c1, ...]`` (int64, one longer than ``counts``)."""
    out = torch.zeros(counts.shape[0] + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=out[1:])
    return out


def _sorted(r: torch.Tensor) -> bool:
    return r.numel() < 2 or bool((r[1:] >= r[:-1]).all())


# --------------------------------------------------------------------------------------------
# the pass
# --------------------------------------------------------------------------------------------
def _slice_sums(kernel, value: bool, coords, cols, vals, slice_row):
    r"""Per slice: :math:`\sum_j v_{ij}\,\partial_{d^2}\log k(d^2_{ij})\,(z_i - z_j)` for each
    coordinate, and (``value``) :math:`\sum_j v_{ij} \log k(d^2_{ij})`."""
    diffs = [z[slice_row][:, None] - z[cols] for z in coords]
    d2 = diffs[0] * diffs[0]
    for d in diffs[1:]:
        d2 = d2 + d * d
    coef = vals * kernel.dlog_k(d2)
    out = [(coef * d).sum(1) for d in diffs]
    if value:
        out.append((vals * kernel.log_k(d2)).sum(1))
    return out


_compiled: dict = {}
_compile_lock = threading.Lock()
_compile_failed: list[str] = []


def _compiled_fn(kernel, value: bool):
    """The compiled pass for a kernel's parameters and ``value`` (sizes dynamic), made once per
    process: a new fit with the same kernel reuses it. Each gets a code object of its own, because
    torch.compile keeps a bounded number of compilations per code object (beyond it, it would
    run the pass uncompiled over the whole list, gigabytes of temporaries at scale)."""
    key = (type(kernel).__name__, repr(kernel), value)
    with _compile_lock:
        if key not in _compiled:
            def fn(coords, cols, vals, slice_row):
                return _slice_sums(kernel, value, coords, cols, vals, slice_row)
            code = fn.__code__.replace(co_name=f"edge_pass_{len(_compiled)}")
            fn = types.FunctionType(code, fn.__globals__, code.co_name, None, fn.__closure__)
            _compiled[key] = torch.compile(fn, dynamic=True)
        return _compiled[key]


def value_and_grad(Z: torch.Tensor, rows, cols, v, kernel, value: bool = True,
                   compiled: bool = True):
    r"""``(S, grad)``: :math:`S = \sum_e v_e \log k(\|z_{r_e} - z_{c_e}\|^2)` (terms with
    :math:`v_e \le 0` dropped; 0 unless ``value``) and its gradient on ``Z`` (n, q); ``None`` if
    torch cannot compile the pass (warned once; the caller takes the edge-list path).
    ``compiled=False`` evaluates the same function in torch's operations, whole: a reference for
    tests, with temporaries of the layout's size."""
    n, q = Z.shape
    lay = layout(rows, cols, v, n, Z.dtype)
    Zp = Z.index_select(0, lay.perm)
    coords = list(Zp.t().contiguous().unbind(0))
    if not compiled:
        sums = _slice_sums(kernel, value, coords, lay.cols, lay.vals, lay.slice_row)
    else:
        try:
            sums = _compiled_fn(kernel, value)(coords, lay.cols, lay.vals, lay.slice_row)
        except Exception as err:  # noqa: BLE001 - any failure of the compiler
            _compile_failed.append(f"{type(err).__name__}: {err}".splitlines()[0][:300])
            warnings.warn("probdr: torch.compile could not compile the fused edge pass "
                          f"({_compile_failed[0]}); the edge sums of large graphs take the "
                          "edge-list path from now on, slower. probdr.config.set_compile(False) "
                          "silences this.", RuntimeWarning, stacklevel=4)
            try:  # the layout is of no further use
                delattr(v, f"_probdr_edge_layout_{n}_{Z.dtype}")
            except AttributeError:  # pragma: no cover - not cached
                pass
            return None
    per_slice = torch.stack(sums[:q], 1)
    grad_p = torch.segment_reduce(per_slice, "sum", lengths=lay.slices, axis=0)
    grad = torch.empty_like(Z)
    grad.index_copy_(0, lay.perm, grad_p.mul_(2.0))
    total = sums[q].sum(dtype=torch.float64).mul_(0.5).to(Z.dtype) if value \
        else Z.new_zeros(())
    return total, grad
