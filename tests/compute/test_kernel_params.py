"""Gradients in a kernel's numbers (Student ``dof`` and ``scale``, UMAP's ``a`` and ``b``, a
Gaussian bandwidth) on every path of the package -- the edge sums, the exact blocked
normalisers, the FFT normaliser, the sampled normalisers -- against autograd through the dense
n x n kernel (the oracle: the same formula in plain torch operations)."""

import math

import pytest
import torch

from probdr._compute import allpairs
from probdr._compute.allpairs import pair_reduce, pairwise_sq_distances
from probdr._compute.edges import edge_log_kernel, edge_log_kernel_sum
from probdr._compute.fft import kernel_log_total
from probdr.kernels import GaussianKernel, Learn, StudentKernel, UMAPKernel, get_kernel
from probdr.laws.weights import KernelWeights

N = 60
KINDS = ["student", "umap", "umap_odds", "gaussian"]


def _t(v):
    return torch.tensor(v, dtype=torch.float64, requires_grad=True)


def _kernel(kind):
    """A kernel whose every number is a tensor that requires grad."""
    if kind == "student":
        return StudentKernel(dof=_t(0.7), scale=_t(1.3))
    if kind == "umap":
        return UMAPKernel(a=_t(1.5), b=_t(0.9))
    if kind == "umap_odds":
        return UMAPKernel(a=_t(1.5), b=_t(0.9), odds=True)
    return GaussianKernel(bandwidth=_t(2.0))


@pytest.fixture(scope="module")
def Z():
    return 2.0 * torch.randn(N, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def _dense(Z, kernel, mode):
    """The reduction by autograd through the dense kernel matrix (the oracle)."""
    L = kernel.log_k(pairwise_sq_distances(Z)).masked_fill(torch.eye(len(Z), dtype=bool), -math.inf)
    if mode == "row":
        return torch.logsumexp(L, 1)
    if mode == "total":
        return torch.logsumexp(L.flatten(), 0)
    return torch.nn.functional.softplus(L).sum()


def _grads(value, kernel, weights=None):
    out = value if weights is None else (value * weights).sum()
    return torch.stack(torch.autograd.grad(out, kernel.learnable()))


def _close(got, ref, rtol):
    torch.testing.assert_close(got, ref, rtol=rtol, atol=0.0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["row", "total", "softplus"])
def test_blocked_normalisers_match_dense_autograd(Z, kind, mode, monkeypatch):
    """The exact all-pairs reductions, also cut in several blocks without the cache."""
    w = torch.rand(N, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) \
        if mode == "row" else None
    k = _kernel(kind)
    ref = _grads(_dense(Z, k, mode), k, w)
    k = _kernel(kind)
    _close(_grads(pair_reduce(Z, mode, k), k, w), ref, 1e-10)
    monkeypatch.setattr(allpairs, "BLOCK_BYTES", 8 * N * 7)  # blocks of 7 rows
    monkeypatch.setattr(allpairs, "CACHE_BYTES", 0)
    k = _kernel(kind)
    _close(_grads(pair_reduce(Z, mode, k), k, w), ref, 1e-10)


@pytest.mark.parametrize("kind", KINDS)
def test_edge_sums_match_dense_autograd(Z, kind):
    """The fused edge sum (early and clipped backward) and the per-edge log-kernel."""
    g = torch.Generator().manual_seed(2)
    rows = torch.randint(0, N, (500,), generator=g)
    cols = (rows + torch.randint(1, N, (500,), generator=g)) % N
    v = torch.rand(500, dtype=torch.float64, generator=g) - 0.1  # some terms dropped (v <= 0)
    k = _kernel(kind)
    d2 = (Z[rows] - Z[cols]).square().sum(1)
    ref = _grads(torch.where(v > 0, v * k.log_k(d2), 0.0).sum(), k)
    Zg = Z.clone().requires_grad_(True)  # the early path: the Z gradient made in the forward
    for clip in (None, 4.0):
        k = _kernel(kind)
        _close(_grads(edge_log_kernel_sum(Zg, rows, cols, v, k, clip), k), ref, 1e-10)
    k = _kernel(kind)
    _close(_grads(edge_log_kernel(Z, rows, cols, k), k, v.clamp_min(0)), ref, 1e-10)


def test_fft_normaliser_matches_dense_autograd(Z):
    """The FFT-interpolated t-SNE normaliser with a learned Student kernel: value, gradient in
    Z and in (dof, scale) converge to the exact ones as the grid is refined (error ~ h^4)."""
    k = _kernel("student")
    Zr = Z.clone().requires_grad_(True)
    val = _dense(Zr, k, "total")
    ref = torch.autograd.grad(val, [Zr, *k.learnable()])
    errs = []
    for spacing in (0.1, 0.03):
        k = _kernel("student")
        Zf = Z.clone().requires_grad_(True)
        got_val = kernel_log_total(Zf, k, spacing)
        got = torch.autograd.grad(got_val, [Zf, *k.learnable()])
        errs.append(max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(got, ref, strict=False)))
    torch.testing.assert_close(got_val, val.detach(), rtol=1e-7, atol=0)
    assert errs[1] < 1e-5 and errs[1] < errs[0] / 10


