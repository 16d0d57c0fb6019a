"""The sampler that scales (probdr.infer.hmc, inference="hmc"): against closed-form posteriors,
a positive site's law (its Jacobian), the estimator path, repeatability and its refusals."""

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import scipy.stats as st
import torch
from sklearn.datasets import load_digits

import probdr
from probdr.estimators.params import InvalidParameterError
from probdr.infer.hmc import DualAveraging, Whitened, likelihood_sampled, widest_variance
from probdr.infer.posterior import fit_posterior

FAST = dict(warmup=150, num_samples=300, num_chains=2)


def _gaussian(n=8, q=2, seed=0):
    """A correlated Gaussian over Z (n, q): its mean, covariance and a model of it."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n * q, n * q, dtype=torch.float64, generator=g) / (n * q) ** 0.5
    cov = A @ A.T + 0.1 * torch.eye(n * q, dtype=torch.float64)
    mu = torch.randn(n * q, dtype=torch.float64, generator=g)
    P = torch.linalg.inv(cov)

    def model():
        Z = pyro.sample("Z", dist.ImproperUniform(dist.constraints.real, (), (n, q)))
        d = Z.reshape(-1) - mu
        pyro.factor("lik", -0.5 * d @ P @ d)

    return mu, cov, model


def test_hmc_draws_a_correlated_gaussian():
    """Means within 0.15 posterior sd and sds within 12 % of the closed form, every coordinate,
    R-hat near 1: the Metropolis test and the adapted metric leave the law exact."""
    mu, cov, model = _gaussian()
    post = fit_posterior(model, {}, mu.reshape(8, 2) + 0.3, method="hmc", align=False,
                         generator=torch.Generator().manual_seed(1), **FAST)
    S = post.chains.reshape(-1, 16)
    sd = cov.diagonal().sqrt().numpy()
    assert np.abs(S.mean(0) - mu.numpy()).max() / sd.min() < 0.15 * 2
    assert np.median(np.abs(S.mean(0) - mu.numpy()) / sd) < 0.15
    assert np.abs(S.std(0) / sd - 1).max() < 0.12
    d = post.diagnostics
    assert d["r_hat_max"] < 1.05 and d["divergences"] == [0, 0]
    assert 0.5 < np.mean(d["accept_prob"]) < 0.99
    assert d["likelihood"] == "the exact likelihood"
    assert post.method == "hmc" and post.chains.shape == (2, d["num_samples"], 8, 2)
    assert d["num_samples"] >= 300 and d["ess_median"] >= 400


def test_unmixed_chains_draw_more_blocks_up_to_the_cap():
    """Chains of 10 draws cannot give the median coordinate 400 effective draws: they draw
    blocks of 10 more up to max_samples, the first draws being those of a run that stops at 10
    (the chains continue; nothing restarts), and the diagnostics say how many were drawn."""
    mu, cov, model = _gaussian()
    common = dict(method="hmc", align=False, warmup=40, num_samples=10, num_chains=2)

    def run(most):
        return fit_posterior(model, {}, mu.reshape(8, 2) + 0.3, max_samples=most,
                             generator=torch.Generator().manual_seed(1), **common)

    short, long = run(10), run(30)
    assert short.chains.shape == (2, 10, 8, 2) and short.diagnostics["blocks_added"] == 0
    assert long.chains.shape == (2, 30, 8, 2) and long.diagnostics["blocks_added"] == 2
    assert long.diagnostics["num_samples"] == 30
    np.testing.assert_array_equal(long.chains[:, :10], short.chains)


def test_mixed_chains_stop_at_num_samples():
    """Chains that have mixed at num_samples draw no more (the rule of chains_mixed)."""
    from probdr.infer.posterior import chains_mixed

    mu, cov, model = _gaussian()
    post = fit_posterior(model, {}, mu.reshape(8, 2) + 0.3, method="hmc", align=False,
                         target_ess=100, generator=torch.Generator().manual_seed(1), **FAST)
    assert chains_mixed(post.diagnostics, target_ess=100)
    assert post.diagnostics["blocks_added"] == 0 and post.chains.shape[1] == 300
    assert not chains_mixed({"r_hat_max_distances": 1.2, "ess_median": 500.0})
    assert not chains_mixed({"r_hat_max_distances": 1.01, "ess_median": 399.0})
    assert chains_mixed({"r_hat_max_distances": 1.01, "ess_median": 60.0}, target_ess=50)


def test_draws_wanted_follows_the_effective_draws_rate():
    """More draws in proportion to the missing effective draws (a tenth more), clipped to a
    quarter block and a block; a whole block while the chains are apart; none once mixed."""
    from probdr.infer.posterior import draws_wanted

    ok = 1.01
    assert draws_wanted({"r_hat_max_distances": ok, "ess_median": 450.0}, 300, 300) == 0
    # 300 draws gave 250 effective: 400 need 300 * (1.1 * 400 / 250 - 1) = 228 more
    assert draws_wanted({"r_hat_max_distances": ok, "ess_median": 250.0}, 300, 300) == 228
    assert draws_wanted({"r_hat_max_distances": ok, "ess_median": 390.0}, 300, 300) == 75
    assert draws_wanted({"r_hat_max_distances": ok, "ess_median": 40.0}, 300, 300) == 300
    assert draws_wanted({"r_hat_max_distances": 1.3, "ess_median": 390.0}, 300, 300) == 300
    assert draws_wanted({"r_hat_max_distances": ok, "ess_median": 90.0}, 300, 200,
                        target_ess=100) == 67


def test_chains_stop_once_they_reach_the_target_ess():
    """A higher target_ess makes the chains draw on until the median coordinate's effective
    draws reach it (the first draws unchanged); an unreachable one stops at max_samples."""
    mu, cov, model = _gaussian()
    common = dict(method="hmc", align=False, warmup=100, num_samples=100, num_chains=2,
                  max_samples=700)

    def run(target):
        return fit_posterior(model, {}, mu.reshape(8, 2) + 0.3, target_ess=target,
                             generator=torch.Generator().manual_seed(1), **common)

    low, high, far = run(20), run(400), run(10 ** 6)
    assert low.diagnostics["num_samples"] == 100 and low.diagnostics["ess_median"] >= 20
    assert 100 < high.diagnostics["num_samples"] < 700
    assert high.diagnostics["ess_median"] >= 400
    np.testing.assert_array_equal(high.chains[:, :100], low.chains)
    assert far.diagnostics["num_samples"] == 700


def test_hmc_positive_site_follows_its_law():
    """A positive site (a Gamma, moved as its logarithm) independent of Z keeps its prior law:
    the log-Jacobian of the transform is in the potential (without it the draws would follow
    Gamma(a - 1, b))."""
    a, b = 3.0, 2.0

    def model():
        pyro.sample("Z", dist.Normal(torch.zeros(5, 2, dtype=torch.float64), 1.0).to_event(2))
        pyro.sample("tau", dist.Gamma(torch.tensor(a, dtype=torch.float64), b))

    post = fit_posterior(model, {}, torch.zeros(5, 2, dtype=torch.float64), method="hmc",
                         align=False, init_values={"tau": torch.tensor(1.0)},
                         generator=torch.Generator().manual_seed(2), **FAST)
    tau = post.sites["tau"].ravel()
    assert np.all(tau > 0)
    ref = st.gamma(a, scale=1 / b)
    assert abs(tau.mean() - ref.mean()) < 0.1 * ref.std()
    assert abs(tau.std() / ref.std() - 1) < 0.12
    assert st.kstest(tau[::5], ref.cdf).pvalue > 1e-3


def test_whitened_coordinates_round_trip():
    """``whiten`` inverts ``unconstrained`` for any blocks and scales."""
    _, _, model = _gaussian(n=4)
    g = torch.Generator().manual_seed(0)
    values = {"Z": torch.randn(4, 2, dtype=torch.float64, generator=g)}
    supports = {"Z": dist.constraints.real}
    A = torch.randn(4, 2, 2, dtype=torch.float64, generator=g)
    w = Whitened(model, {}, values, supports, "Z", A @ A.transpose(1, 2) + torch.eye(2),
                 stochastic=False)
    x = torch.randn(8, dtype=torch.float64, generator=g)
    assert torch.allclose(w.whiten(w.unconstrained(x)), x)


def test_dual_averaging_finds_the_step_of_its_target():
    """On a response whose acceptance falls with the step (exp(-step)), the averaged step
    settles where the acceptance meets the target: log(1 / 0.75)."""
    adapt = DualAveraging(1.0, 0.75)
    for _ in range(2000):
        adapt.update(float(np.exp(-adapt.step)))
    assert abs(adapt.final - np.log(1 / 0.75)) < 0.02


def _window(seed, k=60, d=400, spike=None, rho=0.0):
    """k draws of N(0, I_d) (an AR(1) chain of correlation ``rho`` if given), one random unit
    direction's variance raised to ``spike``."""
    g = torch.Generator().manual_seed(seed)
    E = torch.randn(k, d, dtype=torch.float64, generator=g)
    for t in range(1, k) if rho else ():
        E[t] = rho * E[t - 1] + (1 - rho**2) ** 0.5 * E[t]
    if spike is not None:
        u = torch.randn(d, dtype=torch.float64, generator=g)
        u = u / u.norm()
        E = E + (spike**0.5 - 1) * (E @ u)[:, None] * u[None]
    return E


