"""Edge lists of sparse graphs, the terms the graph laws (:mod:`probdr.laws.graph`) evaluate:
the (rows, cols, values) of a graph, its unordered pairs with their summed weights (the fold),
its ordered support pairs, row sums and total, and the log-combinatorial sum of the E law. Each
is computed once per graph tensor and cached on it (:func:`probdr._utils.tensor_cache`): the
observed graph of a fit is the same tensor at every step. At a million points a graph has 90M
edges, so these are written for memory: their temporaries are bounded (the fold in parts, the
log-Gamma sum in blocks), and the numbers are those of the one-pass forms, bit for bit."""

from __future__ import annotations

import torch

from .._utils import fixed_sum
from .._utils import tensor_cache as _cached


def edge_terms(value):
    """(rows, cols, values) of a graph given dense or sparse."""
    if value.is_sparse:
        def compute():
            v = value.coalesce()
            return v.indices()[0], v.indices()[1], v.values()
        return _cached(value, "_probdr_edges", compute)
    r, c = torch.nonzero(value, as_tuple=True)
    return r, c, value[r, c]


def folded_edges(value):
    """Unordered pairs i < j of a sparse graph with weights W_ij + W_ji (cached on the tensor)."""
    return _cached(value, "_probdr_folded", lambda: _fold(value))


#: edges per part of the fold (:func:`_fold`): its temporaries are a few times one part's keys
FOLD_PART_EDGES = 1 << 24


