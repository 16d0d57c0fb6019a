r"""The supports :math:`\Omega_\mathcal P` of the graph laws (Van Assel et al. 2022, Definition 2)
as ``torch.distributions`` constraints, and their enumeration on tiny graphs.

=====  =================================  ==========================================================
law    constraint                         :math:`W \in \Omega` when
=====  =================================  ==========================================================
B      :data:`binary_graphs`              entries in {0, 1}, zero diagonal
D      :data:`unit_degree_graphs`         non-negative integers, zero diagonal, every row sums to 1
E      :data:`n_edge_graphs`              non-negative integers, zero diagonal, :math:`W_{++} = n`
B~     :data:`symmetric_binary_graphs`    B and symmetric
=====  =================================  ==========================================================

``check(W)`` takes a graph ``(n, n)`` or a batch ``(..., n, n)``, dense or sparse COO, and returns
one boolean per graph (the batch shape). Sparse graphs are checked on their stored entries (an
absent entry is 0), never densified. ``size(n)`` is the number of graphs of the support on ``n``
nodes and ``enumerate(n)`` lists them, ``(size(n), n, n)`` long.

:func:`integer_valued` tells the graphs (integer entries) from the expected graphs
:math:`\mathbb E[W]` that the package observes as well (see :mod:`probdr.laws.graph`).
"""

from __future__ import annotations

import math

import torch
from torch.distributions.constraints import Constraint

from .edge_lists import batch_edges

__all__ = ["GraphSupport", "BinaryGraphs", "UnitDegreeGraphs", "NEdgeGraphs",
           "SymmetricBinaryGraphs", "integer_graphs", "binary_graphs", "unit_degree_graphs",
           "n_edge_graphs", "symmetric_binary_graphs", "integer_valued", "all_entries"]


# --------------------------------------------------------------------------------------------
# per-graph tests of a dense or sparse batch
# --------------------------------------------------------------------------------------------
def _integral(v: torch.Tensor) -> torch.Tensor:
    if v.dtype.is_floating_point or v.dtype.is_complex:
        return v == torch.round(v)  # NaN is not integral
    return torch.ones_like(v, dtype=torch.bool)


def _all_per_graph(ok: torch.Tensor, graph: torch.Tensor, batch_shape) -> torch.Tensor:
    """Per graph of a sparse batch: whether ``ok`` holds at all of its entries."""
    out = torch.ones(batch_shape.numel(), dtype=torch.bool, device=ok.device)
    out[graph[~ok]] = False
    return out.reshape(batch_shape)


#: entries per block of the one-graph tests (bounded temporaries on a graph of 90M edges)
BLOCK = 1 << 22


def all_entries(v: torch.Tensor, test) -> bool:
    """Whether ``test`` (elementwise, boolean) holds at every entry of ``v``, in blocks of
    :data:`BLOCK` entries, stopping at the first block where it fails."""
    v = v.reshape(-1)
    return all(bool(test(v[s:s + BLOCK]).all()) for s in range(0, v.numel(), BLOCK))


def integer_valued(value: torch.Tensor) -> torch.Tensor:
    """Per graph: whether every entry is an integer (an integer or bool dtype, or floating
    entries that are all integral; NaN is not). One graph ``(n, n)`` is tested in blocks, and
    an expected graph usually fails in the first."""
    if value.dim() == 2:
        v = batch_edges(value)[3] if value.is_sparse else value
        return torch.tensor(all_entries(v, _integral), device=v.device)
    if not value.is_sparse:
        return _integral(value).flatten(-2).all(-1)
    graph, _, _, v = batch_edges(value)
    return _all_per_graph(_integral(v), graph, value.shape[:-2])


def _entries_ok(value: torch.Tensor, binary: bool) -> torch.Tensor:
    """Per graph: non-negative integer entries (at most 1 if ``binary``), zero diagonal."""
    if value.is_sparse:
        graph, r, c, v = batch_edges(value)
        ok = _integral(v) & (v >= 0) & ((r != c) | (v == 0))
        if binary:
            ok &= v <= 1
        return _all_per_graph(ok, graph, value.shape[:-2])
    ok = _integral(value) & (value >= 0)
    if binary:
        ok &= value <= 1
    return ok.flatten(-2).all(-1) & (value.diagonal(dim1=-2, dim2=-1) == 0).all(-1)


def _row_sums(value: torch.Tensor) -> torch.Tensor:
    """The row sums :math:`W_{i+}` of every graph, ``(..., n)`` float64."""
    n = value.shape[-1]
    if not value.is_sparse:
        return value.to(torch.float64).sum(-1)
    graph, r, _, v = batch_edges(value)
    out = torch.zeros(value.shape[:-2].numel() * n, dtype=torch.float64, device=v.device)
    return out.index_add_(0, graph * n + r, v.to(torch.float64)).reshape(value.shape[:-1])


def _totals(value: torch.Tensor) -> torch.Tensor:
    """The totals :math:`W_{++}` of every graph, batch-shaped float64."""
    return _row_sums(value).sum(-1)