def _in_sample_top(draws):
    """The top eigenvalue of the draws' sample covariance (the estimate widest_variance
    replaces)."""
    dX = draws - draws.mean(0)
    return float(torch.linalg.svdvals(dX)[0] ** 2) / (len(draws) - 1)


SEEDS = range(8)


def test_widest_variance_of_white_noise_is_one():
    """60 draws of white noise in 400 dimensions: every direction's variance is 1; the
    in-sample top eigenvalue sits at the Marchenko-Pastur edge (1 + sqrt(400/59))^2 = 13."""
    est = [widest_variance(_window(s)) for s in SEEDS]
    old = [_in_sample_top(_window(s)) for s in SEEDS]
    assert abs(np.mean(est) - 1) < 0.15 and all(abs(e - 1) < 0.6 for e in est)
    assert min(old) > 10  # the estimate replaced: a quarter period sqrt(10) times too long


def test_widest_variance_of_a_spike():
    """One random direction of variance 25 in 400 white dimensions, 60 draws: the estimate is
    the held-out variance along a direction found from m = 45 draws, which random-matrix
    theory puts at 1 + (s^2 - g) / (s + g), s = 24, g = 400 / 44 (18.1: the direction is
    only partly resolved); the in-sample top eigenvalue is inflated above 25 instead. With
    four times the draws the estimate comes closer to 25 (22.9 by the same formula)."""
    def closed(m):
        return 1 + (24.0**2 - 400 / (m - 1)) / (24.0 + 400 / (m - 1))

    est = [widest_variance(_window(s, spike=25.0)) for s in SEEDS]
    assert abs(np.mean(est) / closed(45) - 1) < 0.15
    assert 0.65 * 25 < np.mean(est) < 25
    assert np.mean([_in_sample_top(_window(s, spike=25.0)) for s in SEEDS]) > 29
    more = [widest_variance(_window(s, k=240, spike=25.0)) for s in SEEDS]  # m = 180
    assert np.mean(more) > np.mean(est) and abs(np.mean(more) / closed(180) - 1) < 0.1


