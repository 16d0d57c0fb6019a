"""UMAP's ``epoch_steps``: an epoch split into optimiser steps, each using its share of the edges
(umap-learn's sequential updates read the latest positions; one full-batch step per epoch
converges more slowly on large data)."""

import numpy as np
import pytest
import torch
from pyro import poutine
from pyro.distributions import MaskedDistribution

import probdr
from probdr.infer.schedule import OptimiserHooks, with_hooks
from probdr.kernels import get_kernel
from probdr.laws.graph import get_prior
from probdr.models.coupling import graph_coupling_model


@pytest.mark.parametrize(("n", "epochs", "steps"), [
    (400, 100, 3), (10_000, 100, 3), (10_001, 60, 12), (70_000, 60, 12), (100_000, 60, 12),
    (100_001, 100, 8), (1_000_000, 100, 8)])
def test_auto_rule(n, epochs, steps):
    """The default epochs and steps per epoch follow the data's size (UMAP_SCHEDULE); a given
    ``n_epochs`` or ``epoch_steps`` replaces only its own part."""
    assert probdr.UMAP()._steps(n) == (epochs * steps, steps)
    assert probdr.UMAP(n_epochs=7)._steps(n) == (7 * steps, steps)
    assert probdr.UMAP(epoch_steps=3)._steps(n) == (epochs * 3, 3)
    assert probdr.LargeVis(n_iter=300)._steps(n) == (300, 1)  # counted in steps


def _used_edges(W, steps, seed):
    torch.manual_seed(seed)
    Z = torch.randn(W.shape[0], 2, dtype=torch.float64)
    model = with_hooks(graph_coupling_model, epoch_steps=steps)
    tr = poutine.trace(poutine.condition(model, data={"Z": Z})).get_trace(
        W, get_prior("B"), get_kernel("umap_odds", a=1.6, b=0.9), 2,
        repulsion="negative_sampling")
    return tuple(_sites_used(tr.nodes[name]) for name in ("W_Z_edges", "W_Z_negatives"))


def _sites_used(node) -> int:
    """The observations a site uses: all of them, or, at fixed shapes (sync-free mode), those
    its law's 0/1 mask keeps."""
    law = node["fn"]
    if isinstance(law, MaskedDistribution):
        return int(law._mask.sum())
    return node["value"].numel()


def _random_graph(n=300, k=10):
    """A sparse graph of n nodes, k random out-edges each with uniform values, and the
    generator that drew it (seed 0), to draw more from."""
    g = torch.Generator().manual_seed(0)
    rows = torch.arange(n).repeat_interleave(k)
    cols = (rows + torch.randint(1, n, (n * k,), generator=g)) % n
    v = torch.rand(n * k, generator=g, dtype=torch.float64)
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), v, (n, n)).coalesce(), g


@pytest.mark.parametrize("sync_free", [False, True])
def test_each_step_uses_its_share_of_the_edges(sync_free, monkeypatch):
    """The edges of a step are drawn with probability v / (max v * steps): selected on the CPU,
    weighted 0/1 at fixed shapes in sync-free mode (accelerators); the same law in both."""
    monkeypatch.setattr(probdr.config, "_sync_free", sync_free)
    W, _ = _random_graph()
    vals = W.values()
    expected = float(vals.sum() / vals.max())  # edges used per epoch, on average
    for steps in (1, 4):
        used = np.array([_used_edges(W, steps, s) for s in range(40)])
        assert used[:, 1].tolist() == (5 * used[:, 0]).tolist()  # 5 negatives per used edge
        # binomial mean over 40 draws: within 5 standard errors
        assert abs(used[:, 0].mean() - expected / steps) < 5 * np.sqrt(expected / steps / 40)


def test_steps_count_and_validation():
    X, _ = probdr.datasets.load("digits")
    est = probdr.UMAP(n_epochs=7, epoch_steps=3, random_state=0).fit(X[:300])
    assert est.epoch_steps_ == 3 and est.n_iter_ == 21
    for bad in (0, -1, 1.5, True, "many"):
        with pytest.raises(ValueError, match="epoch_steps"):
            probdr.UMAP(epoch_steps=bad).fit(X[:300])


def _log_likelihood(W, Z, steps, whole_epoch, seed):
    torch.manual_seed(seed)
    model = with_hooks(graph_coupling_model, epoch_steps=steps, whole_epoch=whole_epoch)
    tr = poutine.trace(poutine.condition(model, data={"Z": Z})).get_trace(
        W, get_prior("B"), get_kernel("umap_odds", a=1.6, b=0.9), 2,
        repulsion="negative_sampling")
    tr.compute_log_prob()
    return sum(float(tr.nodes[s]["log_prob_sum"]) for s in ("W_Z_edges", "W_Z_negatives"))


