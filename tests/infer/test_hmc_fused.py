"""The sampler's potential by the model's fused form (probdr.infer.hmc.fused_energy): the same
negative log joint and gradient as the Pyro trace and autograd, to rounding, for t-SNE's E law
(exact and FFT normaliser, Cauchy and nu = 0.5), UMAP's negative sampling (one trajectory's
draws held) and a user's prior distribution; a law without a fused form keeps the Pyro path;
a whole chain gives the same draws to rounding with the fused form on and off."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pyro.distributions as dist
import pytest
import torch

import probdr
from probdr import config
from probdr.estimators.inference import isotropic_gaussian
from probdr.infer.hmc import Whitened, fused_energy
from probdr.infer.schedule import random_stream, set_random_stream

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from calibration_user import LAWS, simulate  # noqa: E402

N = 50


def fitted(law, repulsion="exact", **extra):
    Zt, W = simulate(law, N, 4.0, 3.0, 0)
    est = probdr.GraphCoupling(**LAWS[law], affinity="precomputed", coupling_weight=4.0,
                               z_prior=3.0, repulsion=repulsion, random_state=0, **extra)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(W)
    return est


def model_and_kwargs(est, prior):
    model = est._coupling.model(whole_epoch=True, epoch_steps=1)
    kwargs = {**est.model_kwargs_, "kernel": est.kernel_, "z_prior": prior}
    return model, kwargs


def targets(model, kwargs, Z, stochastic=False, integrated=False):
    n, q = Z.shape
    g = torch.Generator().manual_seed(1)
    A = torch.randn(n, q, q, dtype=Z.dtype, generator=g) * 0.3
    roots = torch.eye(q, dtype=Z.dtype) + A  # a general (non-symmetric) move per point
    pair = []
    for fused in (None, fused_energy(model, kwargs, Z)):
        pair.append(Whitened(model, kwargs, {"Z": Z}, {"Z": dist.constraints.real}, "Z",
                             roots, stochastic, integrated=integrated, fused=fused))
    return pair


CASES = {
    "E exact Cauchy": ("tsne", "exact", {}),
    "E exact nu=0.5": ("tsne-dof0.5", "exact", {}),
    "E FFT Cauchy": ("tsne", "fft", {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("prior", ["gaussian", "user"])
def test_fused_potential_equals_the_pyro_trace(case, prior):
    law, repulsion, extra = CASES[case]
    est = fitted(law, repulsion, **extra)
    Z = torch.as_tensor(est.embedding_, dtype=torch.float64)
    p = isotropic_gaussian(3.0, N, 2) if prior == "gaussian" else \
        dist.StudentT(3.0, torch.zeros(N, 2, dtype=torch.float64), 2.0).to_event(2)
    model, kwargs = model_and_kwargs(est, p)
    slow, fast = targets(model, kwargs, Z)
    assert fast.fused is not None
    x = 0.5 * torch.randn(N * 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    (U0, g0), (U1, g1) = slow.energy(x), fast.energy(x)
    assert U1 == pytest.approx(U0, rel=1e-12, abs=1e-9)
    np.testing.assert_allclose(g1.numpy(), g0.numpy(), rtol=1e-9, atol=1e-9)


def test_fused_potential_of_negative_sampling_with_held_draws():
    X = np.random.default_rng(0).normal(size=(N, 5))
    est = probdr.UMAP(n_epochs=50, repulsion="negative_sampling", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X)
    dtype = est.model_kwargs_["W_X"].dtype  # the fit's (float32 for UMAP)
    Z = torch.as_tensor(est.embedding_).to(dtype)
    model, kwargs = model_and_kwargs(est, isotropic_gaussian(30.0, N, 2, dtype))
    slow, fast = targets(model, kwargs, Z, stochastic=True)
    assert fast.fused is not None
    x = 0.3 * torch.randn(N * 2, dtype=dtype, generator=torch.Generator().manual_seed(3))
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    state = random_stream("cpu")
    out = []
    for t in (slow, fast):
        set_random_stream(state, "cpu")
        with t.trajectory(7):
            out.append(t.energy(x))
    (U0, g0), (U1, g1) = out
    assert U1 == pytest.approx(U0, rel=tol)
    np.testing.assert_allclose(g1.numpy(), g0.numpy(), rtol=1e3 * tol, atol=1e3 * tol)


def test_a_law_without_a_fused_form_keeps_the_pyro_path():
    est = fitted("dd")
    model, kwargs = model_and_kwargs(est, isotropic_gaussian(3.0, N, 2))
    assert fused_energy(model, kwargs, torch.as_tensor(est.embedding_)) is None


def test_a_chain_with_the_fused_form_on_and_off():
    """The whole sampler through the estimator (float64): the same draws to rounding (the
    chain's accept/reject decisions unchanged), and the diagnostics say which path ran."""
    Zt, W = simulate("tsne", 40, 4.0, 3.0, 0)
    kw = dict(**LAWS["tsne"], affinity="precomputed", coupling_weight=4.0, z_prior=3.0,
              inference="hmc", random_state=0, dtype="float64",
              inference_params=dict(warmup=20, num_samples=10, max_samples=10, max_leapfrog=8, restarts=0,
                                    num_chains=1))
    runs = []
    for on in (True, False):
        before = config.get_fused_step()
        config.set_fused_step(on)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                runs.append(probdr.GraphCoupling(**kw).fit(W))
        finally:
            config.set_fused_step(before)
    on, off = runs
    assert on.posterior_.diagnostics["fused_energy"] is True
    assert off.posterior_.diagnostics["fused_energy"] is False
    # rounding (the small exact step's one pass sums in another order), amplified by the MAP's
    # 750 steps to about 1e-6; a flipped accept/reject decision would move points by O(0.1)
    np.testing.assert_allclose(on.posterior_samples_, off.posterior_samples_, atol=1e-5)


@pytest.mark.parametrize("law", ["tsne", "umap-ns"])
def test_chains_in_threads_give_the_draws_they_give_one_after_another(law):
    """Each chain has its own generator and its own stream of a stochastic likelihood's draws,
    seeded from the fit's seed and the chain's number, and runs Pyro's handlers (the fused
    form's making included) on its own thread's stack: four chains on two threads give the
    same bits as one after the other, on an exact likelihood and on negative sampling
    (the held negatives)."""
    params = dict(warmup=12, num_samples=6, max_samples=6, max_leapfrog=6, restarts=0,
                  num_chains=4)
    if law == "tsne":
        Zt, W = simulate("tsne", 40, 4.0, 3.0, 0)

        def make(workers):
            return probdr.GraphCoupling(**LAWS["tsne"], affinity="precomputed",
                                        coupling_weight=4.0, z_prior=3.0, inference="hmc",
                                        random_state=0,
                                        inference_params=dict(params, chain_workers=workers))
        data = W
    else:
        data = np.random.default_rng(0).normal(size=(40, 5))

        def make(workers):
            return probdr.UMAP(n_epochs=30, inference="hmc", random_state=0,
                               repulsion="negative_sampling",
                               inference_params=dict(params, chain_workers=workers))
    fits = []
    for workers in (1, 2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fits.append(make(workers).fit(data))
    one, two = fits
    assert one.posterior_.diagnostics["chain_workers"] == 1
    assert two.posterior_.diagnostics["chain_workers"] == 2
    np.testing.assert_array_equal(one.posterior_.chains, two.posterior_.chains)
    assert not np.array_equal(one.posterior_.chains[0], one.posterior_.chains[1])


@pytest.mark.parametrize("make", [
    lambda: isotropic_gaussian(2.5, 7, 2),
    lambda: dist.Normal(torch.tensor([0.5, -1.0], dtype=torch.float64),
                        torch.tensor([2.0, 0.3], dtype=torch.float64)).expand([7, 2]).to_event(2),
    lambda: torch.distributions.Independent(torch.distributions.Normal(
        torch.randn(7, 2, dtype=torch.float64), torch.rand(7, 2, dtype=torch.float64) + 0.5), 2),
])
def test_a_gaussian_prior_in_closed_form_is_autograds(make):
    """The sampler's prior terms in closed form: log p and its gradient equal log_prob's and
    its autograd for isotropic, per-coordinate and per-entry Gaussians."""
    from probdr.infer.hmc import _autograd_log_prob_and_grad, gaussian_log_prob_and_grad

    prior = make()
    Z = torch.randn(7, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    closed = gaussian_log_prob_and_grad(prior, Z)
    assert closed is not None
    lp, g = closed(Z)
    lp_ref, g_ref = _autograd_log_prob_and_grad(prior)(Z)
    assert float(lp) == pytest.approx(float(lp_ref), rel=1e-12)
    np.testing.assert_allclose(g.numpy(), g_ref.numpy(), rtol=1e-12, atol=1e-15)


def test_other_priors_keep_autograd():
    """A Student-t prior, or a Gaussian whose event is not all of Z, is not taken for the
    closed form."""
    from probdr.infer.hmc import gaussian_log_prob_and_grad

    Z = torch.zeros(7, 2, dtype=torch.float64)
    student = dist.StudentT(3.0, torch.zeros(()), torch.ones(())).expand([7, 2]).to_event(2)
    per_row = dist.Normal(torch.zeros(()), torch.ones(())).expand([7, 2]).to_event(1)
    assert gaussian_log_prob_and_grad(student, Z) is None
    assert gaussian_log_prob_and_grad(per_row, Z) is None
