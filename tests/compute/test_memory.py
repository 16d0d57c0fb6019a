"""The million-point memory diet changes no number: blocked bandwidth bisection, edge lists kept
in coalesced order without a copy, sparse tensors sharing one index tensor, the one-sort folding of
a graph into unordered pairs."""

import pytest
import torch

import probdr
import probdr.laws.edge_lists as edge_lists
from probdr._compute import alloc
from probdr.input import affinities
from probdr.laws.edge_lists import _fold
from probdr.laws.weights import SparseWeights, sparse_coo, sparse_to


def test_blocked_bisection_gives_the_numbers_of_one_pass(monkeypatch):
    """Every row's bisection runs the same halvings, so any block size gives identical bandwidths
    (and a block of one row works)."""
    g = torch.Generator().manual_seed(0)
    d2 = torch.rand(301, 24, dtype=torch.float64, generator=g).cumsum(1)
    d2[7] = 1.0  # a row at one distance: bandwidth 1
    whole = affinities.entropic_bandwidths(d2, 8.0)
    for block in (24, 24 * 5, 24 * 64):
        monkeypatch.setattr(affinities, "BISECTION_BLOCK", block)
        assert torch.equal(affinities.entropic_bandwidths(d2, 8.0), whole)
    assert whole[7] == 1.0
    P = affinities.entropic_affinity(d2, 8.0)
    assert torch.allclose(affinities.perplexity_of_rows(P)[torch.arange(301) != 7],
                          torch.tensor(8.0, dtype=torch.float64), rtol=1e-5)


def _knn_lists(n=60, k=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randperm(n - 1, generator=g)[:k] for _ in range(n)])
    idx = idx + (idx >= torch.arange(n)[:, None]).long()  # self excluded
    return torch.arange(n).repeat_interleave(k), idx, torch.randn(n * k, generator=g,
                                                                  dtype=torch.float64)


def test_sorted_edge_lists_are_kept_without_a_copy_and_match_the_coalesce():
    n, k = 60, 5
    rows, idx, vals = _knn_lists(n, k)
    cols, order = idx.sort(1)
    vals_sorted = vals.view(n, k).gather(1, order).flatten()
    fast = SparseWeights(rows, cols.flatten(), vals_sorted, n)
    # the same edges shuffled and with a diagonal entry take the coalescing path
    perm = torch.randperm(n * k, generator=torch.Generator().manual_seed(1))
    slow = SparseWeights(torch.cat([rows[perm], torch.tensor([3])]),
                         torch.cat([cols.flatten()[perm], torch.tensor([3])]),
                         torch.cat([vals_sorted[perm], torch.tensor([9.0], dtype=torch.float64)]), n)
    assert torch.equal(fast.rows, slow.rows) and torch.equal(fast.cols, slow.cols)
    assert torch.equal(fast.values, slow.values)
    S = fast.to_sparse()
    assert S.is_coalesced() and S._indices().data_ptr() == fast.indices.data_ptr()
    assert torch.equal(S.to_dense(), slow.to_sparse().to_dense())
    S32 = sparse_to(S, torch.float32)
    assert S32.dtype == torch.float32 and S32._indices().data_ptr() == fast.indices.data_ptr()
    # duplicated pairs are summed (the coalescing path)
    dup = SparseWeights(torch.tensor([0, 0, 1]), torch.tensor([2, 2, 0]),
                        torch.tensor([1.0, 2.0, 4.0]), 3)
    assert dup.rows.tolist() == [0, 1] and dup.values.tolist() == [3.0, 4.0]


@pytest.mark.parametrize("part", [None, 1, 37])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_fold_matches_the_coalesce_of_unordered_pairs(dtype, part, monkeypatch):
    """W_ij + W_ji on pairs i < j, diagonal dropped, as the coalesce of (min, max) pairs gives it,
    bit for bit; indices in int32; in one part or in parts of ``part`` edges (ranges of rows)."""
    if part is not None:
        monkeypatch.setattr(edge_lists, "FOLD_PART_EDGES", part)
    g = torch.Generator().manual_seed(2)
    n, m = 50, 400
    r, c = torch.randint(0, n, (m,), generator=g), torch.randint(0, n, (m,), generator=g)
    vals = torch.rand(m, generator=g, dtype=torch.float64)
    vals = (vals * 5).long() if dtype == torch.int64 else vals.to(dtype)  # a graph draw: counts
    W = sparse_coo(torch.stack([r, c]), vals, (n, n)).coalesce()
    fr, fc, fv = _fold(W)
    ri, ci = W.indices()
    lo, hi = torch.minimum(ri, ci), torch.maximum(ri, ci)
    keep = lo != hi
    ref = sparse_coo(torch.stack([lo[keep], hi[keep]]), W.values()[keep], (n, n)).coalesce()
    assert fr.dtype == torch.int32 and fc.dtype == torch.int32
    assert torch.equal(fr.long(), ref.indices()[0]) and torch.equal(fc.long(), ref.indices()[1])
    assert torch.equal(fv, ref.values())
    assert bool((fr < fc).all())