def test_fft_normaliser_cauchy_and_a_fixed_dof_agree_with_exact(Z):
    """A fixed Student kernel other than Cauchy takes the FFT path too (default grid)."""
    for kernel in (StudentKernel(), StudentKernel(dof=0.5), StudentKernel(dof=3.0, scale=0.7)):
        ref = _dense(Z, kernel, "total")
        torch.testing.assert_close(kernel_log_total(Z, kernel), ref, rtol=2e-3, atol=0)


@pytest.mark.parametrize("law", ["row", "total", "softplus"])
def test_sampled_normalisers_match_autograd_on_the_same_draws(Z, law):
    """The Monte Carlo normalisers are torch operations on the fused per-edge log-kernel: their
    gradient in the kernel's numbers is that of the same estimator written out on the same
    uniform partners."""
    k = _kernel("student")
    w = KernelWeights(Z, k, normaliser="sampled", n_samples=15)
    torch.manual_seed(3)
    out = {"row": lambda: w.row_logsumexp().sum(), "total": w.total_logsumexp,
           "softplus": w.sum_softplus}[law]()
    got = _grads(out, k)
    torch.manual_seed(3)
    k = _kernel("student")
    rows, cols, far, n_far = KernelWeights(Z, k, normaliser="sampled", n_samples=15)._far_samples()
    lw = k.log_k((Z[rows] - Z[cols]).square().sum(1))
    if law == "row":
        lw = lw.masked_fill(~far, -math.inf).view(N, 15)
        hits = far.view(N, 15).sum(1).to(lw.dtype)
        ref = (torch.logsumexp(lw, 1) + torch.log(n_far / hits)).sum()
    elif law == "total":
        ref = torch.logsumexp(lw[far], 0) + torch.log(n_far.sum() / far.sum())
    else:
        ref = torch.nn.functional.softplus(lw[far]).mean() * n_far.sum()
    _close(got, _grads(ref, k), 1e-10)


def test_kernel_with_latent_sites_must_be_drawn_first(Z):
    k = get_kernel("student", dof="learn")
    assert isinstance(k.dof, Learn) and list(k.sites()) == ["dof"]
    with pytest.raises(ValueError, match="latent sites"):
        KernelWeights(Z, k)
    assert k.fixed({"dof": 0.6}).dof == 0.6 and k.fixed().dof == 1.0


def test_fixed_numbers_keep_the_closed_forms():
    """Plain numbers give the Cauchy fast paths; a tensor or Learn does not."""
    assert StudentKernel().is_cauchy and StudentKernel().is_fixed
    assert not StudentKernel(dof=_t(1.0)).is_cauchy
    assert not StudentKernel(dof=Learn()).is_fixed


def test_forward_mode_default_matches_closed_forms():
    """The base class's forward-mode derivative (for a user's kernel) equals the closed forms."""
    d2 = torch.linspace(0.0, 9.0, 50, dtype=torch.float64)
    for kind in KINDS:
        k = _kernel(kind)
        for a, b in zip(type(k).__mro__[-2].dlog_k_dparams(k, d2), k.dlog_k_dparams(d2), strict=False):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("per_point", [False, True])
def test_input_bandwidths_are_differentiable_on_the_sparse_input_law(Z, per_point):
    """The input side: a D law on kNN lists with Gaussian weights -d^2/h_i (one bandwidth, or
    one per point, as the entropic affinities calibrate them) as a function of h -- its
    gradient through the sparse law equals the dense law's (absent pairs at weight 0)."""
    from probdr.laws.graph import UnitDegreeGraph
    from probdr.laws.weights import DenseWeights, SparseWeights

    k = 6
    D2 = pairwise_sq_distances(Z).fill_diagonal_(math.inf)
    d2, cols = D2.topk(k, largest=False)
    rows = torch.arange(N).repeat_interleave(k)
    W = torch.zeros(N, N, dtype=torch.float64)
    W[torch.arange(N), cols[:, 0]] = 1.0  # a D graph on the lists: each point's nearest
    h0 = torch.linspace(0.5, 2.0, N, dtype=torch.float64) if per_point else torch.tensor(1.3)

    def grad(sparse):
        h = h0.clone().double().requires_grad_(True)
        logk = GaussianKernel(bandwidth=h).log_k(d2)  # (n, k), per-point h along the rows
        if sparse:
            w = SparseWeights(rows, cols.reshape(-1), logk.reshape(-1), N)
        else:
            dense = torch.full((N, N), -math.inf, dtype=torch.float64)
            dense = dense.index_put((rows, cols.reshape(-1)), logk.reshape(-1))
            w = DenseWeights(dense)
        (g,) = torch.autograd.grad(UnitDegreeGraph(w).log_prob(W), h)
        return g

    g = grad(True)
    assert bool((g != 0).any())
    _close(g, grad(False), 1e-10)


def test_fixed_keeps_per_point_bandwidths():
    h = torch.linspace(0.5, 2.0, 5, dtype=torch.float64)
    assert GaussianKernel(bandwidth=h).fixed().bandwidth is h
    assert GaussianKernel(bandwidth=_t(2.0)).fixed().bandwidth == 2.0
