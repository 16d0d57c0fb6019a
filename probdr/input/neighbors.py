"""k-nearest neighbours: exact (blocked brute force, or a pruned cell search) and, for very large
n, approximate (an inverted-file search in torch; pynndescent when asked).

Up to ``EXACT_KNN_MAX_N`` points ``knn(method="auto")`` returns exact neighbours: brute force up to
5,000 points, then a k-means cell search with triangle-inequality, Voronoi and slab pruning
(:func:`knn_pruned`). On well-separated clusters it visits a small fraction of the pairs; on 100,000
overlapping 50-dimensional Gaussian blobs, where a point's neighbours can lie anywhere in its own
cluster, it visits about 16% of them. Beyond 20,000 points approximate neighbours come from
:func:`probdr.input.ivf.knn_ivf`, in torch on ``X``'s device (no numba): on deformed MNIST (50 PCs,
90 neighbours) it finds 98.0 % of the exact neighbours in 5.6 s instead of 15.5 s at 40,000 points,
97.6 % in 8.1 s instead of 40.9 s at 70,000 (2 cores). ``method="pynndescent"`` uses pynndescent
instead, an optional dependency (``pip install probdr[ann]``).
"""

from __future__ import annotations

import numpy as np
import torch

from .._compute.alloc import heap_reuse
from .._compute.allpairs import pairwise_sq_distances
from .._compute.threads import governed
from .._utils import check_data, check_number
from .ivf import centroid_d2, kmeans, knn_ivf, nearest_centroid, rerank

__all__ = ["knn", "knn_approximate", "knn_brute", "knn_exact", "knn_ivf", "knn_pruned",
           "knn_pynndescent", "knn_query", "pairwise_sq_distances"]

#: above this many points ``method="auto"`` switches from exact to approximate neighbours (short
#: lists probe more cells there: :func:`probdr.input.ivf.default_probes`)
EXACT_KNN_MAX_N = 20_000


