"""The calibration study's scoring and its sparse E-law sampler (benchmarks/calibration.py)."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
calibration = pytest.importorskip("calibration")


def _gaussian_case(spread: float, n: int = 3000, draws: int = 400):
    """Per-point 2-D Gaussians with random covariances; the truth drawn from them; the draws
    from the same Gaussians with their spread multiplied by ``spread``."""
    rng = np.random.default_rng(0)
    mean = rng.normal(scale=5, size=(n, 2))
    A = rng.normal(size=(n, 2, 2)) * 0.3
    L = A + 0.5 * np.eye(2)
    truth = mean + np.einsum("nab,nb->na", L, rng.normal(size=(n, 2)))
    D = mean + spread * np.einsum("nab,snb->sna", L, rng.normal(size=(draws, n, 2)))
    return D, truth


def test_calibrated_draws_cover_their_nominal_share():
    D, truth = _gaussian_case(1.0)
    s = calibration.scores(D, truth)
    assert s["cover50"] == pytest.approx(0.5, abs=0.03)
    assert s["cover90"] == pytest.approx(0.9, abs=0.02)
    ranks = np.asarray(s["ranks"])
    assert ranks.min() > 0.8 * ranks.mean() and ranks.max() < 1.2 * ranks.mean()


def test_narrow_draws_undercover_and_inflation_restores_them():
    D, truth = _gaussian_case(1 / np.sqrt(2.0))  # variance half the truth's
    s = calibration.scores(D, truth)
    assert s["cover90"] < 0.8
    assert s["cover90@2"] == pytest.approx(0.9, abs=0.02)
    assert s["cover50@2"] == pytest.approx(0.5, abs=0.03)


def test_sparse_e_law_draws_have_the_law_mean():
    from probdr.kernels import get_kernel
    from probdr.laws.graph import get_prior
    from probdr.laws.weights import KernelWeights

    kernel = get_kernel("student")
    g = torch.Generator().manual_seed(0)
    Z = 3 * torch.randn(150, 2, dtype=torch.float64, generator=g)
    W = calibration._e_law_average(Z, kernel, 400, g).to_dense()
    M = get_prior("E").posterior(KernelWeights(Z, kernel, normaliser="exact")).mean
    assert float(W.diagonal().abs().sum()) == 0.0
    assert float(W.sum()) == pytest.approx(150.0)
    assert float((W.sum(1) - M.sum(1)).abs().sum() / M.sum()) < 0.06
    D2 = torch.cdist(Z, Z).square()
    assert float((W * D2).sum() / W.sum()) == pytest.approx(float((M * D2).sum() / M.sum()),
                                                            rel=0.03)
