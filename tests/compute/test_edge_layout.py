"""The fused edge pass over the locality-ordered layout (:mod:`probdr._compute.edge_layout`):
the same value and gradient as autograd through the plain expression, compiled or not, the same
bits on one thread or two, the edge-list path (warned once) where torch cannot compile, and the
same t-SNE."""

import shutil
import warnings

import numpy as np
import pytest
import torch

import probdr
from probdr import config
from probdr._compute import edge_layout
from probdr._compute.edges import edge_log_kernel_sum
from probdr.kernels import GaussianKernel, StudentKernel, UMAPKernel

CAN_COMPILE = shutil.which("g++") is not None or shutil.which("c++") is not None


def _graph(seed, q=2, n=90, k=6, dtype=torch.float64, sorted_rows=True):
    """An embedding (requires grad) and the folded pairs of a kNN graph of random points plus
    random pairs (some repeated, some reversed), with weights, some of them 0 or negative."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 5, generator=g, dtype=torch.float64)
    nn = torch.cdist(X, X).fill_diagonal_(float("inf")).topk(k, largest=False).indices
    r = torch.arange(n).repeat_interleave(k)
    c = nn.reshape(-1)
    extra = torch.randint(0, n, (2, 40), generator=g)
    extra = extra[:, extra[0] != extra[1]]
    r, c = torch.cat([r, extra[0], c[:10]]), torch.cat([c, extra[1], r[:10]])
    if sorted_rows:
        r, order = r.sort(stable=True)
        c = c[order]
    else:
        order = torch.randperm(r.numel(), generator=g)
        r, c = r[order], c[order]
    v = torch.rand(r.numel(), generator=g, dtype=torch.float64) + 0.05
    v[::9] = 0.0
    v[5::13] = -0.3
    Z = (3.0 * torch.randn(n, q, generator=g, dtype=torch.float64)).to(dtype).requires_grad_()
    return Z, r, c, v


def _reference(Z, r, c, v, kernel):
    """The edge sum by plain autograd (terms with v <= 0 dropped), and its gradient."""
    Z = Z.detach().double().requires_grad_()
    lk = kernel.log_k((Z[r] - Z[c]).pow(2).sum(1))
    out = torch.where(v > 0, v * lk, torch.zeros_like(lk)).sum()
    out.backward()
    return out.detach(), Z.grad


needs_compiler = pytest.mark.skipif(not CAN_COMPILE, reason="no C++ compiler for torch.compile")


@pytest.fixture
def layout_always(monkeypatch):
    """Every edge sum may take the layout path (compilation on, not failed)."""
    monkeypatch.setattr(edge_layout, "MIN_EDGES", 0)
    monkeypatch.setattr(edge_layout, "BUILD_PART_EDGES", 50)  # several parts in the build
    monkeypatch.setattr(config, "_compile", True)
    monkeypatch.setattr(edge_layout, "_compile_failed", [])
    return monkeypatch


def test_layout_lists_every_pair_once_in_each_direction(layout_always):
    Z, r, c, v = _graph(0, sorted_rows=False)
    n = Z.shape[0]
    lay = edge_layout.build(r, c, v.float(), n)
    perm = lay.perm
    assert torch.equal(perm.sort().values, torch.arange(n))
    K = edge_layout.SLICE
    row = lay.slice_row.long()[:, None].expand(-1, K)
    real = lay.vals != 0
    # padding: the row itself at weight 0
    assert torch.equal(lay.cols[~real].long(), row[~real])
    # the real slots, mapped back to the old labels: each pair (with v > 0) in both directions
    got = sorted(zip(perm[row[real]].tolist(), perm[lay.cols[real].long()].tolist(),
                     lay.vals[real].tolist(), strict=True))
    keep = v > 0
    want = sorted([(a, b, w) for a, b, w in zip(r[keep].tolist(), c[keep].tolist(),
                                                 v[keep].float().tolist(), strict=True)]
                  + [(b, a, w) for a, b, w in zip(r[keep].tolist(), c[keep].tolist(),
                                                   v[keep].float().tolist(), strict=True)])
    assert got == want
    # the slices of a row are consecutive, their number the row's degree over SLICE, rounded up
    deg = torch.bincount(perm[row[real]], minlength=n)[perm]
    assert torch.equal(lay.slices, (deg + K - 1) // K)
    assert torch.equal(lay.slice_row.long(), torch.repeat_interleave(torch.arange(n), lay.slices))


@pytest.mark.parametrize("q", [2, 3])
@pytest.mark.parametrize("kernel", [StudentKernel(), StudentKernel(dof=3.0), GaussianKernel(2.0),
                                    UMAPKernel(odds=True)],
                         ids=["cauchy", "t3", "gaussian", "umap_odds"])
@pytest.mark.parametrize("sorted_rows", [True, False])
def test_layout_pass_matches_autograd(layout_always, q, kernel, sorted_rows):
    """Value and gradient of the edge sum over the layout (the function evaluated uncompiled)
    equal autograd's."""
    Z, r, c, v = _graph(q, q=q, sorted_rows=sorted_rows)
    out, grad = edge_layout.value_and_grad(Z.detach(), r.int(), c.int(), v, kernel,
                                            compiled=False)
    ref, gref = _reference(Z, r, c, v, kernel)
    assert torch.allclose(out, ref, rtol=1e-12)
    assert torch.allclose(grad, gref, rtol=1e-10, atol=1e-12)


