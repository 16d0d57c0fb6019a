r"""The edge sums of large graphs in one fused pass over a locality-ordered layout.

At a million points, t-SNE's attraction :math:`\sum_e v_e \log k(\|z_{r_e} - z_{c_e}\|^2)` runs
over 64 million pairs, and its gradient, written with torch's operations
(:func:`probdr._pairwise._value_and_grad`), is a chain of gathers, products and scatters over
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
  a slice into one loop over the slices (no intermediate of the edge list's length). Where
  compilation is unavailable (no C++ compiler, or ``probdr.config.set_compile(False)``), the
  same function runs in torch's operations on blocks of slices.

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

from . import config
from ._utils import tensor_cache

#: slots per slice of a row's neighbour list (rows of the padded layout)
SLICE = 32
#: shortest edge list that takes this path (a million-point t-SNE has 64 million pairs)
MIN_EDGES = 1 << 23
#: slices per block of the uncompiled fallback (its temporaries are a few blocks of slots)
FALLBACK_SLICES = 1 << 16
#: edges per part of the layout's construction (its int64 temporaries)
BUILD_PART_EDGES = 1 << 24


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
    kernels of one bandwidth (not per-point ones)."""
    return (m >= MIN_EDGES and Z.device.type == "cpu"
            and Z.dtype in (torch.float32, torch.float64)
            and not isinstance(getattr(kernel, "bandwidth", None), torch.Tensor))


def layout(rows: torch.Tensor, cols: torch.Tensor, v: torch.Tensor, n: int,
           dtype: torch.dtype | None = None) -> EdgeLayout:
    """The layout of the edge list, its weights in ``dtype`` (cached on the weights ``v``, which
    the graph caches keep alive across steps). Terms with :math:`v_e \\le 0` are left out (the
    edge sums drop them)."""
    dtype = v.dtype if dtype is None else dtype
    return tensor_cache(v, f"_probdr_edge_layout_{n}_{dtype}",
                        lambda: build(rows, cols, v.to(dtype), n))


