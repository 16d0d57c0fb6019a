"""The NUTS-agreement study's scoring (benchmarks/nuts_agreement.py, calibration_nuts.py): chains
that wander in angle are aligned and pooled, and a posterior's per-point sds and means are
scored against them, on draws whose law is known."""

import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
calibration_nuts = pytest.importorskip("calibration_nuts")


def _rotation(a: float) -> np.ndarray:
    return np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])


def _draws(rng, mean, L, k: int, spread: float = 1.0, wander: float = 0.0):
    """k draws of independent per-point Gaussians (means ``mean``, factors ``L``, the spread
    times ``spread``), each draw's map turned by its own angle of sd ``wander`` and shifted."""
    eps = rng.normal(size=(k, mean.shape[0], 2))
    D = mean + spread * np.einsum("nab,knb->kna", L, eps)
    turns = np.stack([_rotation(a) for a in rng.normal(scale=wander, size=k)])
    return np.einsum("kna,kba->knb", D, turns) + rng.normal(size=(k, 1, 2))


def _case(spread: float, mirror: bool = False):
    rng = np.random.default_rng(0)
    n = 200
    mean = rng.normal(scale=4, size=(n, 2))
    L = rng.normal(scale=0.15, size=(n, 2, 2)) + 0.4 * np.eye(2)
    chains = [_draws(rng, mean, L, 700, wander=0.2) for _ in range(3)]
    ref, stats = calibration_nuts.pooled_reference(chains, mean)
    post = _draws(rng, mean, L, 600, spread=spread, wander=0.05)
    if mirror:  # the map's mirror image: the same posterior
        post = post * np.array([1.0, -1.0])
    row = calibration_nuts.compare(post, ref.mean(0), calibration_nuts.point_sd(ref), 1.0)
    true_sd = np.sqrt((L ** 2).sum((1, 2)) / 2)
    return row, stats, calibration_nuts.point_sd(ref) / true_sd


@pytest.mark.parametrize("mirror", [False, True])
def test_the_same_law_agrees_after_rotations_and_a_mirror(mirror):
    row, stats, ref_sd = _case(1.0, mirror)
    assert np.median(ref_sd) == pytest.approx(1.0, abs=0.03)  # the chains' wander is undone
    assert row["sd_ratio_median"] == pytest.approx(1.0, abs=0.03)
    assert row["mean_diff_in_sd_median"] < 0.1
    assert max(stats["chains_apart_in_sd_median"]) < 0.15


def test_a_wider_posterior_is_seen():
    row, _, _ = _case(1.3)
    assert row["sd_ratio_median"] == pytest.approx(1.3, abs=0.04)
    assert row["sd_within_15pct"] < 0.3