@needs_compiler
def test_edge_sums_take_the_compiled_pass(layout_always):
    """Through the public edge sum: the compiled pass, with autograd's value and gradient."""
    Z, r, c, v = _graph(11, q=3)
    spy = []
    real = edge_layout.value_and_grad
    layout_always.setattr(edge_layout, "value_and_grad",
                          lambda *a, **k: spy.append(1) or real(*a, **k))
    out = edge_log_kernel_sum(Z, r.int(), c.int(), v, StudentKernel())
    (1.5 * out).backward()
    ref, grad = _reference(Z, r, c, v, StudentKernel())
    assert spy and not edge_layout._compile_failed
    assert torch.allclose(out, ref, rtol=1e-12)
    assert torch.allclose(Z.grad, 1.5 * grad, rtol=1e-10, atol=1e-12)


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_pass_equals_uncompiled_and_is_the_same_on_any_threads(layout_always, dtype):
    Z, r, c, v = _graph(7, dtype=dtype)
    kernel = StudentKernel()
    ref, grad = _reference(Z, r, c, v, kernel)
    runs = []
    before = torch.get_num_threads()
    try:
        with warnings.catch_warnings():
            # a compiler failure would warn: fail here instead
            warnings.filterwarnings("error", message="probdr: torch.compile")
            for threads in (2, 1, 2):
                torch.set_num_threads(threads)
                for value in (True, False):
                    runs.append(edge_layout.value_and_grad(Z.detach(), r, c, v, kernel, value))
    finally:
        torch.set_num_threads(before)
    assert not edge_layout._compile_failed
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    assert torch.allclose(runs[0][0].double(), ref, **tol)
    assert torch.allclose(runs[0][1].double(), grad, **tol)
    assert float(runs[1][0]) == 0.0  # value=False: the gradient only
    for _, grad_k in runs[2:]:  # every thread count, with or without the value: same bits
        assert torch.equal(grad_k, runs[0][1])
    assert torch.equal(runs[2][0], runs[0][0]) and torch.equal(runs[4][0], runs[0][0])
    _, uncompiled = edge_layout.value_and_grad(Z.detach(), r, c, v, kernel, True,
                                                compiled=False)
    assert torch.allclose(uncompiled, runs[0][1], **tol)


def test_compile_failure_warns_once_and_keeps_the_edge_list_path(layout_always):
    layout_always.setattr(edge_layout, "_compiled", {})
    calls = []

    def broken(fn, **kwargs):
        def run(*args):
            calls.append(1)
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")
        return run

    layout_always.setattr(edge_layout.torch, "compile", broken)
    Z, r, c, v = _graph(3)
    kernel = StudentKernel()
    ref, gref = _reference(Z, r, c, v, kernel)
    with pytest.warns(RuntimeWarning, match="could not compile.*No working C\\+\\+ compiler"):
        out = edge_log_kernel_sum(Z, r, c, v, kernel)
    out.backward()
    assert torch.allclose(out, ref, rtol=1e-12) and torch.allclose(Z.grad, gref, rtol=1e-10)
    assert not hasattr(v, f"_probdr_edge_layout_{Z.shape[0]}_{Z.dtype}")  # layout dropped
    assert not edge_layout.use_for(Z, 10**9, kernel)
    Z.grad = None
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="probdr: torch.compile")  # warned once only
        out = edge_log_kernel_sum(Z, r, c, v, kernel)
    out.backward()
    assert len(calls) == 1
    assert torch.allclose(out, ref, rtol=1e-12) and torch.allclose(Z.grad, gref, rtol=1e-10)


def test_set_compile_validates():
    with pytest.raises(ValueError, match="True or False"):
        config.set_compile("yes")
    before = config.get_compile()
    try:
        config.set_compile(False)
        assert config.get_compile() is False
    finally:
        config.set_compile(before)


@needs_compiler
def test_tsne_through_the_layout_matches_the_edge_list_path(monkeypatch, loss_every_step):
    """A t-SNE fit whose attraction runs through the compiled pass gives the fit of the edge-list path up to rounding: the losses agree to 1e-7
    over the first steps, after which rounding grows as t-SNE's steps do (the gains), to under
    1% of the loss, and the quality is the same."""
    from sklearn.datasets import load_digits

    from probdr.models import coupling_fused

    X = load_digits().data[:500].astype(np.float32)
    kw = dict(random_state=0, n_iter=300, early_exaggeration_iter=100, n_jobs=1)
    monkeypatch.setattr(coupling_fused, "DENSE_PAIRS_MAX_N", 0)  # the attraction's edge list
    base = probdr.TSNE(**kw).fit(X)
    monkeypatch.setattr(edge_layout, "MIN_EDGES", 0)
    monkeypatch.setattr(config, "_compile", True)
    monkeypatch.setattr(edge_layout, "_compile_failed", [])
    spy = []
    real = edge_layout.build
    monkeypatch.setattr(edge_layout, "build", lambda *a: spy.append(1) or real(*a))
    fused = probdr.TSNE(**kw).fit(X)
    assert spy
    h0, h1 = np.asarray(base.loss_history_), np.asarray(fused.loss_history_)
    assert np.allclose(h0[:20], h1[:20], rtol=1e-7)
    assert np.allclose(h0, h1, rtol=1e-2)
    t0 = probdr.metrics.trustworthiness(X, base.embedding_)
    t1 = probdr.metrics.trustworthiness(X, fused.embedding_)
    assert abs(t0 - t1) < 0.01 and t1 > 0.95