def _symmetric(value: torch.Tensor) -> torch.Tensor:
    r"""Per graph: :math:`W = W^\top`. On a sparse batch the nonzero entries' keys
    :math:`(g n + i) n + j` (sorted) are compared with those of the transpose, sorted: a graph's
    entries fill the same range of positions in both lists, so it is symmetric iff they all
    match there."""
    if not value.is_sparse:
        return (value == value.transpose(-1, -2)).flatten(-2).all(-1)
    n = value.shape[-1]
    graph, r, c, v = batch_edges(value)
    nz = v != 0
    graph, r, c, v = graph[nz], r[nz], c[nz], v[nz]
    key = (graph * n + r) * n + c
    key_t, order = torch.sort((graph * n + c) * n + r)
    ok = (key_t == key) & (v[order] == v)
    return _all_per_graph(ok, graph, value.shape[:-2])


# --------------------------------------------------------------------------------------------
# the constraints
# --------------------------------------------------------------------------------------------
class GraphSupport(Constraint):
    """Graphs with non-negative integer entries (multi-edges) and no self loops: the union of
    the supports below and their base class. ``check`` returns a boolean per graph."""

    is_discrete = True
    event_dim = 2
    #: entries at most 1 (simple graphs)
    binary = False
    #: what the support is, in words (for error messages)
    rule = "non-negative integer entries, zero diagonal"

    def check(self, value: torch.Tensor) -> torch.Tensor:
        return _entries_ok(value, self.binary)

    def size(self, n: int) -> int:
        """The number of graphs of the support on ``n`` nodes."""
        raise NotImplementedError(f"{self!r} is infinite: it has no enumeration.")

    def enumerate(self, n: int) -> torch.Tensor:
        """Every graph of the support on ``n`` nodes, ``(size(n), n, n)`` long."""
        raise NotImplementedError(f"{self!r} is infinite: it has no enumeration.")

    def __repr__(self):
        return f"{type(self).__name__}({self.rule})"


def _cells(n: int):
    """The off-diagonal cells (i, j), i != j, row-major."""
    return torch.nonzero(~torch.eye(n, dtype=torch.bool), as_tuple=True)


def _bits(count: int, width: int) -> torch.Tensor:
    """The binary digits of 0..count-1, ``(count, width)`` long, least significant first."""
    return (torch.arange(count)[:, None] >> torch.arange(width)) & 1


class BinaryGraphs(GraphSupport):
    r""":math:`\Omega_B`: simple directed graphs (entries in {0, 1}, zero diagonal)."""

    binary = True
    rule = "entries in {0, 1}, zero diagonal"

    def size(self, n):
        return 2 ** (n * (n - 1))

    def enumerate(self, n):
        rows, cols = _cells(n)
        W = torch.zeros(self.size(n), n, n, dtype=torch.long)
        W[:, rows, cols] = _bits(self.size(n), rows.numel())
        return W


class UnitDegreeGraphs(GraphSupport):
    r""":math:`\Omega_D`: every node has exactly one out-edge (rows sum to 1, zero diagonal)."""

    rule = "non-negative integer entries, zero diagonal, every row sums to 1"

    def check(self, value):
        return super().check(value) & (_row_sums(value) == 1).all(-1)

    def size(self, n):
        return (n - 1) ** n

    def enumerate(self, n):
        count = self.size(n)
        W = torch.zeros(count, n, n, dtype=torch.long)
        if count == 0:
            return W
        # the k-th graph: row i points to the i-th base-(n-1) digit of k, skipping i itself
        choice = (torch.arange(count)[:, None] // (n - 1) ** torch.arange(n)) % (n - 1)
        col = choice + (choice >= torch.arange(n)).long()
        return W.scatter_(2, col[:, :, None], 1)


class NEdgeGraphs(GraphSupport):
    r""":math:`\Omega_E`: n edges in total, multi-edges allowed, zero diagonal."""

    rule = "non-negative integer entries, zero diagonal, n edges in total"

    def check(self, value):
        return super().check(value) & (_totals(value) == value.shape[-1])

    def size(self, n):
        m = n * (n - 1)
        return math.comb(m + n - 1, n) if m else 0

    def enumerate(self, n):
        rows, cols = _cells(n)
        m, count = rows.numel(), self.size(n)
        W = torch.zeros(count, n, n, dtype=torch.long)
        if count == 0:
            return W
        # multisets of n cells, as the cells' counts
        picks = torch.combinations(torch.arange(m), r=n, with_replacement=True).reshape(count, n)
        counts = torch.zeros(count, m, dtype=torch.long).scatter_add_(
            1, picks, torch.ones_like(picks))
        W[:, rows, cols] = counts
        return W


class SymmetricBinaryGraphs(BinaryGraphs):
    r""":math:`\Omega_{\tilde B}`: simple undirected graphs (symmetric, entries in {0, 1}, zero
    diagonal), the support of UMAP's symmetrised graph."""

    rule = "entries in {0, 1}, zero diagonal, symmetric"

    def check(self, value):
        return super().check(value) & _symmetric(value)

    def size(self, n):
        return 2 ** (n * (n - 1) // 2)

    def enumerate(self, n):
        i, j = torch.triu_indices(n, n, 1)
        bits = _bits(self.size(n), i.numel())
        W = torch.zeros(self.size(n), n, n, dtype=torch.long)
        W[:, i, j] = bits
        W[:, j, i] = bits
        return W


#: non-negative integer graphs without self loops (multi-edges allowed)
integer_graphs = GraphSupport()
#: :math:`\Omega_B`
binary_graphs = BinaryGraphs()
#: :math:`\Omega_D`
unit_degree_graphs = UnitDegreeGraphs()
#: :math:`\Omega_E`
n_edge_graphs = NEdgeGraphs()
#: :math:`\Omega_{\tilde B}`
symmetric_binary_graphs = SymmetricBinaryGraphs()
