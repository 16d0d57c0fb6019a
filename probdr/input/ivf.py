r"""k-means cells and the approximate k-nearest-neighbour search on them (:func:`knn_ivf`), in
torch on the data's device: no compiled extension, no host round trip.

The search is an inverted file (IVF) on two levels of k-means cells of about ``cell_size``
points. Every point *probes* the ``n_probe`` cells whose centroids are nearest to it, and is
searched against their points. Probing per point finds far more true neighbours than probing the
cells nearest to the point's own centroid (on 70,000 deformed MNIST digits, 16 probed cells:
recall@15 0.97 against 0.83), but comparing each point with its own cell list means one gather
per point. Here the points are grouped by their nearest cell instead: the queries of one cell are
compared, by one dense matrix product, with the points of every cell that any of them probes,
and the ``k`` nearest are kept by one ``topk``. The union costs a few times the per-point
candidate lists but keeps the work in matrix products over contiguous blocks of the cell-sorted
data; with cells of a fixed size it is a few thousand candidates per query at any ``n``, so the
search costs :math:`O(n)` matrix-product work after the k-means.

The cells: ``sqrt(n / cell_size)`` coarse k-means centroids, each coarse cell split by k-means
on its own points into cells of about ``cell_size`` points. A point's probed cells are the
``n_probe`` nearest, by its own distances, among the ``n_near`` fine centroids nearest to the
centroid of its first cell (a kNN graph on the centroids). The search runs in float32 on the
centred data; the ``k + max(4, k/8)`` best candidates of every point are re-ranked with float64
distances (float32 on MPS, which has no float64), which are the distances returned.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch

__all__ = ["knn_ivf"]


def kmeans(X: torch.Tensor, n_cells: int, gen: torch.Generator, n_iter: int = 8,
           per_cell: int = 40):
    """Lloyd's k-means on a sample of at most ``per_cell`` points per cell (centroids only).
    ``gen`` is a CPU generator: the same sample and start on every device."""
    n = X.shape[0]
    perm = torch.randperm(n, generator=gen, device=gen.device).to(X.device)
    sample = X[perm[: min(n, per_cell * n_cells)]]
    start = torch.randperm(sample.shape[0], generator=gen, device=gen.device).to(X.device)
    cent = sample[start[:n_cells]].clone()
    for _ in range(n_iter):
        a = nearest_centroid(sample, cent)[0]
        s = torch.zeros_like(cent).index_add_(0, a, sample)
        cnt = torch.bincount(a, minlength=n_cells)
        cent = torch.where(cnt[:, None] > 0, s / cnt.clamp_min(1)[:, None], cent)
    return cent


def centroid_d2(x: torch.Tensor, cent: torch.Tensor) -> torch.Tensor:
    """Squared distances of the rows of ``x`` to the centroids (clamped at 0)."""
    d2 = torch.addmm((cent * cent).sum(1)[None, :] + (x * x).sum(1, keepdim=True), x, cent.T,
                     alpha=-2.0)
    return d2.clamp_min_(0.0)


def nearest_centroid(X: torch.Tensor, cent: torch.Tensor, block: int = 8192):
    """Nearest centroid of every row and the squared distance to it, blocked."""
    out_a, out_d = [], []
    for s in range(0, X.shape[0], block):
        d, a = centroid_d2(X[s:s + block], cent).min(1)
        out_a.append(a)
        out_d.append(d)
    return torch.cat(out_a), torch.cat(out_d)


@contextmanager
def _one_thread(device: torch.device):
    """One intra-op thread on the CPU for a phase of many small operations (k-means of every
    coarse cell, a probe choice per cell): each parallel region's barrier costs more than the
    work there, and on shared cores a descheduled worker stalls every one of them."""
    before = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _segments(groups: torch.Tensor, n_groups: int):
    """Order of the rows by group and the group boundaries (a list of ``n_groups + 1``)."""
    order = torch.argsort(groups, stable=True)
    bounds = torch.bincount(groups, minlength=n_groups).cumsum(0)
    return order, [0] + bounds.tolist()


def _fine_cells(X32: torch.Tensor, cell_size: int, gen: torch.Generator):
    """Two-level k-means: the fine centroids ``F`` and each point's nearest fine centroid
    within its coarse cell."""
    n, dev = X32.shape[0], X32.device
    n_fine = max(1, n // cell_size)
    n_coarse = max(1, round(n_fine ** 0.5))
    coarse = kmeans(X32, n_coarse, gen)
    corder, cb = _segments(nearest_centroid(X32, coarse)[0], n_coarse)
    cents, first = [], torch.empty(n, dtype=torch.long, device=dev)
    n_done = 0
    for c in range(n_coarse):
        rows = corder[cb[c]:cb[c + 1]]
        if not rows.numel():
            continue
        pts = X32[rows]
        cent = kmeans(pts, max(1, round(rows.numel() / cell_size)), gen)
        first[rows] = n_done + nearest_centroid(pts, cent)[0]
        cents.append(cent)
        n_done += cent.shape[0]
    return torch.cat(cents), first


def _probes(X32: torch.Tensor, F: torch.Tensor, first: torch.Tensor, n_probe: int, n_near: int,
            workers: int = 1):
    """The ``n_probe`` fine cells nearest to every point (nearest first), chosen among the
    ``n_near`` centroids nearest to the centroid of its first cell; the cells are shared among
    ``workers`` threads."""
    n_fine, dev = F.shape[0], X32.device
    m = min(n_near, n_fine)
    near = torch.empty(n_fine, m, dtype=torch.long, device=dev)
    for s in range(0, n_fine, 2048):
        d = centroid_d2(F[s:s + 2048], F)
        r = torch.arange(d.shape[0], device=dev)
        d[r, r + s] = -1.0  # a centroid first in its own list
        near[s:s + 2048] = torch.topk(d, m, 1, largest=False, sorted=True).indices
    probe = torch.empty(X32.shape[0], n_probe, dtype=torch.long, device=dev)
    order, b = _segments(first, n_fine)

    def cell(f):
        rows = order[b[f]:b[f + 1]]
        if rows.numel():
            d = centroid_d2(X32[rows], F[near[f]])
            probe[rows] = near[f][torch.topk(d, n_probe, 1, largest=False, sorted=True).indices]

    _each_cell(cell, n_fine, workers)
    return probe


def _each_cell(task, n_cells: int, workers: int) -> None:
    """``task(f)`` for every cell ``f``, shared among ``workers`` threads (torch releases the
    GIL; each task writes its own rows) or in order on the calling thread."""
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(task, range(n_cells), chunksize=16))
    else:
        for f in range(n_cells):
            task(f)


def _unique_codes(codes: torch.Tensor, size: int, mark_max: int = 2**26) -> torch.Tensor:
    """The distinct values of ``codes`` (integers in ``[0, size)``), ascending: ``torch.unique``,
    or, for up to ``mark_max`` possible values, one flag per value set and read back in order
    (the same numbers, without sorting every code: 0.03 s against 0.22 s for 70,000 points'
    48 probes)."""
    if size > mark_max:
        return torch.unique(codes)
    mark = torch.zeros(size, dtype=torch.bool, device=codes.device)
    mark[codes.reshape(-1)] = True
    return mark.nonzero().squeeze(1)


#: columns of a block in :func:`smallest`'s first stage
BLOCK_COLUMNS = 64
#: rows of at least this many times ``k * BLOCK_COLUMNS`` columns take the two stages (fewer:
#: one ``topk``, which then costs about as much)
BLOCK_MIN = 4


def _two_stages(m: int, k: int) -> bool:
    """Whether :func:`smallest` takes two stages for rows of ``m`` entries (whole blocks)."""
    return m >= BLOCK_MIN * k * BLOCK_COLUMNS


def smallest(d: torch.Tensor, k: int) -> torch.Tensor:
    """The column indices of the ``k`` smallest entries of every row of ``d`` (unsorted): the
    entries of ``torch.topk(d, k, largest=False)``, in two stages when the rows are long and
    their length a multiple of :data:`BLOCK_COLUMNS`. The rows are cut into blocks of that many
    columns, and the ``k`` smallest are searched only in the ``k`` blocks of smallest minimum:
    an entry among the ``k`` smallest has its block's minimum at or below it, and more than
    ``k - 1`` blocks of smaller minima would hold ``k`` smaller entries. A ``topk`` reads every
    entry and keeps a heap (about 4.5 ns an entry on one core); a block minimum is a vectorised
    pass (about 0.2 ns), so for 47 queries against 10,900 candidates (the median group of
    70,000 deformed MNIST digits, ``k`` = 19) the selection takes 0.7 ms instead of 1.6 ms.
    Among equal entries at the ``k``-th place the two ways may keep different ones."""
    rows, m = d.shape
    c = BLOCK_COLUMNS
    if m % c or not _two_stages(m, k):
        return torch.topk(d, k, dim=1, largest=False, sorted=False).indices
    blocks = d.view(rows, m // c, c)
    near = torch.topk(blocks.amin(2), k, dim=1, largest=False, sorted=False).indices
    cand = blocks[torch.arange(rows, device=d.device)[:, None], near].reshape(rows, k * c)
    pick = torch.topk(cand, k, dim=1, largest=False, sorted=False).indices
    return near.gather(1, torch.div(pick, c, rounding_mode="floor")) * c + pick % c


def _search(X32: torch.Tensor, F: torch.Tensor, probe: torch.Tensor, kk: int,
            workers: int = 1):
    """The ``kk`` nearest candidates of every point (float32, unsorted), the queries grouped by
    their nearest cell and searched in the union of the cells the group probes; the groups are
    shared among ``workers`` threads."""
    n, dev = X32.shape[0], X32.device
    n_fine = F.shape[0]
    cell = probe[:, 0]
    order, b = _segments(cell, n_fine)
    Xs = X32[order]  # cell-sorted: every cell is a contiguous block
    sqs = (Xs * Xs).sum(1)
    counts = torch.bincount(cell, minlength=n_fine)
    start = torch.cumsum(counts, 0) - counts
    # the cells probed by the queries of each cell: sorted pairs (cell, probed), no repeats
    pairs = _unique_codes(cell[:, None] * n_fine + probe, n_fine * n_fine)
    pa, pb = pairs // n_fine, pairs % n_fine
    keep = pa != pb
    pa, pb = pa[keep], pb[keep]
    pbounds = [0] + torch.bincount(pa, minlength=n_fine).cumsum(0).tolist()
    best = torch.empty(n, kk, dtype=torch.long, device=dev)

    def group(f):
        qs, qe = b[f], b[f + 1]
        if qe == qs:
            return
        cells = torch.cat([torch.tensor([f], device=dev), pb[pbounds[f]:pbounds[f + 1]]])
        lens = counts[cells]
        tot = int(lens.sum())
        if tot <= kk:  # too few candidates (small n): add the cells nearest to this one
            others = torch.argsort(centroid_d2(F[f:f + 1], F)[0])
            others = others[~torch.isin(others, cells)]
            more = int(torch.searchsorted(counts[others].cumsum(0),
                                          torch.tensor(kk + 1 - tot, device=dev))) + 1
            cells = torch.cat([cells, others[:more]])
            lens = counts[cells]
            tot = int(lens.sum())
        # positions of the candidates in Xs: the cells' blocks one after the other, own first
        cpos = torch.repeat_interleave(start[cells] - (torch.cumsum(lens, 0) - lens), lens,
                                       output_size=tot) + torch.arange(tot, device=dev)
        pad = -tot % BLOCK_COLUMNS if _two_stages(tot, kk) else 0
        if pad:  # whole blocks of columns for the two-stage selection: padded by copies of the
            # first candidate at an infinite distance, never kept
            cpos = torch.cat([cpos, cpos[:1].expand(pad)])
        Xc, sqc = Xs.index_select(0, cpos), sqs.index_select(0, cpos)
        sqc[tot:] = float("inf")
        step = max(1, 2**24 // tot)  # rows per block: at most 64 MiB of distances
        for s in range(qs, qe, step):
            e = min(qe, s + step)
            d2 = torch.addmm(sqc[None, :], Xs[s:e], Xc.T, alpha=-2.0)  # |c|^2 - 2 q.c
            r = torch.arange(e - s, device=dev)
            d2[r, r + (s - qs)] = float("inf")  # the queries are the first candidates
            best[s:e] = cpos[smallest(d2, kk)]

    _each_cell(group, n_fine, workers)
    idx = torch.empty_like(best)
    idx[order] = order[best]
    return idx


#: lists shorter than this probe :data:`SHORT_LIST_PROBES` cells
SHORT_LIST = 30
SHORT_LIST_PROBES = 48


def default_probes(k: int) -> int:
    """The cells a point probes for ``k`` neighbours: ``16 + k // 8`` (27 for k = 90: recall
    >= 0.95 against exact neighbours on deformed MNIST at 100,000 and 1,000,000 points), and
    48 for lists shorter than 30. A missed neighbour is a larger share of a short list, and
    UMAP's memberships hinge on each point's nearest one: on 70,000 deformed MNIST points with
    k = 15, 17 cells give recall 0.982 (0.990 for the first neighbour) and UMAP's 5-NN accuracy
    0.928 / 0.930 (seeds 0 and 1) against 0.936 / 0.936 on exact lists; 48 cells give recall
    0.993 and 0.937 / 0.937, in 2.0 s against the exact search's 8.1 s."""
    return SHORT_LIST_PROBES if k < SHORT_LIST else 16 + k // 8