def test_whole_epoch_steps_estimate_the_whole_surrogate():
    """A step of an epoch of 4 estimates a quarter of the surrogate's log-likelihood (the MAP
    fit's scale); with ``whole_epoch`` (posterior inference), the whole of it: the mean over
    draws equals that of one-step epochs, within Monte Carlo error."""
    W, g = _random_graph()
    n = W.shape[0]
    Z = torch.randn(n, 2, generator=g, dtype=torch.float64)
    draws = 200
    one = np.array([_log_likelihood(W, Z, 1, False, s) for s in range(draws)])
    whole = np.array([_log_likelihood(W, Z, 4, True, s) for s in range(draws)])
    share = np.array([_log_likelihood(W, Z, 4, False, s) for s in range(draws)])
    se = np.sqrt(one.var() / draws + whole.var() / draws)
    assert abs(whole.mean() - one.mean()) < 4 * se
    assert abs(4 * share.mean() - one.mean()) < 4 * np.sqrt(one.var() / draws
                                                             + 16 * share.var() / draws)
    # and the two differ (the test can fail): a quarter is far from the whole
    assert abs(share.mean() - one.mean()) > 20 * se
    # with one step an epoch, whole_epoch changes nothing, draw for draw
    assert _log_likelihood(W, Z, 1, True, 3) == _log_likelihood(W, Z, 1, False, 3)


@pytest.mark.parametrize("steps, split_min, posterior_steps",
                         [(2, 0, 2), (12, 0, 4), (3, 10_000, 1)])
def test_umap_posterior_weighs_the_whole_epoch(monkeypatch, steps, split_min, posterior_steps):
    """A UMAP fit with several steps an epoch runs its posterior on the whole epoch's weight
    (its MAP on the steps' shares), the epoch cut into at most POSTERIOR_EPOCH_STEPS steps, and
    not cut up to POSTERIOR_SPLIT_MIN_POINTS points (300 here; 0 makes these 300 a large fit)."""
    import probdr.estimators.coupling as coupling
    import probdr.estimators.inference as inference

    monkeypatch.setattr(coupling, "POSTERIOR_SPLIT_MIN_POINTS", split_min)
    seen = {}
    real = inference.fit_posterior

    def spy(model, kwargs, *a, **kw):
        seen.update(hooks=model.hooks, kwargs=kwargs)
        return real(model, kwargs, *a, **kw)
    monkeypatch.setattr(inference, "fit_posterior", spy)
    X, _ = probdr.datasets.load("digits", n_samples=300)
    est = probdr.UMAP(n_epochs=4, epoch_steps=steps, random_state=0, inference="svi",
                      inference_params={"num_steps": 20}).fit(X)
    hooks = seen["hooks"]
    assert isinstance(hooks, OptimiserHooks)
    assert hooks.whole_epoch is True and hooks.epoch_steps == posterior_steps
    assert hooks.pair_grad_clip == est.grad_clip
    assert est._coupling.epoch_steps == steps
    # the model's arguments hold the model only: the optimiser's settings are the driver's
    for key in ("whole_epoch", "epoch_steps", "pair_grad_clip"):
        assert key not in est.model_kwargs_ and key not in seen["kwargs"]


class _Stop(Exception):
    pass


@pytest.mark.parametrize("steps, params, expected", [
    (12, None, "split"), (1, None, 1000), (12, {"num_steps": 30}, 30)])
def test_svi_steps_where_the_epoch_is_split(monkeypatch, steps, params, expected):
    """SVI's default num_steps is SPLIT_EPOCH_SVI_STEPS where the posterior's epoch is cut into
    several steps, SVI_OPTIONS' otherwise; a given num_steps wins."""
    import probdr.estimators.coupling as coupling
    import probdr.estimators.inference as inference

    monkeypatch.setattr(coupling, "POSTERIOR_SPLIT_MIN_POINTS", 0)  # these 200 cut as a large fit
    from probdr.estimators.coupling import SPLIT_EPOCH_SVI_STEPS
    from probdr.infer.posterior import SVI_OPTIONS

    seen = {}

    def spy(model, kwargs, *a, **kw):
        seen.update(kw)
        raise _Stop
    monkeypatch.setattr(inference, "fit_posterior", spy)
    X, _ = probdr.datasets.load("digits", n_samples=200)
    with pytest.raises(_Stop):
        probdr.UMAP(n_epochs=2, epoch_steps=steps, random_state=0, inference="svi",
                    inference_params=params).fit(X)
    want = {"split": SPLIT_EPOCH_SVI_STEPS, 1000: SVI_OPTIONS["num_steps"]}.get(expected,
                                                                                 expected)
    assert seen.get("num_steps", SVI_OPTIONS["num_steps"]) == want
    assert SPLIT_EPOCH_SVI_STEPS < SVI_OPTIONS["num_steps"]


def test_the_model_holds_the_model_only():
    """The optimiser's heuristics are no arguments of the model and reach it through the
    driver's Pyro handler (OptimiserHooks), not through a thread-local setting."""
    import inspect

    import probdr._compute.edges as edges
    from probdr.kernels import UMAPKernel
    from probdr.laws.weights import KernelWeights

    params = set(inspect.signature(graph_coupling_model).parameters)
    assert not {"pair_grad_clip", "epoch_steps", "whole_epoch"} & params
    assert not hasattr(edges, "at_step") and not hasattr(edges, "current_step")
    Z = torch.zeros(5, 2)
    seen = []
    hooked = with_hooks(lambda: seen.append(KernelWeights(Z, UMAPKernel()).pair_grad_clip),
                        pair_grad_clip=4.0)
    hooked()
    assert seen == [4.0]
    assert KernelWeights(Z, UMAPKernel()).pair_grad_clip is None  # no handler: no clip
    assert KernelWeights(Z, UMAPKernel(), pair_grad_clip=2.0).pair_grad_clip == 2.0
    hooked = with_hooks(graph_coupling_model, epoch_steps=2)  # its declarations read through
    assert hooked.data_parallel is True and hooked.point_precisions is not None
