"""The field of a fitted map's points for new points (probdr._compute.pair_field.ReferenceField)
and the all-pairs sum of a map's own points (pair_sum, the B law's ``repulsion="fft"``): an
exact near part and an FFT far part against the all-pairs sums and their autograd gradients."""

import pytest
import torch
import torch.nn.functional as F

from probdr._compute.allpairs import pair_reduce
from probdr._compute.pair_field import (
    NearFarSplit,
    ReferenceField,
    derivatives,
    kernel_length,
    non_edge_term,
    pair_sum,
)
from probdr.kernels import get_kernel
from probdr.laws.graph import get_prior
from probdr.laws.weights import KernelWeights


def _clustered(n, seed, spread=8.0):
    g = torch.Generator().manual_seed(seed)
    centres = spread * torch.randn(12, 2, dtype=torch.float64, generator=g)
    return centres[torch.arange(n) % 12] + torch.randn(n, 2, dtype=torch.float64, generator=g)


def _phi(kernel):
    return lambda x: -F.softplus(kernel.log_k(x))


def _exact(Z, Z_ref, fn):
    Z = Z.detach().requires_grad_(True)
    total = fn((Z[:, None, :] - Z_ref[None]).square().sum(-1)).sum(1)
    (grad,) = torch.autograd.grad(total.sum(), Z)
    return total.detach(), grad


@pytest.mark.parametrize("name", ["umap_odds", "student"])
def test_reference_field_matches_the_all_pairs_sums(name):
    """Value and gradient at new points among the clusters, between them, on a reference point
    and far outside the map (summed exactly there), for UMAP's odds and the Cauchy kernel."""
    kernel = get_kernel(name, **({"a": 1.577, "b": 0.8951} if name == "umap_odds" else {}))
    fn = _phi(kernel)
    Z_ref = _clustered(3000, 0)
    field = ReferenceField(Z_ref, fn, kernel_length(kernel))
    g = torch.Generator().manual_seed(1)
    Z = torch.cat([Z_ref[:200] + 0.3 * torch.randn(200, 2, dtype=torch.float64, generator=g),
                   12 * torch.randn(100, 2, dtype=torch.float64, generator=g),
                   Z_ref[500:501], torch.tensor([[300.0, -250.0]], dtype=torch.float64)])
    got, grad = field.value_and_grad(Z)
    exact, exact_grad = _exact(Z, Z_ref, fn)
    rel = (got - exact).abs() / exact.abs()
    assert float(rel.max()) < 1e-3
    gerr = (grad - exact_grad).norm(dim=1) / exact_grad.norm(dim=1).median()
    assert float(gerr.median()) < 5e-3 and float(gerr.max()) < 2e-2
    assert float(rel.max()) > 0  # interpolated, not the same sums
    assert float((got[-1] - exact[-1]).abs()) < 1e-9  # off the grid: exact


def test_reference_field_sum_is_differentiable_and_batched():
    """``sum`` takes leading batch dimensions (the chains of sample_transform), gives the same
    numbers without a gradient, and backpropagates the interpolated gradient."""
    kernel = get_kernel("umap_odds", a=1.577, b=0.8951)
    Z_ref = _clustered(2000, 2)
    field = ReferenceField(Z_ref, _phi(kernel), kernel_length(kernel))
    Z = (Z_ref[:50] + 0.5).expand(2, 50, 2).clone().requires_grad_(True)
    out = field.sum(Z)
    assert out.shape == (2, 50)
    (grad,) = torch.autograd.grad((out * torch.arange(2.0, dtype=out.dtype)[:, None]).sum(), Z)
    assert torch.equal(grad[0], torch.zeros_like(grad[0]))
    _, g1 = field.value_and_grad(Z[1].detach())
    torch.testing.assert_close(grad[1], g1)
    with torch.no_grad():
        torch.testing.assert_close(field.sum(Z.detach()), out.detach())
    assert field.sum(Z.detach().float()).dtype == torch.float32


def test_near_far_split_adds_up_and_is_smooth():
    """Far plus near is the function; the far part and its first two derivatives are continuous
    at the radius, and finite at 0 where the function is not."""
    kernel = get_kernel("umap_odds", a=1.577, b=0.8951)
    fn = _phi(kernel)
    split = NearFarSplit(fn, 0.09)
    x = torch.tensor([0.0, 1e-6, 0.05, 0.09, 0.2, 4.0], dtype=torch.float64)
    far = split.far_value(x)
    assert torch.isfinite(far).all()
    torch.testing.assert_close(far[3:], fn(x[3:]))
    eps = torch.tensor([0.09 - 1e-7, 0.09 + 1e-7], dtype=torch.float64)
    v = split.far_value(eps)
    d1, d2 = split.far(eps)
    assert abs(float(v[1] - v[0])) < 1e-5 and abs(float(d1[1] - d1[0])) < 1e-3
    assert abs(float(d2[1] - d2[0])) < 1e-2 * abs(float(d2[1]))
    _, e1, e2 = derivatives(fn, eps)
    torch.testing.assert_close(d1[1], e1[1])
    torch.testing.assert_close(d2[1], e2[1])