def _parts(m: int):
    k = max(1, -(-m // BUILD_PART_EDGES))
    return [(m * p // k, m * (p + 1) // k) for p in range(k)]


def build(rows: torch.Tensor, cols: torch.Tensor, v: torch.Tensor, n: int) -> EdgeLayout:
    """The layout of an edge list (see the module docstring)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import reverse_cuthill_mckee

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
    m = rows.shape[0]
    out_deg = torch.bincount(rows, minlength=n)
    in_deg = torch.bincount(cols, minlength=n)
    deg = out_deg + in_deg
    indptr = _starts(deg)
    # the neighbour lists in the old labels (CSR): a row's own edges in the order of the list,
    # then the edges where it is the column, in the order of the list
    nbr = torch.empty(2 * m, dtype=index)
    w = torch.empty(2 * m, dtype=v.dtype)
    starts = _starts(out_deg)
    for s, e in _parts(m):  # rows sorted: a row's edges are contiguous, placed in order
        r = rows[s:e].long()
        pos = torch.arange(s, e).sub_(starts.index_select(0, r)).add_(indptr.index_select(0, r))
        nbr.index_copy_(0, pos, cols[s:e])
        w.index_copy_(0, pos, v[s:e])
    by_col = torch.argsort(cols, stable=True)
    starts = _starts(in_deg)
    after = indptr[:-1] + out_deg  # where each row's second group begins
    col_sorted = torch.repeat_interleave(torch.arange(n, dtype=index), in_deg)
    for s, e in _parts(m):  # the k-th edge by column goes to after[c] + k - starts[c]
        c = col_sorted[s:e].long()
        pos = torch.arange(s, e).sub_(starts.index_select(0, c)).add_(after.index_select(0, c))
        idx = by_col[s:e]
        nbr.index_copy_(0, pos, rows.index_select(0, idx))
        w.index_copy_(0, pos, v.index_select(0, idx))
    del by_col, col_sorted
    A = csr_matrix((np.ones(2 * m, dtype=np.int8), nbr.numpy(), indptr.numpy()), shape=(n, n))
    perm = torch.from_numpy(reverse_cuthill_mckee(A, symmetric_mode=True).astype(np.int64))
    del A
    inv = torch.empty(n, dtype=torch.int64)
    inv[perm] = torch.arange(n)
    # the slices in the new labels
    new_deg = deg[perm]
    slices = (new_deg + SLICE - 1) // SLICE
    first_slice = _starts(slices)
    n_slices = int(first_slice[-1])
    slice_row = torch.repeat_interleave(torch.arange(n, dtype=index), slices)
    out_cols = slice_row.repeat_interleave(SLICE)  # padding: the row itself
    out_vals = torch.zeros(n_slices * SLICE, dtype=v.dtype)
    base = first_slice[:-1][inv] * SLICE  # first slot of each old row
    for a, b in _row_ranges(indptr, n):
        s, e = int(indptr[a]), int(indptr[b])
        r = torch.repeat_interleave(torch.arange(a, b), deg[a:b])
        slot = torch.arange(s, e).sub_(indptr.index_select(0, r)).add_(base.index_select(0, r))
        out_cols.index_copy_(0, slot, inv.index_select(0, nbr[s:e].long()).to(index))
        out_vals.index_copy_(0, slot, w[s:e])
        del r, slot
    return EdgeLayout(perm, out_cols.view(n_slices, SLICE), out_vals.view(n_slices, SLICE),
                      slice_row, slices)


def _starts(counts: torch.Tensor) -> torch.Tensor:
    """``[0, c0, c0 + c1, ...]`` (int64, one longer than ``counts``)."""
    out = torch.zeros(counts.shape[0] + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=out[1:])
    return out


def _sorted(r: torch.Tensor) -> bool:
    return r.numel() < 2 or bool((r[1:] >= r[:-1]).all())


def _row_ranges(indptr: torch.Tensor, n: int):
    """Ranges of rows with about ``BUILD_PART_EDGES`` entries each."""
    m = int(indptr[-1])
    cuts = {0, n}
    for s, _ in _parts(m)[1:]:
        cuts.add(int(torch.searchsorted(indptr, s, side="right")) - 1)
    cuts = sorted(c for c in cuts if 0 <= c <= n)
    return list(zip(cuts[:-1], cuts[1:], strict=True))


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


def _run(kernel, value, coords, lay: EdgeLayout):
    if config.get_compile() and not _compile_failed:
        try:
            return _compiled_fn(kernel, value)(coords, lay.cols, lay.vals, lay.slice_row)
        except Exception as err:  # noqa: BLE001 - any failure of the compiler: run uncompiled
            _compile_failed.append(f"{type(err).__name__}: {err}".splitlines()[0][:300])
            warnings.warn("probdr: torch.compile could not compile the fused edge pass "
                          f"({_compile_failed[0]}); it runs in torch's operations from now "
                          "on (slower at scale). probdr.config.set_compile(False) silences "
                          "this.", RuntimeWarning, stacklevel=4)
    parts = []
    for s in range(0, lay.cols.shape[0], FALLBACK_SLICES):
        e = s + FALLBACK_SLICES
        parts.append(_slice_sums(kernel, value, coords, lay.cols[s:e], lay.vals[s:e],
                                 lay.slice_row[s:e]))
    return [torch.cat(p) for p in zip(*parts, strict=True)] if parts else \
        [coords[0].new_zeros(0) for _ in range(len(coords) + value)]


def value_and_grad(Z: torch.Tensor, rows, cols, v, kernel, value: bool = True):
    r"""``(S, grad)``: :math:`S = \sum_e v_e \log k(\|z_{r_e} - z_{c_e}\|^2)` (terms with
    :math:`v_e \le 0` dropped; 0 unless ``value``) and its gradient on ``Z`` (n, q)."""
    n, q = Z.shape
    lay = layout(rows, cols, v, n, Z.dtype)
    Zp = Z.index_select(0, lay.perm)
    coords = list(Zp.t().contiguous().unbind(0))
    sums = _run(kernel, value, coords, lay)
    per_slice = torch.stack(sums[:q], 1)
    grad_p = torch.segment_reduce(per_slice, "sum", lengths=lay.slices, axis=0)
    grad = torch.empty_like(Z)
    grad.index_copy_(0, lay.perm, grad_p.mul_(2.0))
    total = sums[q].sum(dtype=torch.float64).mul_(0.5).to(Z.dtype) if value \
        else Z.new_zeros(())
    return total, grad