def _block_rows(n: int, n_cols: int, block_bytes: float = 2**27) -> int:
    return max(1, min(n, int(block_bytes // (8 * max(n_cols, 1)))))


def knn_brute(X: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact k nearest neighbours by blocked brute force in float64 (self excluded).

    Returns ``(indices, sq_distances)`` of shape ``(n, k)``, sorted by distance. Duplicated rows
    are neighbours at distance 0; the point itself is never its own neighbour.
    """
    n = X.shape[0]
    X64 = X.to(torch.float64)
    # centring improves the accuracy of the |a|^2 + |b|^2 - 2ab expansion
    X64 = X64 - X64.mean(0, keepdim=True)
    idx = torch.empty(n, k, dtype=torch.long)
    dist = torch.empty(n, k, dtype=torch.float64)
    bs = _block_rows(n, n)
    for s in range(0, n, bs):
        e = min(n, s + bs)
        d2 = pairwise_sq_distances(X64[s:e], X64)
        d2.diagonal(s).fill_(float("inf"))  # the pairs (i, i) of rows s:e
        vals, ind = torch.topk(d2, k, dim=1, largest=False, sorted=True)
        idx[s:e], dist[s:e] = ind, vals
    return idx, dist


def knn_query(X_ref: torch.Tensor, X_new: torch.Tensor, k: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact ``k`` nearest rows of ``X_ref`` for every row of ``X_new`` (blocked brute force in
    float64, centred on ``X_ref``'s mean): ``(indices, squared distances)``, each ``(m, k)``,
    nearest first. A new row equal to a reference row has it as a neighbour at distance 0."""
    n = X_ref.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"k must lie in [1, {n}] (the number of reference points), got {k}.")
    mu = X_ref.to(torch.float64).mean(0, keepdim=True)
    R = X_ref.to(torch.float64) - mu
    Q = X_new.to(torch.float64) - mu
    m = Q.shape[0]
    idx = torch.empty(m, k, dtype=torch.long)
    dist = torch.empty(m, k, dtype=torch.float64)
    bs = _block_rows(m, n)
    with heap_reuse():
        for s in range(0, m, bs):
            e = min(m, s + bs)
            vals, ind = torch.topk(pairwise_sq_distances(Q[s:e], R), k, dim=1, largest=False,
                                   sorted=True)
            idx[s:e], dist[s:e] = ind, vals
    return idx, dist


def _cell_extents(Xs64: torch.Tensor, cent64: torch.Tensor, cell_of: torch.Tensor,
                  counts: torch.Tensor, block: int = 64) -> torch.Tensor:
    """``E[j, a] = min over the points x of cell j of <x, c_j - c_a>`` (float64), from the
    cell-sorted points; computed for blocks of centroids so the points are read once per block."""
    own = (Xs64 * cent64[cell_of]).sum(1, keepdim=True)  # <x, c_cell(x)>
    nz = counts > 0
    E = torch.full((cent64.shape[0], cent64.shape[0]), float("inf"), dtype=torch.float64)
    for s in range(0, cent64.shape[0], block):
        G = own - Xs64 @ cent64[s:s + block].T
        E[nz, s:s + block] = torch.segment_reduce(G, "min", lengths=counts[nz], axis=0)
    return E


def _merge(v: torch.Tensor, pos: torch.Tensor, d2: torch.Tensor, cpos: torch.Tensor):
    """Merge candidate distances ``d2`` (rows: queries, columns: points ``cpos``) into each row's
    current best list ``(v, pos)`` (sorted or not, same length). Only the entries below a row's
    current worst can enter, usually a few, so they are gathered first and one small top-k
    merges them."""
    kk = v.shape[1]
    r, c = (d2 < v.max(1, keepdim=True).values).nonzero(as_tuple=True)  # row-major order
    if not r.numel():
        return v, pos
    cnt = torch.bincount(r, minlength=d2.shape[0])
    m = int(cnt.max())
    slot = torch.arange(r.numel()) - (cnt.cumsum(0) - cnt)[r]
    v2 = torch.full((d2.shape[0], m), float("inf"), dtype=d2.dtype)
    v2[r, slot] = d2[r, c]
    p2 = torch.zeros((d2.shape[0], m), dtype=pos.dtype)
    p2[r, slot] = cpos[c]
    vs, j = torch.topk(torch.cat([v, v2], 1), kk, dim=1, largest=False)
    return vs, torch.cat([pos, p2], 1).gather(1, j)


def knn_pruned(X: torch.Tensor, k: int, n_cells: int | None = None,
               random_state: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Exact k nearest neighbours by a cell search with pruning (self excluded).

    The points are split into Voronoi cells of k-means centroids. The queries of one cell are
    compared, by one matrix product, with the points of the nearest cells holding at least
    :math:`2k` points. Every other cell is searched only by the queries whose current k-th
    distance exceeds a lower bound on their distance to that cell, the largest of

    * the ball bound :math:`\|q - c_j\| - r_j`,
    * the Voronoi (half-space) bound :math:`(\|q - c_j\|^2 - \|q - c_a\|^2) / (2\|c_j - c_a\|)`
      (:math:`c_a` the query's own centroid),
    * the slab bound :math:`\min_{x \in j} \langle x, u\rangle - \langle q, u\rangle` with
      :math:`u = (c_j - c_a) / \|c_j - c_a\|`. In high dimension a cell is a thin shell far from
      its centroid but narrow along any one direction, so this one prunes most.

    The remaining cells are searched nearest first, in chunks of about :math:`n/16` points, and
    each chunk's results tighten the bounds for the next. The search runs in float32 and keeps
    :math:`k + \max(8, k/4)` candidates, which are re-ranked with float64 distances; the bounds
    carry a float32 safety margin. The result is the exact k-nearest-neighbour list up to ties at
    the k-th distance.
    """
    n = X.shape[0]
    cells = _CellIndex(X, k, n_cells, random_state)
    best_pos = torch.empty(n, cells.kk, dtype=torch.long)  # neighbours as cell-sorted positions
    for a in range(cells.n_cells):
        qs, qe = cells.starts[a], cells.starts[a + 1]
        if qe > qs:
            best_pos[qs:qe] = cells.search(a, k)
    # back to the input order; exact float64 distances of the kk candidates; keep the best k
    idx = torch.empty(n, cells.kk, dtype=torch.long)
    idx[cells.order] = cells.order[best_pos]
    return rerank(cells.X64, idx, k)


class _CellIndex:
    """The cells of :func:`knn_pruned`: k-means centroids, the points sorted by cell (a cell's
    points are one contiguous block), each cell's radius and slab extents, and the search of
    one cell's queries."""

    def __init__(self, X: torch.Tensor, k: int, n_cells: int | None, random_state: int):
        n = X.shape[0]
        X64 = X.to(torch.float64)
        self.X64 = X64 = X64 - X64.mean(0, keepdim=True)
        X32 = X64.to(torch.float32)
        if n_cells is None:
            n_cells = int(min(1024, max(8, round(2 * n ** 0.5))))
        self.n_cells = n_cells = min(n_cells, max(1, n // max(2 * k, 1)))
        gen = torch.Generator().manual_seed(int(random_state))
        self.cent = cent = kmeans(X32, n_cells, gen)
        assign, self.own = nearest_centroid(X32, cent)
        self.order = order = torch.argsort(assign, stable=True)
        self.counts = counts = torch.bincount(assign, minlength=n_cells)
        start = torch.zeros(n_cells + 1, dtype=torch.long)
        start[1:] = counts.cumsum(0)
        self.radius = torch.zeros(n_cells, dtype=torch.float32).scatter_reduce_(
            0, assign, self.own.sqrt(), "amax", include_self=True)
        cc = torch.cdist(cent.double(), cent.double()).float()      # centroid distances
        self.near = torch.argsort(cc.fill_diagonal_(-1.0), dim=1)  # each cell first in its list
        self.cc = cc.fill_diagonal_(0.0)
        self.Xs = X32[order]
        self.sqs = (self.Xs * self.Xs).sum(1)
        self.cent64 = cent.double()  # the slab bound in float64: it divides by centroid distances
        self.ext = _cell_extents(X64[order], self.cent64, assign[order], counts)
        self.scale2 = float(self.sqs.max()) if n else 1.0
        self.slack = (1e-5 * self.scale2) ** 0.5  # float32 error allowance on distances
        self.kk = kk = min(n - 1, k + max(8, k // 4))  # extra candidates, re-ranked in float64
        self.sizes, self.starts = counts.tolist(), start.tolist()
        self.chunk = max(n // 16, 4 * kk)  # points searched per round beyond the first pass

    def positions(self, cells) -> torch.Tensor:
        return torch.cat([torch.arange(self.starts[j], self.starts[j] + self.sizes[j])
                          for j in cells])

    def search(self, a: int, k: int) -> torch.Tensor:
        """The ``kk`` candidates (cell-sorted positions) of the queries of cell ``a``."""
        qs, qe = self.starts[a], self.starts[a + 1]
        xq, Xs, sqs = self.Xs[qs:qe], self.Xs, self.sqs
        rows = torch.arange(qe - qs)
        # first pass: the nearest cells (its own first) with enough points for kk neighbours
        csum = self.counts[self.near[a]].cumsum(0)
        need0 = torch.tensor(max(2 * k + 1, self.kk + 1 + self.sizes[a]))
        m0 = min(self.n_cells, int(torch.searchsorted(csum, need0)) + 1)
        cpos = self.positions(self.near[a, :m0].tolist())
        d2 = torch.addmm(sqs[cpos][None, :], xq, Xs[cpos].T, alpha=-2.0)  # |c|^2 - 2 q.c
        d2[rows, rows] = float("inf")  # the candidates start with the queries themselves
        v, j = torch.topk(d2, min(self.kk, cpos.numel() - 1), dim=1, largest=False)
        pos = cpos[j]
        qq = sqs[qs:qe]
        kth = (v[:, k - 1] + qq).clamp_min(0).sqrt()
        rest = self.near[a, m0:]
        if not rest.numel():
            return pos
        lb = self.bounds(a, rest, xq, qs, qe)  # lower bounds on the cells' distances
        rest_sizes = self.counts[rest]
        # rounds of nearest-first chunks of cells, each searched only by the queries whose
        # bound does not rule it out; each round's k-th distances tighten the next bounds
        while True:
            needm = lb < (kth + self.slack)[:, None]
            need = needm.any(0).nonzero().squeeze(1)
            if not need.numel():
                return pos
            csz = rest_sizes[need].cumsum(0)
            take = need[: int(torch.searchsorted(csz, torch.tensor(self.chunk))) + 1]
            qsel = needm[:, take].any(1).nonzero().squeeze(1)
            lb[:, take] = float("inf")  # searched
            cpos = self.positions(rest[take].tolist())
            d2 = torch.addmm(sqs[cpos][None, :], xq[qsel], Xs[cpos].T, alpha=-2.0)
            vs, pos[qsel] = _merge(v[qsel], pos[qsel], d2, cpos)
            v[qsel] = vs
            kth[qsel] = (vs[:, k - 1] + qq[qsel]).clamp_min(0).sqrt()

    def bounds(self, a: int, rest: torch.Tensor, xq, qs: int, qe: int) -> torch.Tensor:
        """Lower bounds on the distances of cell ``a``'s queries to the cells ``rest``: the
        largest of the ball, half-space and slab bounds (:func:`knn_pruned`)."""
        cc = self.cc
        dq = centroid_d2(xq, self.cent[rest])                       # (|q|, R) squared
        ball = dq.sqrt() - self.radius[rest][None, :]
        half = (dq - self.own[self.order[qs:qe]][:, None]) / (
            2 * cc[a, rest][None, :].clamp_min(1e-12))
        # slab bound: with u the unit vector from c_a to c_j, |q - x| >= <x - q, u> >=
        # min_{x in j} <x, u> - <q, u>. In high dimension a cell is a thin shell far from its
        # centroid but narrow along any one direction: much tighter than the ball or half-space
        # bound (the minima over each cell are precomputed, ``ext``)
        qa = self.X64[self.order[qs:qe]]
        ccr = cc[a, rest].double()
        slab = ((self.ext[rest, a][None, :] - qa @ (self.cent64[rest] - self.cent64[a]).T)
                / ccr.clamp_min(1e-12)[None, :]).float()
        # (near-)coincident centroids: no direction, no bound (rounding / tiny would blow up)
        slab[:, ccr <= 1e-6 * self.scale2 ** 0.5] = float("-inf")
        return torch.maximum(torch.maximum(ball, half), slab)


def knn_exact(X: torch.Tensor, k: int, random_state: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact k nearest neighbours (self excluded): brute force up to 5,000 points, else the
    pruned cell search (:func:`knn_pruned`). ``(indices, sq_distances)``, sorted by distance."""
    with heap_reuse():  # the blocks' distance matrices are reused, not mapped afresh
        if X.shape[0] <= 5000:
            return knn_brute(X, k)
        return knn_pruned(X, k, random_state=random_state)


def knn_approximate(X: torch.Tensor, k: int, random_state: int = 0, n_probe: int | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Approximate k nearest neighbours in torch (self excluded): the inverted-file search on
    k-means cells, :func:`probdr.input.ivf.knn_ivf`, on ``X``'s device. ``(indices,
    sq_distances)``, sorted by distance."""
    return knn_ivf(X, k, n_probe=n_probe, random_state=random_state)


def knn_pynndescent(X: torch.Tensor, k: int, random_state: int = 0
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Approximate neighbours by NN-descent (pynndescent, an optional dependency: ``pip install
    probdr[ann]``); self excluded; on the CPU. NN-descent's recall depends on the graph degree it
    works with: on 100,000 overlapping 50-D blobs, k = 15 built with 16 neighbours has recall
    0.76 against exact neighbours; built with 48 and truncated, 0.993 (16.6 s instead of 5.6 s,
    one thread); k = 90: 0.998. So the graph is built with at least 48 neighbours (also the back
    end of :func:`probdr.input.distances.knn_metric` for metrics other than the Euclidean
    ones)."""
    idx, d = pynndescent_search(X, k, "euclidean", {}, random_state)
    return idx.to(X.device), (d**2).to(X.device)


def pynndescent_search(X, k: int, name="euclidean", params=None, random_state: int = 0):
    """Approximate neighbours by NN-descent under the metric (self excluded)."""
    try:
        from pynndescent import NNDescent
    except ImportError as exc:  # pragma: no cover - optional dependency
        raise ImportError("this search needs pynndescent: pip install pynndescent (or "
                          "probdr[ann]); neighbors='approximate' is the torch search, "
                          "neighbors='exact' the exact one.") from exc
    import scipy.sparse as sp

    data = X.astype(np.float32) if sp.issparse(X) else X.detach().cpu().numpy().astype(np.float32)
    n = data.shape[0]
    index = NNDescent(data, metric=name, metric_kwds=params or None,
                      n_neighbors=min(n, max(k + 1, 48)), random_state=random_state,
                      low_memory=True)
    ind, d = (np.asarray(a) for a in index.neighbor_graph)
    is_self = ind == np.arange(n)[:, None]
    order = np.argsort(is_self, axis=1, kind="stable")[:, :k]
    out_i = np.take_along_axis(ind, order, axis=1).astype(np.int64)
    out_d = np.take_along_axis(d, order, axis=1).astype(np.float64)
    return torch.from_numpy(out_i), torch.from_numpy(out_d)


def knn(X: torch.Tensor, k: int, method: str = "auto", random_state: int = 0):
    """k nearest neighbours (self excluded): ``(indices, squared distances)``, each ``(n, k)``.

    ``method``: ``"exact"`` (:func:`knn_exact`: brute force up to 5,000 points, else the pruned
    cell search), ``"approximate"`` (:func:`knn_approximate`, the inverted-file search in torch),
    ``"pynndescent"`` (:func:`knn_pynndescent`, needs the optional pynndescent), or ``"auto"``
    (exact up to ``EXACT_KNN_MAX_N`` = 20,000 points, the torch approximate search above).
    ``X``: ``(n, p)`` finite rows, numpy or torch.
    """
    X = check_data(X)
    n = X.shape[0]
    k = check_number(k, "k", integer=True)
    if not 1 <= k <= n - 1:
        raise ValueError(f"k must lie in [1, n-1] = [1, {n - 1}], got {k}.")
    if method == "auto":
        method = "exact" if n <= EXACT_KNN_MAX_N else "approximate"
    search = {"exact": knn_exact, "approximate": knn_approximate,
              "pynndescent": knn_pynndescent}.get(method)
    if search is not None:
        with governed(None):  # on the cores other processes leave free
            return search(X, k, random_state=random_state)
    raise ValueError("method must be 'auto', 'exact', 'approximate' or 'pynndescent', got "
                     f"{method!r}.")