def _fold(value):
    """The folding by sorting the pair keys :math:`i n + j` (i < j): a pair appears at most
    twice, so its sum :math:`W_{ij} + W_{ji}` is the one a coalesce gives. Indices come back in
    int32 when n allows (half the memory of int64; int64 columns would make the column sums of
    every step a third faster, ``scatter_add_``, at 256 MB more at a million points).

    Long lists are folded in parts by ranges of the smaller index :math:`i`, in order (the same
    pairs and sums): a part sorts the keys of its rows' upper edges (already in order, rows of a
    coalesced tensor being sorted) and of the lower edges whose column lies in its range. One
    sort of all the keys held about three times the edge list in temporaries (1.3 GiB above the
    steady state of a million-point t-SNE, its peak)."""
    v = value.coalesce()
    r, c = v.indices()
    vals, n, m = v.values(), v.shape[0], v.indices().shape[1]
    index = torch.int32 if n < 2**31 else torch.int64
    k = max(1, -(-m // FOLD_PART_EDGES))
    # row ranges of about m / k edges (rows are sorted): the parts' ranges of i
    cuts = sorted({0, n, *(int(r[m * p // k]) for p in range(1, k))}) if m else [0, n]
    lower = r > c  # the edges whose pair key is (c, r)
    parts = []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        s, e = (int(x) for x in torch.searchsorted(r, torch.tensor([a, b], dtype=r.dtype)))
        ru, cu, vu = r[s:e], c[s:e], vals[s:e]
        up = cu > ru
        low = (c >= a).logical_and_(c < b).logical_and_(lower) if len(cuts) > 2 else lower
        lo, hi = torch.cat([ru[up], c[low]]), torch.cat([cu[up], r[low]])
        pv = torch.cat([vu[up], vals[low]])
        del up, low
        key = lo.mul_(n).add_(hi)
        del hi
        key, order = torch.sort(key)
        pv = pv.index_select(0, order)
        del order
        key, pair = torch.unique_consecutive(key, return_inverse=True)
        pv = torch.zeros(key.numel(), dtype=pv.dtype).index_add_(0, pair, pv)
        del pair
        rows = torch.div(key, n, rounding_mode="floor")
        cols = key.sub_(rows * n)
        parts.append((rows.to(index), cols.to(index), pv))
        del rows, cols, key
    if len(parts) == 1:
        return parts[0]
    return tuple(torch.cat([p[i] for p in parts]) for i in range(3))


def near_pairs(value):
    """Ordered pairs (both directions) of a sparse graph's support, sorted keys i*n+j, and the
    number of such pairs per row (cached on the tensor)."""
    return _cached(value, "_probdr_near", lambda: _near(value))


def _near(value):
    v = value.coalesce()
    n = v.shape[0]
    r, c = v.indices()
    keep = r != c
    r, c = torch.cat([r[keep], c[keep]]), torch.cat([c[keep], r[keep]])
    keys = torch.unique(r * n + c)  # sorted
    r, c = keys // n, keys % n
    deg = torch.bincount(r, minlength=n)
    return r, c, keys, deg


def row_sums(value, n):
    """The row sums :math:`W_{i+}` of a graph (cached on a sparse one)."""
    def compute():
        r, _, v = edge_terms(value)
        return torch.zeros(n, dtype=v.dtype).index_add(0, r, v)
    return _cached(value, "_probdr_rowsums", compute) if value.is_sparse else compute()


def graph_total(value):
    """The total :math:`W_{++}` of a graph (cached on a sparse one)."""
    if value.is_sparse:
        return _cached(value, "_probdr_total", lambda: fixed_sum(edge_terms(value)[2]))
    return fixed_sum(value)


def sum_lgamma1(v: torch.Tensor) -> torch.Tensor:
    r""":math:`\sum_e \log \Gamma(v_e + 1)` in float64: the terms computed in blocks into one
    buffer, then summed, the numbers of ``torch.lgamma(v.double() + 1).sum()`` with one float64
    copy of the edge values instead of three (1.4 GB less at 90M edges)."""
    v = v.reshape(-1)
    out = torch.empty(v.numel(), dtype=torch.float64, device=v.device)
    block = 1 << 22
    for s in range(0, v.numel(), block):
        o = out[s:s + block]
        torch.lgamma(o.copy_(v[s:s + block]).add_(1), out=o)
    return fixed_sum(out)


# --------------------------------------------------------------------------------------------
# batches of graphs: a (..., n, n) tensor, dense or sparse COO
# --------------------------------------------------------------------------------------------
def batch_edges(value):
    """The entries of a sparse batch of graphs ``(..., n, n)`` as one edge list: (graph, rows,
    cols, values), ``graph`` the flat index of each entry's graph in the batch (row-major),
    sorted as ``coalesce`` sorts (a graph's entries are contiguous). A single ``(n, n)`` graph
    uses the cached :func:`edge_terms`."""
    if value.dense_dim() != 0:
        raise ValueError(f"a sparse graph must be sparse in every dimension, got "
                         f"{value.sparse_dim()} sparse and {value.dense_dim()} dense dimensions.")
    if value.dim() == 2:
        r, c, v = edge_terms(value)
        return torch.zeros_like(r), r, c, v
    s = value.coalesce()
    idx = s.indices()
    graph = torch.zeros_like(idx[0])
    for d, size in enumerate(value.shape[:-2]):
        graph = graph * size + idx[d]
    return graph, idx[-2], idx[-1], s.values()


def unbind_graphs(value) -> list:
    """The graphs of a batch ``(..., n, n)`` (dense or sparse COO) in row-major order, each an
    ``(n, n)`` tensor of the same layout; sparse ones share the batch's index and value memory."""
    n = value.shape[-1]
    count = value.shape[:-2].numel()
    if not value.is_sparse:
        return list(value.reshape(count, n, n).unbind(0))
    graph, r, c, v = batch_edges(value)
    sizes = torch.bincount(graph, minlength=count).tolist()
    out = []
    for rr, cc, vv in zip(r.split(sizes), c.split(sizes), v.split(sizes), strict=True):
        out.append(torch.sparse_coo_tensor(torch.stack([rr, cc]), vv, value.shape[-2:],
                                           check_invariants=False, is_coalesced=True))
    return out


def repeat_graph(value, batch_shape):
    """The graph ``value`` (n, n) repeated over ``batch_shape``: a view for a dense graph, a
    sparse COO batch ``(*batch_shape, n, n)`` (coalesced) for a sparse one."""
    batch_shape = torch.Size(batch_shape)
    if not batch_shape:
        return value
    if not value.is_sparse:
        return value.expand(batch_shape + value.shape)
    r, c, v = edge_terms(value)
    count, m = batch_shape.numel(), v.numel()
    graph = torch.arange(count, device=v.device).repeat_interleave(m)
    idx = torch.stack([*torch.unravel_index(graph, batch_shape), r.repeat(count), c.repeat(count)])
    return torch.sparse_coo_tensor(idx, v.repeat(count), batch_shape + value.shape,
                                   check_invariants=False, is_coalesced=True)
