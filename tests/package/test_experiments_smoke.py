"""Cheap checks of the experiment scripts' core functions (benchmarks/ccpca_nstudy.py,
benchmarks/ot_e1_heteroscedastic.py) on tiny sizes."""

from __future__ import annotations

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks"))

import ccpca_nstudy  # noqa: E402
import ot_e1_heteroscedastic as e1  # noqa: E402


def test_gram_error_is_rotation_free_and_relative():
    g = torch.Generator().manual_seed(0)
    W = torch.randn(50, 2, dtype=torch.float64, generator=g)
    R = torch.tensor([[0.6, -0.8], [0.8, 0.6]], dtype=torch.float64)
    assert ccpca_nstudy.gram_error(W @ R, W) < 1e-6  # sqrt of a cancellation
    assert abs(ccpca_nstudy.gram_error(2 * W, W) - 3.0) < 1e-9  # ||4G - G|| / ||G||


def test_ccpca_error_decreases_with_draws():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 1.0, (40, 5)) for c in (0.0, 4.0, 8.0)])
    res, _ = ccpca_nstudy.study(X, [1, 64], seeds=[0, 1], n_ref=256, perplexity=10.0)
    assert np.mean(res[64][0]) < np.mean(res[1][0])


def test_e1_sea_filters_batch_effect_tiny():
    X, y, b = e1.make_e1(0, n=200, d=2000, trials=(200, 2000))
    assert X.shape == (200, 2000) and np.allclose(X.sum(1), 1.0)
    assert (np.bincount(b) == [100, 50, 50]).all()
    m = e1.affinity_metrics(X, y, b, perplexity=10.0)
    assert m["P^se (SEA)"]["cross_p1"] < m["P-bar^e (symmetrised EA)"]["cross_p1"]