@pytest.mark.parametrize("name", ["umap_odds", "student"])
def test_pair_sum_matches_the_all_pairs_sums(name):
    """The sum over the ordered pairs of a clustered map's own points and its gradient in each
    point, against the blocked all-pairs sum (``pair_reduce``) and its gradient."""
    kernel = get_kernel(name, **({"a": 1.577, "b": 0.8951} if name == "umap_odds" else {}))
    Z = _clustered(3000, 2).requires_grad_(True)
    got = pair_sum(Z, non_edge_term(kernel), kernel_length(kernel))
    (grad,) = torch.autograd.grad(got, Z)
    Ze = Z.detach().clone().requires_grad_(True)
    exact = -pair_reduce(Ze, "softplus", kernel, None)
    (exact_grad,) = torch.autograd.grad(exact, Ze)
    got = got.detach()
    assert 0 < abs(float(got - exact)) < 1e-4 * abs(float(exact))  # interpolated, and close
    gerr = (grad - exact_grad).norm(dim=1) / exact_grad.norm(dim=1).median()
    assert float(gerr.median()) < 5e-3 and float(gerr.max()) < 2e-2


def test_pair_sum_refuses_other_shapes():
    kernel = get_kernel("umap_odds")
    with pytest.raises(ValueError, match="2-D"):
        pair_sum(torch.zeros(10, 3, dtype=torch.float64), non_edge_term(kernel), 1.0)


def test_b_law_log_prob_with_the_field_normaliser_matches_the_exact_one():
    """The B law's log-likelihood of an observed graph and its gradient in Z, the normaliser
    from the field (``repulsion="fft"``) against the exact all-pairs one, UMAP's curve."""
    kernel = get_kernel("umap_odds", a=1.577, b=0.8951)
    Z0 = _clustered(2500, 3)
    g = torch.Generator().manual_seed(4)
    rows = torch.arange(2500).repeat_interleave(10)
    cols = (rows + torch.randint(1, 2500, (rows.numel(),), generator=g)) % 2500
    W = torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.ones(rows.numel(),
                                dtype=torch.float64), (2500, 2500), check_invariants=True)
    W = W.coalesce()
    W = torch.sparse_coo_tensor(W.indices(), torch.ones_like(W.values()), W.shape,
                                check_invariants=True).coalesce()  # a 0/1 graph
    out = {}
    for normaliser in ("exact", "fft"):
        Z = Z0.clone().requires_grad_(True)
        lp = get_prior("B").posterior(KernelWeights(Z, kernel, normaliser=normaliser)).log_prob(W)
        out[normaliser] = (lp.detach(), torch.autograd.grad(lp, Z)[0])
    (lp_e, g_e), (lp_f, g_f) = out["exact"], out["fft"]
    assert abs(float(lp_f - lp_e)) < 1e-4 * abs(float(lp_e))
    gerr = (g_f - g_e).norm(dim=1) / g_e.norm(dim=1).median()
    assert float(gerr.median()) < 5e-3 and float(gerr.max()) < 3e-2


def test_b_law_field_normaliser_refuses_learned_kernels():
    from probdr.kernels import StudentKernel

    dof = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    w = KernelWeights(_clustered(100, 5), StudentKernel(dof=dof), normaliser="fft")
    with pytest.raises(ValueError, match="fixed kernel"):
        w.sum_softplus()


def test_umap_with_the_field_repulsion_optimises_the_exact_law():
    """UMAP's exact B-law objective (no negative sampling) fitted with the field normaliser
    (``repulsion="fft"``) and with the all-pairs one, same seed: the exact losses differ by less
    than two seeds of the exact fit do (2 to 4 % here), the neighbourhoods are as good, and the
    loss is far below that of the negative-sampling fit, which optimises another objective."""
    from sklearn.datasets import load_digits

    from probdr import UMAP, metrics

    X = load_digits().data[:700]
    out = {}
    for repulsion in ("exact", "fft", "negative_sampling"):
        est = UMAP(repulsion=repulsion, n_epochs=150, random_state=0)
        Z = est.fit_transform(X)
        out[repulsion] = (est.loss(Z), metrics.trustworthiness(X, Z, 15))
    (loss_e, tw_e), (loss_f, tw_f) = out["exact"], out["fft"]
    assert abs(loss_f - loss_e) < 0.06 * loss_e
    assert tw_f > tw_e - 0.01
    assert loss_f < 0.6 * out["negative_sampling"][0]
