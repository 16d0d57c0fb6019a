"""The epoch schedule of negative sampling (probdr._compute.edges.EpochSchedule): each step uses
edge e with probability v_e / (max v * steps), an edge acts at most once per epoch, the rows of a
step's edges stay sorted, and the fixed-shape masks of sync-free mode mark the same edges."""

import numpy as np
import pytest
import torch
from scipy import stats

import probdr
from probdr._compute.edges import EpochSchedule, _segments, scheduled_edges


def _edges(n=200, k=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    rows = torch.arange(n).repeat_interleave(k)
    cols = (rows + torch.randint(1, n, (n * k,), generator=g)) % n
    v = torch.rand(n * k, generator=g, dtype=torch.float64) + 0.01
    return rows, cols, v, float(v.max())


@pytest.mark.parametrize("steps", [1, 3, 4])
def test_each_edge_acts_at_most_once_per_epoch_with_probability_v_over_vmax(steps):
    rows, cols, v, vmax = _edges()
    sched = EpochSchedule(v, vmax, steps, torch.Generator().manual_seed(1))
    epochs = 400
    count = torch.zeros(steps, v.numel())
    for e in range(epochs):
        seen = torch.zeros(v.numel(), dtype=torch.int64)
        for s in range(steps):
            used = sched.next(e * steps + s)
            assert bool((used[1:] > used[:-1]).all())  # ascending positions
            seen[used] += 1
            count[s, used] += 1
        assert int(seen.max()) <= 1
    p = (v / (vmax * steps)).numpy()
    # every edge and every step: binomial counts over the epochs, within 5 standard errors
    sd = np.sqrt(epochs * p * (1 - p)) + 1e-12
    z = (count.numpy() - epochs * p) / sd
    assert np.abs(z).max() < 5.5
    # and together: a chi-square test of the per-step counts summed over the edges
    tot = count.sum(1).numpy()
    expected = np.full(steps, epochs * p.sum())
    if steps > 1:
        assert stats.chisquare(tot, expected * tot.sum() / expected.sum()).pvalue > 1e-3


def test_same_draws_repeat_and_mask_marks_the_same_edges():
    rows, cols, v, vmax = _edges()
    a = EpochSchedule(v, vmax, 4, torch.Generator().manual_seed(3))
    b = EpochSchedule(v, vmax, 4, torch.Generator().manual_seed(3))
    for i in range(9):
        pos, mask = a.next(i), b.next(i, as_mask=True)
        assert torch.equal(mask.nonzero().squeeze(1), pos)
    # a step asked again (a loss evaluated twice) gets the same edges and no new draw
    state = a.generator.get_state()
    assert torch.equal(a.next(8), pos) and torch.equal(a.generator.get_state(), state)


def test_outside_a_fit_each_call_is_an_independent_draw_that_leaves_the_epoch_alone():
    rows, cols, v, vmax = _edges()
    sched = EpochSchedule(v, vmax, 4, torch.Generator().manual_seed(3))
    first = sched.next(5)
    outside = [sched.next() for _ in range(3)]
    assert not torch.equal(outside[0], outside[1])
    assert torch.equal(sched.next(5), first)


def test_scheduled_rows_are_sorted_with_their_row_counts_known():
    rows, cols, v, vmax = _edges()
    n, m = 200, 5
    assert _segments(rows, n) is not None
    for i in range(5):
        r, c, neg_rows, mask, neg_mask = scheduled_edges(v, vmax, rows, cols, n, m, 4,
                                                         torch.Generator().manual_seed(0), i)
        assert mask is None and neg_mask is None
        assert torch.equal(neg_rows, r.repeat_interleave(m))
        # the counts set on the selections are those _segments would find
        for t in (r, neg_rows):
            fresh = t.clone()
            assert torch.equal(_segments(t, n), _segments(fresh, n))


def test_schedule_is_kept_with_the_edge_list():
    rows, cols, v, vmax = _edges()
    s = EpochSchedule.of(v, vmax, 4)
    assert EpochSchedule.of(v, vmax, 4) is s and EpochSchedule.of(v, vmax, 2) is not s


def test_umap_fit_is_repeatable_and_resumes_mid_epoch():
    """Same seed, same map; a fit stopped in the middle of an epoch and resumed with
    ``optimize`` ends where the uninterrupted fit does (the schedule keeps its phase)."""
    X, _ = probdr.datasets.load("digits", n_samples=300)
    kw = dict(n_epochs=6, epoch_steps=4, random_state=0)
    full = probdr.UMAP(**kw).fit(X).embedding_
    assert np.array_equal(full, probdr.UMAP(**kw).fit(X).embedding_)
    part = probdr.UMAP(**kw, callbacks=lambda step, Z, loss: step >= 10,
                       callbacks_every=10).fit(X)
    assert part.n_iter_ == 10
    resumed = part.set_params(callbacks=None).optimize(14).embedding_
    assert np.array_equal(full, resumed)


def test_positions_from_the_sorted_epoch_are_those_of_each_slot():
    """The CPU path sorts an epoch's positions by slot once and slices them per step: each step's
    positions are exactly the ascending positions of its slot, and every used edge is in one."""
    v = torch.rand(50_000, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    sched = EpochSchedule(v, 1.0, 4, torch.Generator().manual_seed(1))
    for i in range(8):
        got = sched.next(i)
        want = (sched.slots == i % 4).nonzero().squeeze(1)
        assert torch.equal(got, want) and got.dtype == torch.int64
    assert sum(sched.next(i).numel() for i in range(4, 8)) == int((sched.slots < 4).sum())