def test_factored_kernel_forms_equal_log_k_and_dlog_k():
    """``log_k_factored`` and ``weighted_dlog_k_`` (free to overwrite d2; the constant factored
    out as a number) give log_k and w * dlog_k for every kernel, to rounding."""
    from probdr.kernels import get_kernel

    d2 = torch.rand(1000, dtype=torch.float64) * 10
    w = torch.rand(1000, dtype=torch.float64)
    for k in (get_kernel("student"), get_kernel("student", dof=3.0), get_kernel("gaussian"),
              get_kernel("umap_odds", a=1.6, b=0.9), get_kernel("umap", a=1.6, b=0.9)):
        t, s = k.log_k_factored(d2.clone())
        torch.testing.assert_close(t * s, k.log_k(d2), rtol=1e-14, atol=0)
        x = d2.clone()
        t, s = k.weighted_dlog_k_(x, w)
        torch.testing.assert_close(t * s, w * k.dlog_k(d2), rtol=1e-14, atol=0)
    # the Cauchy closed forms, written out
    t, s = get_kernel("student").weighted_dlog_k_(d2.clone(), w)
    torch.testing.assert_close(t * s, -w / (1 + d2), rtol=1e-15, atol=0)


def test_scratch_buffers_are_reused_per_loop_and_thread():
    """Inside ``scratch`` a name gets the same memory back (a new one when shape or dtype
    change); outside, and on another thread, fresh tensors; nothing is held after the loop."""
    import threading

    from probdr._compute.alloc import _scratch, buffer, scratch

    assert buffer("x", (10,), torch.float32, "cpu").data_ptr() != 0
    with scratch():
        a = buffer("x", (1000,), torch.float32, "cpu")
        assert buffer("x", (1000,), torch.float32, "cpu").data_ptr() == a.data_ptr()
        assert buffer("y", (1000,), torch.float32, "cpu").data_ptr() != a.data_ptr()
        assert buffer("x", (1000,), torch.float64, "cpu").dtype == torch.float64
        other = []
        t = threading.Thread(target=lambda: other.append(getattr(_scratch, "buffers", None)))
        t.start()
        t.join()
        assert other == [None]  # another thread's fit does not share this loop's buffers
    assert getattr(_scratch, "buffers", None) is None


def test_row_parts_segment_sums_equal_one_pass(monkeypatch):
    """Sorted rows cut into parts at row starts: the row sums are those of one segment sum bit
    for bit, the column sums (parts added in order) equal one scatter to rounding."""
    from probdr._compute import edges

    g = torch.Generator().manual_seed(3)
    n, m = 200, 5000
    rows = torch.randint(0, n, (m,), generator=g).sort().values.int()
    cols = torch.randint(0, n, (m,), generator=g).int()
    src = torch.randn(m, dtype=torch.complex64, generator=g)
    lengths = torch.bincount(rows, minlength=n)
    whole = torch.view_as_complex(torch.segment_reduce(torch.view_as_real(src), "sum",
                                                       lengths=lengths, axis=0))
    monkeypatch.setattr(edges, "PART_EDGES", 700)
    rows = rows.clone()  # no cached parts from another size
    row, col = edges._row_and_col_sums(src, rows, cols, n)
    parts, _ = edges._row_parts(rows, n)
    assert len(parts) > 5 and parts[0][0] == 0 and parts[-1][1] == m
    assert all(rows[s - 1] != rows[s] for s, _, _, _ in parts[1:])  # cut at row starts
    assert torch.equal(row, whole)
    ref = torch.zeros(n, dtype=src.dtype).index_add_(0, cols, src)
    torch.testing.assert_close(col, ref, rtol=1e-5, atol=1e-5)


def _rss_mib():
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS")) / 1024


@pytest.mark.skipif(not alloc._glibc(), reason="glibc heap only")
def test_release_free_returns_what_heap_reuse_keeps():
    """Inside heap_reuse a freed 256 MiB block stays resident (reused by the next step);
    release_free (called by the MAP loop after a phase's first step) gives it back."""
    if not probdr.config.get_heap_reuse():
        pytest.skip("heap reuse turned off")
    with alloc.heap_reuse():
        big = torch.ones(2**26)  # 256 MiB, on the heap under heap reuse
        small = torch.ones(16)   # above it on the heap: freeing big cannot shrink the top
        del big
        kept = _rss_mib()
        alloc.release_free()
        released = _rss_mib()
        del small
    assert kept - released > 200