def knn_ivf(X: torch.Tensor, k: int, n_probe: int | None = None, random_state: int = 0, *,
            cell_size: int = 48, n_near: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Approximate k nearest neighbours (self excluded) by the inverted-file search described in
    the module docstring, on ``X``'s device: ``(indices, squared distances)``, each ``(n, k)``,
    nearest first (int64, and float64 except on MPS).

    Parameters
    ----------
    X : tensor (n, p)
    k : int
        Neighbours per point, ``1 <= k <= n - 1``.
    n_probe : int, optional
        Cells each point probes; more is slower and finds more true neighbours. Default
        :func:`default_probes`.
    random_state : int
        Seeds the k-means samples and starts; the result is a function of it (on CPU; CUDA's
        atomic additions in the centroid updates may reorder float sums).
    cell_size : int
        Points per k-means cell (the size of a query group).
    n_near : int
        Centroids nearest to a point's first cell among which its probed cells are chosen.
    """
    n, p = X.shape
    if not 1 <= k <= n - 1:
        raise ValueError(f"k must lie in [1, n-1] = [1, {n - 1}], got {k}.")
    dev = X.device
    hi = torch.float32 if dev.type == "mps" else torch.float64
    Xh = X.to(hi)
    Xh = Xh - Xh.mean(0, keepdim=True)
    X32 = Xh.to(torch.float32)
    gen = torch.Generator().manual_seed(int(random_state))
    n_probe = default_probes(k) if n_probe is None else int(n_probe)
    kk = min(n - 1, k + max(4, k // 8))  # extra candidates, re-ranked in float64
    workers = torch.get_num_threads() if dev.type == "cpu" else 1
    with _one_thread(dev):
        F, first = _fine_cells(X32, max(1, int(cell_size)), gen)
        probe = _probes(X32, F, first, max(1, min(n_probe, F.shape[0])), max(1, int(n_near)),
                        workers)
        idx = _search(X32, F, probe, kk, workers)
        del probe, X32
    return rerank(Xh, idx, k)  # on all threads (large blocks; the same numbers)


def rerank(X: torch.Tensor, idx: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` nearest of each row's candidate list ``idx`` (n, kk) by squared distances
    recomputed in ``X``'s dtype (the searches' float64 re-ranking): ``(indices, d2)``, sorted."""
    n, kk = idx.shape
    p = X.shape[1]
    d = torch.empty(n, kk, dtype=X.dtype, device=X.device)
    bs = max(1, 2**20 // (kk * p))  # small blocks: the temporaries stay in cache
    for s in range(0, n, bs):
        nb = X.index_select(0, idx[s:s + bs].reshape(-1)).view(-1, kk, p)
        d[s:s + bs] = nb.sub_(X[s:s + bs, None, :]).pow_(2).sum(2)
    d, o = torch.topk(d, k, dim=1, largest=False, sorted=True)
    return idx.gather(1, o), d