def test_widest_variance_of_autocorrelated_noise_stays_near_one():
    """White noise drawn as an AR(1) chain (correlation 0.7: about 10 effective draws of 60):
    the in-sample top eigenvalue grows (to about 40), the cross-validated one, its held-out
    blocks kept apart from their training draws by the lag the autocorrelation decays in,
    stays near 1 (about 1.4: the training mean is noisier than 1/m says)."""
    est = [widest_variance(_window(s, rho=0.7)) for s in SEEDS]
    assert np.mean(est) < 2 and all(0.4 < e < 3 for e in est)
    assert min(_in_sample_top(_window(s, rho=0.7)) for s in SEEDS) > 25


def test_widest_variance_keeps_a_drift():
    """A chain drifting steadily along one direction across the window (a ramp of variance 16
    on white noise: 17 along it about the window's mean) is a wide direction to tune for:
    each held-out block is measured about the other draws' mean, not its own, so the drift
    counts (about 13.5; a block centred on its own mean would see a sixteenth of it)."""
    est = []
    for s in SEEDS:
        g = torch.Generator().manual_seed(100 + s)
        u = torch.randn(400, dtype=torch.float64, generator=g)
        ramp = torch.linspace(-1, 1, 60, dtype=torch.float64)
        ramp = ramp / ramp.std() * 4.0
        est.append(widest_variance(_window(s) + ramp[:, None] * (u / u.norm())[None]))
    assert np.mean(est) > 0.6 * 17 and min(est) > 8 and max(est) < 20


