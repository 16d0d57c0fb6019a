"""The multi-start mode search (``inference_params={"restarts": k}``): a cold posterior has many
modes, and one MAP schedule may end in a basin far below the best. The posterior is centred on
the converged mode of highest log density among the schedule's MAP's and k MAP fits from random
starts. Checked on data simulated from t-SNE's own law at a cold temperature, where the mode
searched from the truth gives the best basin known."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.utils._param_validation import InvalidParameterError

import probdr
from probdr.estimators.inference import (
    AUTO_RESTARTS,
    RESTART_MAX_POINTS,
    _estimator_options,
    _search_plan,
)
from probdr.infer.mode import _neg_log_joint, converge_mode, log_density

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from calibration_user import LAWS, simulate  # noqa: E402


def fit(W, m, s, seed, **params):
    est = probdr.GraphCoupling(**LAWS["tsne"], affinity="precomputed", coupling_weight=m,
                               z_prior=s, inference="laplace", random_state=seed,
                               inference_params={"calibrate": False, **params})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(W)


def posterior_density(est):
    """The posterior's model and arguments, the observed graph in float64 (the precision the
    multi-start search compares modes in)."""
    model = est._coupling.model(whole_epoch=True, epoch_steps=1)
    kw = {**est.model_kwargs_, "kernel": est.kernel_}
    return model, dict(kw, W_X=kw["W_X"].double())


def test_log_density_is_the_negative_log_joint_or_its_mean():
    Zt, W = simulate("tsne", 30, 4.0, 3.0, 0)
    est = fit(W, 4.0, 3.0, 0, restarts=0)
    model, kw = posterior_density(est)
    Z = torch.as_tensor(est.mode_embedding_)
    assert log_density(model, kw, Z) == -float(_neg_log_joint(model, kw, Z))
    assert est.mode_restarts_ is None  # restarts=0: the schedule's MAP alone


def test_the_centre_is_the_best_of_the_searched_modes_and_repeatable():
    """On 60 points of t-SNE's law at m = 20 (replication 3) the schedule's MAP ends about 70
    nats below the mode a random restart (or a graph start) reaches; the centre is the best, its density the
    largest recorded, and the same seed gives the same centre."""
    Zt, W = simulate("tsne", 60, 20.0, 3.0, 3)
    est = fit(W, 20.0, 3.0, 3, restarts=3)
    rec = est.mode_restarts_
    assert rec["starts"] == ["schedule"] + ["graph"] * 6 + ["random"] * 3
    assert len(rec["log_density"]) == 10 and len(rec["converged"]) == 10
    assert rec["chosen"] == int(np.argmax(rec["log_density"]))
    model, kw = posterior_density(est)
    centre = log_density(model, kw, torch.as_tensor(est.mode_embedding_).double())
    # the float64 mode rounded to the fit's float32: a change of the density far below a nat
    assert centre == pytest.approx(max(rec["log_density"]), abs=1e-2)
    # the schedule's own mode is searched first: its density is the first recorded
    first = converge_mode(model, kw, torch.as_tensor(est.map_embedding_).double(), warn=False)
    assert log_density(model, kw, first.Z) == pytest.approx(rec["log_density"][0], abs=1e-6)
    assert centre > rec["log_density"][0] + 1.0  # another start found a better basin here
    assert est.map_converged_ == rec["converged"][rec["chosen"]]
    np.testing.assert_array_equal(est.posterior_.reference, est.mode_embedding_)
    again = fit(W, 20.0, 3.0, 3, restarts=3)
    np.testing.assert_array_equal(again.mode_embedding_, est.mode_embedding_)
    # the MAP (embedding_) stays the schedule's: the plain fit's numbers
    plain = probdr.GraphCoupling(**LAWS["tsne"], affinity="precomputed", coupling_weight=20.0,
                                 z_prior=3.0, random_state=3).fit(W)
    np.testing.assert_array_equal(est.embedding_, plain.embedding_)


@pytest.mark.slow
def test_restarts_close_the_gap_to_the_truths_basin():
    """Over 6 replications of 60 points (t-SNE's law, m = 20, s = 3): the search with HMC's
    default number of restarts ends nearer the density of the mode searched from the truth
    than the schedule's MAP alone: never below it, and at most half its mean gap (the
    schedule's poor basins, 80 nats and more below the truth's, are the ones restarts fix)."""
    gaps = []
    for seed in range(6):
        Zt, W = simulate("tsne", 60, 20.0, 3.0, seed)
        est = fit(W, 20.0, 3.0, seed, restarts=AUTO_RESTARTS)
        model, kw = posterior_density(est)
        truth = log_density(model, kw, converge_mode(model, kw, torch.as_tensor(Zt),
                                                     warn=False).Z)
        rec = est.mode_restarts_
        assert rec["starts"].count("random") == AUTO_RESTARTS
        gaps.append((truth - rec["log_density"][0], truth - max(rec["log_density"])))
    gaps = np.array(gaps)
    assert (gaps[:, 1] <= gaps[:, 0]).all()
    assert gaps[:, 1].mean() < 0.5 * gaps[:, 0].mean(), gaps


def test_search_plan_rules():
    steps, r = {"restarts": "auto", "converge": True}, object()
    assert _search_plan(steps, 200, r, "hmc", False) == (AUTO_RESTARTS, True)
    # the approximations: the graph's starts where the graph is given, no MAP fits
    assert _search_plan(steps, 200, r, "laplace", True) == (0, True)
    assert _search_plan(steps, 200, r, "laplace", False) == (0, False)
    assert _search_plan(steps, RESTART_MAX_POINTS + 1, r, "hmc", False) == (0, False)
    assert _search_plan(steps, 200, None, "hmc", False) == (0, True)  # no random start
    assert _search_plan({"restarts": 2, "converge": True}, 10**6, r, "laplace", False) == (2, True)
    assert _search_plan({"restarts": 0, "converge": True}, 200, r, "laplace", True) == (0, False)
    assert _search_plan({"restarts": "auto", "converge": False}, 200, r, "hmc", True) == (0, False)


def test_the_mode_search_is_the_default_of_svi_given_its_graph():
    """SVI searches the mode first where the observed graph is given (its schedule's MAP may
    lie in a basin hundreds of nats below), not on features (where it costs SVI four times
    its time); Laplace and HMC always, NUTS never, unless asked."""
    assert _estimator_options({}, "svi", graph_given=True)["converge"] is True
    assert _estimator_options({}, "svi", graph_given=False)["converge"] is False
    assert _estimator_options({}, "laplace")["converge"] is True
    assert _estimator_options({}, "hmc")["converge"] is True
    assert _estimator_options({}, "mcmc", graph_given=True)["converge"] is False
    assert _estimator_options({"converge": False}, "svi", graph_given=True)["converge"] is False


def test_laplace_on_a_given_graph_is_centred_on_the_best_of_the_graphs_starts():
    """On 100 points of UMAP's B law at m = 8 the schedule's MAP ends 121 nats below the mode
    searched from the truth; a Laplace fit given the graph (no restarts asked for) also searches
    the starts read off the graph and is centred within a few nats of the truth's mode."""
    Zt, W = simulate("umap", 100, 8.0, 3.0, 0)
    est = probdr.GraphCoupling(**LAWS["umap"], affinity="precomputed", coupling_weight=8.0,
                               z_prior=3.0, inference="laplace", random_state=0,
                               inference_params={"calibrate": False})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(W)
    rec = est.mode_restarts_
    assert rec["starts"] == ["schedule"] + ["graph"] * 6
    model, kw = posterior_density(est)
    truth = log_density(model, kw, converge_mode(model, kw, torch.as_tensor(Zt), warn=False).Z)
    assert truth - rec["log_density"][0] > 50.0  # the schedule's basin
    assert truth - max(rec["log_density"]) < 5.0
    np.testing.assert_array_equal(est.posterior_.reference, est.mode_embedding_)


def test_presets_on_features_search_no_graph_starts():
    """Affinities computed from features are not draws of the latent law: a preset's Laplace
    fit searches the mode from its schedule's MAP alone."""
    from sklearn.datasets import load_digits
    X = load_digits().data[:150]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = probdr.TSNE(inference="laplace", random_state=0, n_iter=250).fit(X)
    assert est.mode_restarts_ is None and est.map_converged_ is not None


@pytest.mark.parametrize("params, match", [
    ({"restarts": -1}, "restarts"), ({"restarts": 1.5}, "restarts"),
    ({"restarts": True}, "restarts"), ({"restarts": 2, "converge": False}, "converge=True"),
])
def test_bad_restarts_fail_before_the_fit(params, match):
    est = probdr.TSNE(inference="laplace", inference_params=params)
    with pytest.raises(InvalidParameterError, match=match):
        est.fit(np.random.default_rng(0).normal(size=(40, 5)))


def test_restarts_need_an_estimator_with_random_starts():
    with pytest.raises(InvalidParameterError, match="graph couplings"):
        probdr.WishartPCA(n_components=2, inference="svi",
                   inference_params={"restarts": 2, "converge": True}).fit(
            np.random.default_rng(0).normal(size=(30, 4)))
