"""``Kernel.is_cauchy``: the one test, shared by the FFT normaliser, the fused Cauchy paths and
``repulsion="auto"``, of t-SNE's Cauchy kernel :math:`1/(1 + d^2)` (the Student kernel with one
degree of freedom)."""

import numpy as np
import pytest
import torch

import probdr
from probdr.kernels import GaussianKernel, StudentKernel, UMAPKernel, get_kernel
from probdr.laws.weights import KernelWeights


@pytest.mark.parametrize("kernel, expected", [
    (get_kernel("student"), True),
    (get_kernel("cauchy"), True),
    (StudentKernel(dof=1), True),
    (StudentKernel(dof=np.float32(1.0)), True),
    (StudentKernel(dof=3.0), False),
    (StudentKernel(dof=1.0 + 1e-12), False),
    (StudentKernel(dof=0.5), False),
    (GaussianKernel(), False),
    (GaussianKernel(bandwidth=2.0), False),
    (UMAPKernel(a=1.0, b=1.0), False),  # 1/(1 + d^2) too, but not the Student kernel's form
    (get_kernel("umap_odds", a=1.6, b=0.9), False),
])
def test_is_cauchy_exactly_for_the_student_kernel_with_one_dof(kernel, expected):
    assert kernel.is_cauchy is expected


def test_auto_repulsion_uses_fft_for_the_student_kernels():
    """2-D t-SNE above the FFT threshold: FFT with any Student kernel (the grid follows the
    kernel's bend), the exact or sampled sums for other kernels."""
    assert probdr.TSNE()._repulsion(2000) == "fft"
    assert probdr.TSNE(dof=2.0)._repulsion(2000) == "fft"
    assert probdr.TSNE(dof="learn")._repulsion(2000) == "fft"
    assert probdr.GraphCoupling(kernel_z="gaussian", prior_z="E")._repulsion(2000) == "exact"


def test_fft_normaliser_refuses_other_kernels():
    Z = torch.randn(20, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert np.isfinite(float(KernelWeights(Z, get_kernel("student"), normaliser="fft")
                             .total_logsumexp()))
    assert np.isfinite(float(KernelWeights(Z, StudentKernel(dof=2.0), normaliser="fft")
                             .total_logsumexp()))
    with pytest.raises(ValueError, match="Student kernel"):
        KernelWeights(Z, GaussianKernel(), normaliser="fft").total_logsumexp()


def test_umap_kernel_from_min_dist_and_spread_is_umap_learns_curve():
    """``get_kernel("umap_odds", min_dist=, spread=)`` fits the curve's a, b as umap-learn does
    (its own ``find_ab_params`` where installed); giving both forms is refused."""
    k = get_kernel("umap_odds", min_dist=0.5, spread=1.5)
    default = get_kernel("umap", min_dist=0.1)
    umap_umap_ = pytest.importorskip("umap.umap_")
    for kern, (spread, md) in ((k, (1.5, 0.5)), (default, (1.0, 0.1))):
        a, b = umap_umap_.find_ab_params(spread, md)
        assert kern.a == pytest.approx(a, rel=1e-3) and kern.b == pytest.approx(b, rel=1e-3)
    assert k.odds and not default.odds
    with pytest.raises(ValueError, match="not both"):
        get_kernel("umap", a=1.0, min_dist=0.1)
    with pytest.raises(ValueError, match="min_dist must lie"):
        get_kernel("umap_odds", min_dist=2.0, spread=1.0)