def test_widest_variance_of_a_short_or_still_window():
    """Four draws (the shortest window) give a finite, positive estimate; a chain that did not
    move (every trajectory rejected), in single precision, gives a unit variance, not NaN."""
    e = widest_variance(_window(0, k=4, d=6))
    assert np.isfinite(e) and e > 0
    assert widest_variance(torch.zeros(4, 6, dtype=torch.float32)) == 1.0
    still = torch.cat([torch.zeros(3, 6), torch.ones(3, 6)])  # moved once, between two blocks
    assert np.isfinite(widest_variance(still))


def test_likelihood_names():
    assert "FFT field" in likelihood_sampled("fft")
    assert "negative-sampling surrogate" in likelihood_sampled("negative_sampling")


pytestmark = pytest.mark.filterwarnings("ignore:HMC. the chains may not have converged")


@pytest.fixture(scope="module")
def digits():
    return load_digits().data[:60]


def test_tsne_hmc_through_the_estimator(digits):
    """The public path: a posterior that needs no factor, with chain diagnostics, centred on
    the converged mode, every summary finite; the same bits again with the same seed."""
    kw = dict(inference="hmc",
              inference_params=dict(warmup=30, num_samples=30, max_samples=30,
                                  max_leapfrog=8, restarts=1),
              coupling_weight=4.0, n_iter=250, random_state=0)
    est = probdr.TSNE(**kw).fit(digits)
    post = est.posterior_
    assert post.method == "hmc" and post.chains.shape == (2, 30, 60, 2)
    assert est.calibration_ is None
    assert "not needed" in post.diagnostics["calibration"]
    assert est.map_converged_ is not None  # the mode search ran (the default for HMC)
    # from the schedule's MAP, the six starts read off the graph and a random restart;
    # centred on the best mode
    rec = est.mode_restarts_
    assert rec["starts"] == ["schedule"] + ["graph"] * 6 + ["random"]
    assert len(rec["log_density"]) == 8 and rec["chosen"] == int(np.argmax(rec["log_density"]))
    assert np.all(np.isfinite(est.posterior_sd_)) and np.all(est.posterior_sd_ > 0)
    for key in ("r_hat_max", "ess_min", "ess_median", "ess_min_distances", "step_size"):
        assert key in post.diagnostics
    again = probdr.TSNE(**kw).fit(digits)
    assert np.array_equal(again.posterior_.chains, post.chains)