def test_the_step_context_records_what_it_does(monkeypatch):
    """The MAP loop's one door into the engine room: per loop, heap reuse and scratch buffers;
    per step, the edge sums' values deferred when the loss is not recorded, and the heap's free
    memory released after the loop's first step; each step's record says so."""
    from probdr._compute import edges
    from probdr._compute.alloc import _scratch
    from probdr._compute.step import StepContext

    released = []
    monkeypatch.setattr("probdr._compute.step.release_free", lambda: released.append(1) or True)
    with StepContext() as ctx:
        assert ctx.shard is None  # no process group
        with pytest.raises(RuntimeError, match="inside StepContext.loop"):
            with ctx.step():
                pass
        for _ in range(2):  # two loops (phases): each counts its steps and releases once
            with ctx.loop():
                assert getattr(_scratch, "buffers", None) == {}
                records = []
                for record in (True, False, True):
                    with ctx.step(record) as step:
                        assert getattr(edges._deferred, "on", False) is not record
                    records.append(step)
            assert getattr(_scratch, "buffers", None) is None
            assert [s.number for s in records] == [1, 2, 3]
            assert [s.values_deferred for s in records] == [False, True, False]
            assert [s.released for s in records] == [True, False, False]
            reused = bool(alloc._glibc()) and probdr.config.get_heap_reuse()
            assert all(s.heap_reused is reused and s.shard is None for s in records)
    assert len(released) == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_blocked_log_combinatorial_sum_is_the_one_pass_sum(dtype):
    """The E law's log-combinatorial term, computed in blocks into one float64 buffer, is the
    one-pass ``lgamma(v + 1).sum()`` bit for bit (across a block boundary)."""
    from probdr.laws.edge_lists import sum_lgamma1

    v = torch.rand((1 << 22) + 17, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    v = (v * 4).to(dtype)
    assert torch.equal(sum_lgamma1(v), torch.lgamma(v.to(torch.float64) + 1).sum())


#: run in a fresh process (a clean heap: in a test session's heap a freed block can serve the
#: request whatever the thresholds): how many more bytes glibc holds in mmapped chunks
#: (``mallinfo2().hblkhd``) while a 4 MiB and then a 64 MiB ``malloc`` is live, after a
#: heap-reuse block; the size and a page when mmap serves the block, 0 when the heap does
_MMAP_PROBE = """
import ctypes
from probdr._compute import alloc

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

lib = ctypes.CDLL("libc.so.6")
lib.mallinfo2.restype = MallInfo2
lib.malloc.restype, lib.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
lib.free.argtypes = [ctypes.c_void_p]
with alloc.heap_reuse():
    pass
out = []
for nbytes in (4 << 20, 64 << 20):
    before = lib.mallinfo2().hblkhd
    p = lib.malloc(nbytes)
    out.append(lib.mallinfo2().hblkhd - before)
    lib.free(p)
print(*out)
"""


@pytest.mark.skipif(not alloc._glibc(), reason="glibc heap only")
def test_heap_reuse_leaves_the_mmap_threshold_where_glibcs_rule_takes_it():
    """Setting glibc's thresholds turns its dynamic mmap threshold off for the process. After a
    heap-reuse block, a 4 MiB temporary (a neighbour-search group's distances) must still come
    from the heap, not from a fresh mmap (left at 128 KiB, every such temporary was mapped and
    zero-filled anew: the 70,000-point search after a first fit took twice as long); blocks
    above 32 MiB are still mapped and given back when freed."""
    import ctypes
    import subprocess
    import sys

    if not hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2"):
        pytest.skip("glibc before 2.33 (no mallinfo2)")
    if not probdr.config.get_heap_reuse():
        pytest.skip("heap reuse turned off")
    out = subprocess.run([sys.executable, "-c", _MMAP_PROBE], capture_output=True, text=True,
                         check=True).stdout.split()
    small, large = (int(x) for x in out)
    assert small == 0
    assert large >= 64 << 20


def test_a_view_cached_on_its_own_tensor_does_not_keep_it_alive():
    """A view holds its base in C++, out of the garbage collector's sight: ``W.values()`` kept
    in ``W``'s own cache would keep ``W`` (and every cache on it) alive for ever."""
    import gc
    import weakref

    from probdr._utils import tensor_cache

    W = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0]),
                                (2, 2)).coalesce()
    cached = tensor_cache(W, "_probdr_test_values", lambda w=W: (w.values(), w.values()[:1]))
    assert torch.equal(cached[0], W.values())  # the same numbers, the same memory
    assert cached[0].data_ptr() == W.values().data_ptr()
    ref = weakref.ref(W)
    del W, cached
    gc.collect()
    assert ref() is None


def test_a_fits_graph_does_not_outlive_the_estimator(digits_small):
    import gc
    import weakref

    X, _ = digits_small
    for make in (lambda: probdr.TSNE(n_iter=5, early_exaggeration_iter=2, random_state=0),
                 lambda: probdr.UMAP(n_epochs=3, random_state=0)):
        est = make().fit(X)
        ref = weakref.ref(est.model_kwargs_["W_X"])
        del est
        gc.collect()
        assert ref() is None
