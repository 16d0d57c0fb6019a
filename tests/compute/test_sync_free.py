"""The optimisation loop without host synchronisation (``probdr.config.set_sync_free``), the mode
every accelerator runs in: no step after the first reads a value on the host or computes a shape
from the data (counted by a hook, since on a CPU such reads cost nothing), and the fit is the
same fit -- bit for bit where only the bookkeeping changes, to rounding where the FFT grid has a
fixed side, in law where negative sampling keeps every edge at weight 0 or 1."""

import collections

import numpy as np
import pytest
import torch
from helpers import HostSyncs

import probdr
from probdr import config, metrics
from probdr._compute import fft
from probdr._compute.fft import cauchy_log_total
from probdr.infer import map as map_module

CASES = {
    "TSNE-fft": ("TSNE", dict(repulsion="fft", n_iter=30, early_exaggeration_iter=10)),
    "TSNE-exact": ("TSNE", dict(repulsion="exact", n_iter=30, early_exaggeration_iter=10)),
    "SNE": ("SNE", dict(n_iter=30, early_exaggeration_iter=10)),
    "LargeVis": ("LargeVis", dict(n_iter=30)),
    "UMAP": ("UMAP", dict(n_epochs=30)),
    "GraphCoupling-sampled": ("GraphCoupling", dict(prior_z="B", repulsion="sampled", n_iter=30,
                                                    early_exaggeration_iter=10)),
}


@pytest.fixture
def sync_free():
    def use(on):
        config.set_sync_free(on)

    old = config.get_sync_free()
    yield use
    config.set_sync_free(old)


@pytest.fixture(autouse=True)
def small_grid(monkeypatch):
    """A fixed grid of 128 nodes a side instead of 1024: the same comparisons (both modes
    derive the spacing from MAX_GRID), at a CPU's pace."""
    monkeypatch.setattr(fft, "MAX_GRID", 128)


@pytest.fixture(scope="module")
def X300(digits):
    return digits[0][:300], digits[1][:300]


def _fit_counting(name, kw, X, monkeypatch, skip=2):
    """Fit, counting host synchronisations inside every optimiser step after the first
    ``skip`` (the first steps build the graph's caches, once per fit)."""
    hook, steps, step = HostSyncs(), [0], map_module.MAPFit._gradient_step

    def counted(self, kwargs):
        steps[0] += 1
        hook.active = steps[0] > skip
        try:
            return step(self, kwargs)
        finally:
            hook.active = False

    monkeypatch.setattr(map_module.MAPFit, "_gradient_step", counted)
    with hook:
        est = getattr(probdr, name)(random_state=0, **kw).fit(X)
    return est, hook.calls, steps[0]


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_no_host_synchronisation_inside_the_loop(case, device, X300, sync_free, monkeypatch):
    sync_free(True)
    name, kw = CASES[case]
    est, calls, steps = _fit_counting(name, dict(kw, device=device), X300[0], monkeypatch)
    assert steps == 30 * getattr(est, "epoch_steps_", 1)  # UMAP: 30 epochs of its steps
    assert dict(calls) == {}
    assert np.isfinite(est.embedding_).all()


def test_the_hook_sees_the_cpu_loops_reads(X300, sync_free, monkeypatch):
    """On the CPU (default mode) every step reads the collapse check on the host, and UMAP
    selects its edges by ``nonzero`` (numpy's ``flatnonzero`` of the mask's ``numpy()`` view on
    the CPU; the epoch's edges sorted by step once an epoch): the hook counts them, so an empty
    count above means something. (The loss of a point-mass guide is not read in the step:
    ``point_mass_loss``.)"""
    sync_free(False)
    name, kw = CASES["UMAP"]
    est, calls, steps = _fit_counting(name, dict(kw, device="cpu"), X300[0], monkeypatch)
    by_name = collections.Counter()
    for (what, _), count in calls.items():
        by_name[what] += count
    assert "item" not in by_name
    assert by_name["__bool__"] >= steps - 2
    assert by_name["nonzero"] + by_name["numpy"] >= (steps - 2) // est.epoch_steps_


@pytest.mark.parametrize("case", ["TSNE-exact", "SNE", "LargeVis"])
def test_same_fit_bit_for_bit_where_only_bookkeeping_changes(case, X300, sync_free,
                                                            monkeypatch):
    """Exact repulsion (and LargeVis's negative sampling at its edges, where only the loss and
    the collapse check change): the surrogate loss has Trace_ELBO's gradient, the branch-free
    collapse rescue writes the same numbers, the losses are read later. (The CPU's fused t-SNE
    step sums its attraction over the edge list here, as the Pyro path does, not in its one
    n x n pass.)"""
    from probdr.models import coupling_fused

    monkeypatch.setattr(coupling_fused, "DENSE_PAIRS_MAX_N", 0)
    name, kw = CASES[case]
    if case == "LargeVis":
        kw = dict(kw, repulsion="exact")
    fits = {}
    for on in (False, True):
        sync_free(on)
        fits[on] = getattr(probdr, name)(random_state=0, device="cpu", **kw).fit(X300[0])
    np.testing.assert_array_equal(fits[True].embedding_, fits[False].embedding_)
    np.testing.assert_array_equal(fits[True].loss_steps_, fits[False].loss_steps_)
    np.testing.assert_allclose(fits[True].loss_history_, fits[False].loss_history_, rtol=1e-6)


