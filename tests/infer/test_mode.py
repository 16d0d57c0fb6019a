"""The mode a posterior is centred on (probdr.infer.mode): reached on closed forms, by L-BFGS on
a deterministic density and by Adam windows on a stochastic one; and through an estimator, on a
custom coupling whose schedule stops far from its mode."""

from __future__ import annotations

import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

import probdr
from probdr.infer.mode import converge_mode, is_stochastic


def gaussian_model(mu, noise=0.0, generator=None):
    """Z ~ N(mu, 0.5^2) elementwise; ``noise`` > 0 adds a zero-mean random tilt to each
    evaluation (a stochastic objective whose mean has the same mode)."""
    Z = pyro.sample("Z", dist.Normal(torch.zeros_like(mu), 1.0).to_event(2))
    pyro.factor("fit", -2.0 * (Z - mu).square().sum())
    if noise:
        eps = torch.randn(mu.shape, dtype=mu.dtype, generator=generator)
        pyro.factor("tilt", noise * (eps * Z).sum())
    return Z


def test_lbfgs_reaches_the_closed_form_mode():
    mu = torch.tensor([[1.0, -2.0], [3.0, 0.5], [-1.0, 4.0]], dtype=torch.float64)
    start = torch.zeros_like(mu)
    mode = converge_mode(gaussian_model, {"mu": mu}, start)
    # -log p = Z^2/2 + 2 (Z - mu)^2 + const: the mode is 4 mu / 5
    np.testing.assert_allclose(mode.Z.numpy(), 0.8 * mu.numpy(), atol=1e-6)
    assert mode.converged and mode.rule == "lbfgs" and mode.grad_ratio < 1e-5
    assert not is_stochastic(gaussian_model, {"mu": mu}, start)


def test_adam_windows_reach_the_mode_of_a_noisy_density():
    g = torch.Generator().manual_seed(0)
    mu = torch.randn(40, 2, dtype=torch.float64, generator=g) * 3
    kw = {"mu": mu, "noise": 0.5, "generator": g}
    assert is_stochastic(gaussian_model, kw, mu)
    mode = converge_mode(gaussian_model, kw, mu + 1.0)
    assert mode.rule == "adam" and mode.converged and np.isnan(mode.grad_ratio)
    # each coordinate's noise has sd 0.5 / 5 = 0.1 at the mode of one evaluation; the last
    # windows' steps average it down
    err = (mode.Z - 0.8 * mu).abs()
    assert float(err.median()) < 0.05, float(err.median())


def test_the_cap_warns():
    mu = torch.full((5, 2), 100.0, dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match="cap"):
        mode = converge_mode(gaussian_model, {"mu": mu}, torch.zeros_like(mu), tol=0.0,
                             max_calls=1)
    assert not mode.converged and mode.steps == 1


def test_custom_coupling_posterior_is_centred_on_its_mode():
    """A (B, B) coupling with UMAP's curve on 200 points drawn from that law: the default
    schedule (t-SNE's gains optimiser at a rate divided by the graph's mass per row) ends at
    the truth's radius (it blew the map up to 2.5 times it at t-SNE's rate); the posterior is
    centred on the mode, whose radius is the truth's, and whose log density is at least the
    schedule's end's."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from calibration import simulate

    Zt, W, _, _ = simulate("umap", 200, 4, 3.0, 0)
    radius = lambda Z: float(np.sqrt(((Z - Z.mean(0)) ** 2).sum(1).mean()))  # noqa: E731
    kw = dict(prior_x="B", prior_z="B", kernel_z="umap_odds", affinity="precomputed",
              coupling_weight=4.0, z_prior=3.0, inference="laplace", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = probdr.GraphCoupling(**kw).fit(W.numpy())
        off = probdr.GraphCoupling(**kw, inference_params={"converge": False}).fit(W.numpy())
    truth = radius(Zt.numpy())
    assert 0.8 < radius(est.map_embedding_) / truth < 1.25
    assert 0.8 < radius(est.mode_embedding_) / truth < 1.25
    assert est.map_converged_ and est.mode_steps_ >= 1
    assert np.array_equal(est.posterior_.reference, est.mode_embedding_)
    assert est.log_joint(est.mode_embedding_) >= est.log_joint(est.map_embedding_)
    # the MAP is the plain fit's either way; without the search the posterior sits on it
    np.testing.assert_array_equal(off.embedding_, est.embedding_)
    np.testing.assert_array_equal(off.mode_embedding_, off.map_embedding_)
    assert off.map_converged_ is None and off.mode_steps_ is None
    # SVI given its graph searches the mode first; with converge=False it starts at the MAP
    svi_kw = {**kw, "inference": "svi"}
    few = {"num_steps": 20, "num_samples": 5, "calibrate": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        svi = probdr.GraphCoupling(**svi_kw, inference_params={**few, "converge": False})
        svi.fit(W.numpy())
        searched = probdr.GraphCoupling(**svi_kw, inference_params=few).fit(W.numpy())
    assert svi.map_converged_ is None
    np.testing.assert_array_equal(svi.mode_embedding_, svi.map_embedding_)
    assert searched.map_converged_ is not None and searched.mode_restarts_ is not None
    assert searched.log_joint(searched.mode_embedding_) >= est.log_joint(est.map_embedding_)
    with pytest.raises(ValueError, match="converge"):
        probdr.GraphCoupling(**{**kw, "inference_params": {"converge": 1}}).fit(W.numpy())