def test_umap_hmc_on_negative_sampling_holds_each_trajectorys_draws(digits):
    """A stochastic likelihood: each trajectory is scored with one draw of the negatives, so
    the chain accepts (a fresh draw at every evaluation would make the energy error noise and
    the acceptance collapse), and says which likelihood it sampled."""
    est = probdr.UMAP(inference="hmc", n_epochs=60, random_state=0,
                      repulsion="negative_sampling",
                      inference_params=dict(warmup=30, num_samples=20, max_samples=20, max_leapfrog=8)
                      ).fit(digits)
    d = est.posterior_.diagnostics
    assert "surrogate" in d["likelihood"]
    assert min(d["accept_prob"]) > 0.4
    assert np.all(np.isfinite(est.posterior_samples_))


def test_hmc_refuses_a_factor_and_bad_options(digits):
    with pytest.raises(InvalidParameterError, match="needs no factor"):
        probdr.TSNE(inference="hmc", inference_params={"calibrate": True}).fit(digits)
    with pytest.raises(InvalidParameterError, match="max_leapfrog"):
        probdr.TSNE(inference="hmc", inference_params={"max_leapfrog": 0}).fit(digits)
    with pytest.raises(InvalidParameterError, match="tree_depth"):
        probdr.TSNE(inference="hmc", inference_params={"max_tree_depth": 4}).fit(digits)


def test_integrated_energy_equals_the_value_on_a_quadratic():
    """The FFT's test (the gradient's work along the path, trapezoidal) is exact where the
    gradient is linear: on a Gaussian it accepts exactly what the value's test accepts."""
    from probdr.infer.hmc import _transition

    mu, _, model = _gaussian(n=4)
    values = {"Z": mu.reshape(4, 2).clone()}
    supports = {"Z": dist.constraints.real}
    eye = torch.eye(2, dtype=torch.float64).expand(4, 2, 2).clone()
    by_value = Whitened(model, {}, values, supports, "Z", eye, stochastic=False)
    by_work = Whitened(model, {}, values, supports, "Z", eye, stochastic=False, integrated=True)
    x = 0.7 * torch.randn(8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    U, g = by_value.energy(x)
    for step in (0.05, 0.3, 0.9):
        a = _transition(by_value, x, U, g, step, 7, torch.Generator().manual_seed(4))
        b = _transition(by_work, x, U, g, step, 7, torch.Generator().manual_seed(4))
        assert abs(a[3] - b[3]) < 1e-9 and abs(a[4] - b[4]) < 1e-8


def test_an_exact_density_is_sampled_in_float64(digits, monkeypatch):
    """A float32 fit's chains run on a float64 energy where the density is exact: the
    Metropolis test compares energies to within a nat, below float32's rounding of a large
    log density. The sampler is handed the observed graph and the centre in float64."""
    import probdr.estimators.inference as inference

    seen = {}

    def spy(model, kwargs, centre, **options):
        seen.update(W=kwargs["W_X"].dtype, centre=centre.dtype)
        return fit_posterior(model, kwargs, centre, **options)

    monkeypatch.setattr(inference, "fit_posterior", spy)
    est = probdr.TSNE(inference="hmc", repulsion="exact", n_iter=250, random_state=0,
                      inference_params=dict(warmup=10, num_samples=5, max_samples=5,
                                            max_leapfrog=4, restarts=0)).fit(digits)
    assert est.model_kwargs_["W_X"].dtype == torch.float32  # the fit's own dtype
    assert seen == {"W": torch.float64, "centre": torch.float64}


@pytest.mark.slow
def test_a_cold_b_law_posterior_mixes():
    """200 points of UMAP's B law at m = 20, s = 3 (replication 1), the default sampler: on a
    float32 energy (|log density| about 1.6e5) the chains tuned their step size to 4e-7 and
    stopped (R-hat 6e4); in float64 both move (step size 0.15, R-hat 1.04)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from calibration_user import LAWS, simulate

    Zt, W = simulate("umap", 200, 20.0, 3.0, 1)
    est = probdr.GraphCoupling(**LAWS["umap"], affinity="precomputed", coupling_weight=20.0,
                               z_prior=3.0, inference="hmc", random_state=1).fit(W)
    d = est.posterior_.diagnostics
    assert min(d["step_size"]) > 0.02 and d["r_hat_max"] < 1.2, d
