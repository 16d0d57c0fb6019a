"""The variance factor measured for a fit by simulation (probdr.infer.calibrate) and the graphs
it simulates (probdr.laws.simulate), against closed forms and a model whose truth is known."""

import numpy as np
import pytest
import scipy.stats as st
import torch

from probdr.infer.calibrate import (
    calibrate_by_simulation,
    coverage_factor,
    mahalanobis_sq,
    replications,
)
from probdr.infer.draws import Posterior
from probdr.kernels import get_kernel
from probdr.laws.graph import get_prior
from probdr.laws.simulate import simulate_observed_graph
from probdr.laws.weights import KernelWeights


@pytest.mark.parametrize("prior,kernel", [("E", "student"), ("D", "student"),
                                          ("B", "umap_odds"), ("B", "gaussian")])
def test_simulated_graphs_average_to_the_latent_laws_mean(prior, kernel):
    """The average of many simulated observed graphs is the latent law's mean graph E[W]
    (torch's own law of the same weights), cell by cell within Monte Carlo error."""
    g = torch.Generator().manual_seed(0)
    n, reps, weight = 12, 4000, 3.0
    Z = 1.5 * torch.randn(n, 2, dtype=torch.float64, generator=g)
    k = get_kernel(kernel)
    mean = get_prior(prior).posterior(KernelWeights(Z, k, normaliser="exact")).mean
    total = sum(simulate_observed_graph(prior, Z, k, weight, g).to_dense() for _ in range(reps))
    avg = total / reps
    # each cell's average of reps draws of (count / weight): its sd is at most sqrt(mean/w/reps)
    sd = torch.sqrt(mean.clamp_min(1e-3) / weight / reps)
    assert float(((avg - mean).abs() / sd).max()) < 5.0
    assert torch.all(avg.diagonal() == 0)


def test_simulated_graph_totals_follow_the_law():
    """E: omega * n edges in all (a whole-number weight), each of 1/omega; D: omega per row;
    a fractional weight draws floor or ceil with the right mean."""
    g = torch.Generator().manual_seed(1)
    Z = torch.randn(50, 2, dtype=torch.float64, generator=g)
    k = get_kernel("student")
    E = simulate_observed_graph("E", Z, k, 4.0, g)
    assert float(E.values().sum()) == pytest.approx(50.0)
    assert torch.allclose(E.values() * 4, (E.values() * 4).round())
    D = simulate_observed_graph("D", Z, k, 3.0, g).to_dense()
    assert torch.allclose(D.sum(1), torch.ones(50, dtype=torch.float64))
    rows = np.mean([float(simulate_observed_graph("D", Z, k, 2.5, g).values().sum()) * 2.5 / 50
                    for _ in range(200)])
    assert rows == pytest.approx(2.5, abs=0.02)
    with pytest.raises(ValueError, match="latent law"):
        simulate_observed_graph("DS", Z, k, 1.0, g)
    with pytest.raises(ValueError, match="positive"):
        simulate_observed_graph("E", Z, k, 0.0, g)


def test_coverage_factor_recovers_a_scaled_chi_square():
    rng = np.random.default_rng(0)
    for c, q in ((1.0, 2), (4.0, 2), (0.5, 3)):
        d2 = c * rng.chisquare(q, 200_000)
        assert coverage_factor(d2, q) == pytest.approx(c, rel=0.02)
    assert replications(200) == 10 and replications(5000) == 1 and replications(300, 1000) == 4


def _gaussian_posterior(mean: np.ndarray, sd: float, rng, draws: int = 400) -> Posterior:
    chains = mean[None, None] + sd * rng.standard_normal((1, draws, *mean.shape))
    return Posterior("svi", chains, mean)


def test_mahalanobis_of_a_calibrated_gaussian_is_chi_square():
    """Truth drawn from the approximation itself: d^2 ~ chi2(2) (alignment of 300 points costs
    little)."""
    rng = np.random.default_rng(2)
    mean = 5 * rng.standard_normal((300, 2))
    truth = mean + 0.3 * rng.standard_normal(mean.shape)
    d2 = mahalanobis_sq(truth, _gaussian_posterior(mean, 0.3, rng))
    assert st.kstest(d2, st.chi2(2).cdf).pvalue > 0.001


