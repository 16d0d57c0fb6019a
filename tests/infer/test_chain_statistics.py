"""The effective sample size reported for NUTS chains is ArviZ's bulk ESS: never negative, also
where the plain autocorrelation estimate is (anticorrelated chains)."""

import numpy as np
import torch
from pyro.ops.stats import effective_sample_size

from probdr.infer.draws import chain_statistics


def _anticorrelated(rng, chains=2, draws=200, dims=(3, 2)):
    sign = (-1.0) ** np.arange(draws)
    return sign[None, :, None, None] + 0.01 * rng.normal(size=(chains, draws, *dims))


def test_ess_of_anticorrelated_chains_is_positive():
    x = _anticorrelated(np.random.default_rng(0))
    assert (effective_sample_size(torch.as_tensor(x), 0, 1).numpy() < 0).any()  # the old one
    r_hat, ess = chain_statistics(x)
    assert ess.shape == r_hat.shape == (3, 2)
    assert (ess > x.shape[0] * x.shape[1]).all()  # anticorrelated: more than the draws


def test_ess_of_independent_draws_is_about_the_number_of_draws():
    x = np.random.default_rng(1).normal(size=(4, 250, 5))
    r_hat, ess = chain_statistics(x)
    assert np.all(np.abs(r_hat - 1) < 0.05)
    assert np.all((ess > 600) & (ess < 1400))