@pytest.mark.parametrize("span", [1e-3, 3.0, 40.0, 900.0])
def test_fixed_grid_gives_the_fitted_grids_sums(span, sync_free):
    """The fixed-side grid has the spacing of the fitted one; its extra nodes carry no charge:
    value and gradient of the FFT normaliser agree to float32 rounding, at every scale (the
    largest spreads the spacing beyond its default)."""
    Z = (torch.rand(800, 2, generator=torch.Generator().manual_seed(1)) * span).double()
    out = {}
    for on in (False, True):
        sync_free(on)
        Zr = Z.clone().requires_grad_()
        val = cauchy_log_total(Zr)
        val.backward()
        out[on] = (val.detach(), Zr.grad)
    torch.testing.assert_close(out[True][0], out[False][0], rtol=1e-9, atol=0)
    torch.testing.assert_close(out[True][1], out[False][1], rtol=1e-6,
                               atol=1e-9 * out[False][1].abs().max().item())


def test_fixed_grid_fit_matches_the_fitted_grid_fit(X300, sync_free):
    name, kw = CASES["TSNE-fft"]
    fits = {}
    for on in (False, True):
        sync_free(on)
        fits[on] = getattr(probdr, name)(random_state=0, device="cpu",
                                         **dict(kw, n_iter=60)).fit(X300[0])
    np.testing.assert_allclose(fits[True].loss_history_, fits[False].loss_history_, rtol=1e-3)
    a, b = fits[True].embedding_, fits[False].embedding_
    assert np.abs(a - b).max() < 1e-2 * np.abs(b).max()


def test_masked_negative_sampling_same_quality(digits, sync_free):
    """UMAP with every edge at weight 0/1 (fixed shapes) against the selected edges: the same
    law of the draws, another random stream, the same quality."""
    X, y = digits[0][:800], digits[1][:800]
    q = {}
    for on in (False, True):
        sync_free(on)
        Z = probdr.UMAP(random_state=0, n_epochs=200, device="cpu").fit_transform(X)
        q[on] = (metrics.trustworthiness(X, Z, 15), metrics.knn_accuracy(Z, y, 5))
    assert abs(q[True][0] - q[False][0]) < 0.01
    assert abs(q[True][1] - q[False][1]) < 0.03
    assert q[True][0] > 0.95


def test_non_finite_loss_reported_at_its_step(X300, sync_free):
    """Losses read every SYNC_EVERY steps: a non-finite one still names the step it appeared at,
    the same step as when every loss is read at once."""
    msgs = {}
    for on in (False, True):
        sync_free(on)
        est = probdr.TSNE(random_state=0, n_iter=80, early_exaggeration_iter=10,
                          learning_rate=1e38, device="cpu")
        with pytest.raises(FloatingPointError) as err:
            est.fit(X300[0])
        msgs[on] = str(err.value)
    assert msgs[True] == msgs[False]


def test_setting_is_validated_and_decides_by_device(sync_free):
    sync_free(None)
    assert config.sync_free_for("cpu") is False
    assert config.sync_free_for(torch.device("meta")) is True
    sync_free(True)
    assert config.sync_free_for("cpu") is True
    with pytest.raises(ValueError, match="sync_free"):
        config.set_sync_free("yes")


@pytest.mark.parametrize("steps", [1, 4])
def test_systematic_steps_use_each_edge_at_its_rate_at_a_fixed_shape(steps):
    """Sync-free negative sampling: each step a fixed number of edges (rows sorted), about the
    epoch's used edges only (P = sum v / max(v) of them, not all), each edge at most once an
    epoch, used with probability v / max(v), in a step drawn uniformly."""
    from probdr._compute.edges import EpochSchedule

    g = torch.Generator().manual_seed(0)
    m = 1001
    rows = torch.sort(torch.randint(0, 50, (m,), generator=g)).values
    cols = torch.randint(0, 50, (m,), generator=g)
    v = torch.rand(m, generator=g, dtype=torch.float64) + 0.05
    rate = v / v.max()
    total = float(rate.sum())
    sched = EpochSchedule(v, float(v.max()), steps, torch.Generator().manual_seed(1))
    per = -(-(int(total) + 1) // steps)
    counts, in_step = torch.zeros(m, dtype=torch.float64), torch.zeros(steps)
    epochs = 1000
    for e in range(epochs):
        picked = []
        for s in range(steps):
            r, c, used = sched.systematic(e * steps + s, rows, cols)
            assert r.shape == c.shape == used.shape == (per,)
            assert bool((r[1:] >= r[:-1]).all())
            picked.append(sched.positions[s][used])
            in_step[s] += float(used.sum())
        picked = torch.cat(picked)
        assert picked.unique().numel() == picked.numel()  # at most once an epoch
        assert int(total) <= picked.numel() <= int(total) + 1
        counts[picked] += 1
    assert per * steps < 0.7 * m  # the work: the used edges, not every edge
    assert float((counts / epochs - rate).abs().max()) < 5 * float((0.25 / epochs) ** 0.5)
    share = in_step / in_step.sum()
    assert float((share - 1 / steps).abs().max()) < 0.01


def test_systematic_negative_sampling_same_quality_and_no_host_reads(digits, sync_free, monkeypatch):
    """UMAP at 4 steps an epoch: the sync-free path takes a fixed share of the epoch's used
    edges a step (not all of them, masked) without a host read inside the loop, to the quality
    of the CPU path's selected edges."""
    X, y = digits[0][:800], digits[1][:800]
    q = {}
    for on in (False, True):
        sync_free(on)
        Z = probdr.UMAP(random_state=0, n_epochs=200, epoch_steps=4,
                        device="cpu").fit_transform(X)
        q[on] = (metrics.trustworthiness(X, Z, 15), metrics.knn_accuracy(Z, y, 5))
    assert abs(q[True][0] - q[False][0]) < 0.01
    assert abs(q[True][1] - q[False][1]) < 0.03
    sync_free(True)
    _, calls, steps = _fit_counting("UMAP", dict(n_epochs=10, epoch_steps=4), X[:300],
                                    monkeypatch)
    assert steps == 40 and not calls