def test_calibration_measures_how_much_too_narrow_an_approximation_is():
    """A model y ~ N(Z, s^2) whose approximation reports sd s / 2 (four times too little
    variance): the simulation measures the factor 4 and the regions then hold their share of a
    new truth."""
    rng = np.random.default_rng(3)
    s, n = 0.2, 400
    truth = torch.as_tensor(4 * rng.standard_normal((n, 2)))

    def draw(Z, g):
        return Z.numpy() + s * torch.randn(Z.shape, dtype=torch.float64, generator=g).numpy()

    def refit(y):
        return _gaussian_posterior(y, s / 2, rng)

    cal = calibrate_by_simulation(lambda g: draw(truth, g), refit, truth,
                                  generator=torch.Generator().manual_seed(0), n_replications=5)
    assert cal.inflation == pytest.approx(4.0, rel=0.15)
    assert cal.raw_coverage[1] < 0.5 and cal.coverage == pytest.approx((0.5, 0.9), abs=0.04)
    assert cal.replications == 5 and cal.points == 5 * n
    # applied to a fresh data set, the inflated regions cover
    y = draw(truth, torch.Generator().manual_seed(9))
    post = _gaussian_posterior(y, s / 2 * np.sqrt(cal.inflation), rng)
    d2 = mahalanobis_sq(truth.numpy(), post)
    assert np.mean(d2 <= st.chi2.ppf(0.9, 2)) == pytest.approx(0.9, abs=0.04)


@pytest.mark.calibration
def test_a_fit_measures_its_factor_on_replications_of_itself():
    """The public path: a custom (D, D) coupling on data drawn from its law measures its
    factor on enough replications for 2000 distances (10 at 100 points), through its own MAP
    schedule, mode search and Laplace approximation; the factor brings the simulated truth's
    50 % and 90 % regions to their share in-sample, and the raw ones were too narrow."""
    import probdr

    g = torch.Generator().manual_seed(0)
    Zt = 3 * torch.randn(100, 2, dtype=torch.float64, generator=g)
    W = simulate_observed_graph("D", Zt, get_kernel("student"), 4.0, g).to_dense().numpy()
    est = probdr.GraphCoupling(prior_x="D", prior_z="D", kernel_z="student",
                               affinity="precomputed", coupling_weight=4.0, z_prior=3.0,
                               n_iter=300, inference="laplace", random_state=0).fit(W)
    cal = est.calibration_
    assert cal.replications == 10 and cal.points == 1000
    assert cal.raw_coverage[1] < 0.85 and cal.inflation > 1.5
    assert cal.coverage[0] == pytest.approx(0.5, abs=0.12)
    assert cal.coverage[1] == pytest.approx(0.9, abs=0.08)
    assert est.posterior_.diagnostics["inflation"] == cal.inflation
    again = probdr.GraphCoupling(prior_x="D", prior_z="D", kernel_z="student",
                                 affinity="precomputed", coupling_weight=4.0, z_prior=3.0,
                                 n_iter=300, inference="laplace", random_state=0).fit(W)
    assert again.calibration_.inflation == cal.inflation  # repeatable


def test_models_that_cannot_be_simulated_say_so():
    """A model with no simulation of its data (the Wishart PCA coupling) warns and records why
    its factor is missing; NUTS needs none and refuses calibrate=True."""
    import probdr
    from probdr.estimators.params import InvalidParameterError

    X = np.random.default_rng(0).standard_normal((40, 5))
    with pytest.warns(RuntimeWarning, match="variance factor is not measured"):
        est = probdr.WishartPCA(n_components=2, inference="svi", random_state=0,
                                inference_params={"num_steps": 10}).fit(X)
    assert est.calibration_ is None
    assert "cannot be simulated" in est.posterior_.diagnostics["calibration"]
    with pytest.raises(InvalidParameterError, match="sampler .*needs no factor"):
        probdr.TSNE(inference="mcmc", inference_params={"calibrate": True}).fit(X)


def test_a_given_graph_of_a_shortcut_setting_measures_its_own_factor():
    """t-SNE's latent law with the Cauchy kernel has a shortcut factor for the presets, fitted
    to features; the same law fitted to a given graph measures its factor (the shortcut does
    not hold at other temperatures and prior scales), unless calibrate=False."""
    import probdr
    from probdr.estimators.coupling import CALIBRATED_INFLATION

    g = torch.Generator().manual_seed(0)
    Zt = 3 * torch.randn(60, 2, dtype=torch.float64, generator=g)
    W = simulate_observed_graph("E", Zt, get_kernel("student"), 4.0, g).to_dense().numpy()
    kw = dict(prior_x="E", prior_z="E", kernel_z="student", affinity="precomputed",
              coupling_weight=4.0, z_prior=3.0, n_iter=200, inference="laplace", random_state=0)
    est = probdr.GraphCoupling(**kw, inference_params={"calibration_points": 1}).fit(W)
    assert est.calibration_ is not None and est.calibration_.replications == 1
    assert est.posterior_.diagnostics["inflation"] == est.calibration_.inflation
    assert est.posterior_.diagnostics["inflation"] != CALIBRATED_INFLATION[("laplace", "E",
                                                                            "cauchy")]
    raw = probdr.GraphCoupling(**kw, inference_params={"calibrate": False}).fit(W)
    assert raw.calibration_ is None and raw.posterior_.diagnostics["inflation"] == 1.0
