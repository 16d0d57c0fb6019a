"""SVI's ELBO-plateau rule: the schedule's steps, then more until the loss stops improving
between two windows (``probdr.infer.schedule.windows_agree``, the stochastic mode search's
rule), capped, reported in ``diagnostics`` and warned about when the cap comes first."""

import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

from probdr.infer.posterior import fit_posterior
from probdr.infer.schedule import windows_agree

MEAN, SD = 3.0, 0.5


def _model():
    pyro.sample("Z", dist.Normal(torch.full((20, 2), MEAN, dtype=torch.float64), SD)
                .to_event(2))


def _svi(**options):
    Z0 = torch.zeros(20, 2, dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = fit_posterior(_model, {}, Z0, method="svi", align=False,
                             generator=torch.Generator().manual_seed(0), **options)
    return post, [str(w.message) for w in caught if "ELBO still improved" in str(w.message)]


def test_windows_agree_holds_its_level_on_noise_and_sees_a_trend():
    """Two windows of iid noise disagree about 4.6 % of the time (|N(0, 1)| > 2); a fall of half
    a noise sd between windows of 100 is seen nearly always, and its size in standard errors
    is about 0.5 / sqrt(2 / 100) = 3.5."""
    rng = np.random.default_rng(0)
    flat = [windows_agree(rng.normal(size=100), rng.normal(size=100))[0] for _ in range(4000)]
    assert 0.035 < 1 - np.mean(flat) < 0.058
    falls = [windows_agree(rng.normal(size=100), rng.normal(size=100) - 0.5) for _ in range(400)]
    assert np.mean([not held for held, _ in falls]) > 0.85
    assert np.median([z for _, z in falls]) == pytest.approx(3.5, abs=0.3)


def test_a_schedule_too_short_is_continued_until_the_elbo_stops_improving():
    """At a small rate 100 steps leave the guide far from N(3, 0.5^2); the rule continues (at
    the schedule's geometric middle rate, iterates averaged) to the posterior; without it the
    draws stay off and the verdict says so."""
    short, warned = _svi(num_steps=100, lr=0.05, plateau=False)
    assert short.diagnostics["elbo_plateau"] is False and not warned
    assert short.diagnostics["num_steps"] == 100
    assert abs(short.raw_chains.mean() - MEAN) > 0.5
    post, warned = _svi(num_steps=100, lr=0.05, max_steps=5000)
    d = post.diagnostics
    assert d["elbo_plateau"] is True and 100 < d["num_steps"] <= 5000 and not warned
    assert abs(d["elbo_improvement_se"]) < 2
    assert abs(post.raw_chains.mean() - MEAN) < 0.1


def test_a_schedule_too_short_to_judge_is_left_as_asked():
    """30 steps hold fewer than two windows of 50: a quick look, not judged nor continued."""
    post, warned = _svi(num_steps=30)
    assert post.diagnostics["num_steps"] == 30 and post.diagnostics["elbo_plateau"] is None
    assert not warned


def test_the_cap_is_warned_about():
    post, warned = _svi(num_steps=100, lr=0.01, max_steps=300)
    assert post.diagnostics["num_steps"] == 300 and post.diagnostics["elbo_plateau"] is False
    assert warned and "raise max_steps" in warned[0]


def test_a_schedule_that_reached_the_plateau_is_unchanged():
    on, _ = _svi(num_steps=1000)
    off, _ = _svi(num_steps=1000, plateau=False)
    assert on.diagnostics["elbo_plateau"] is True and on.diagnostics["num_steps"] == 1000
    np.testing.assert_array_equal(on.raw_chains, off.raw_chains)


@pytest.mark.parametrize("options, match", [(dict(plateau="yes"), "plateau"),
                                            (dict(num_steps=500, max_steps=100), "max_steps")])
def test_bad_plateau_options_are_refused(options, match):
    with pytest.raises((TypeError, ValueError), match=match):
        _svi(**options)
