"""n_jobs: at most that many threads for the duration of fit / transform, fewer while other
processes hold cores, restored after; on every estimator; the same numbers on any count."""

import inspect

import numpy as np
import pytest
import torch

import probdr
from probdr.estimators.base import resolve_n_jobs

ESTIMATORS = [probdr.SNE, probdr.TSNE, probdr.LargeVis, probdr.UMAP, probdr.GraphCoupling,
              probdr.SNEkhorn, probdr.TSNEkhorn, probdr.WishartPCA, probdr.WishartEigenmaps,
              probdr.LaplacianWishart, probdr.ProbDR, probdr.ccPCA, probdr.GWMDS, probdr.DistR]


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_every_estimator_has_n_jobs(cls):
    assert inspect.signature(cls).parameters["n_jobs"].default is None


def test_threads_apply_during_fit_and_are_restored(digits_small):
    X, _ = digits_small
    seen = []

    def record(step, Z, loss):
        seen.append(torch.get_num_threads())

    before = torch.get_num_threads()
    est = probdr.TSNE(n_iter=20, early_exaggeration_iter=5, random_state=0, n_jobs=1,
                      callbacks=record, callbacks_every=5).fit(X)
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == before
    # the same embedding whatever the thread count (2 threads where the machine has them)
    two = probdr.TSNE(n_iter=20, early_exaggeration_iter=5, random_state=0, n_jobs=2).fit(X)
    np.testing.assert_array_equal(two.embedding_, est.embedding_)
    est.transform(X[:3] + 1.0)
    assert torch.get_num_threads() == before


def test_n_jobs_values():
    assert resolve_n_jobs(None) is None
    assert resolve_n_jobs(3) == 3
    assert resolve_n_jobs(-1) >= 1
    assert resolve_n_jobs(-10_000) == 1
    for bad in (0, 1.5, True, "2"):
        with pytest.raises(ValueError, match="n_jobs"):
            resolve_n_jobs(bad)


def test_bad_n_jobs_fails_before_the_fit(digits_small):
    X, _ = digits_small
    with pytest.raises(ValueError, match="n_jobs"):
        probdr.UMAP(n_jobs=0).fit(X)


# -- the same map on any core count ------------------------------------------------------------
#: short fits of the five presets (each path: FFT and exact repulsion, negative sampling)
SHORT = {
    "TSNE": lambda j: probdr.TSNE(n_iter=100, early_exaggeration_iter=30, random_state=0, n_jobs=j),
    "SNE": lambda j: probdr.SNE(n_iter=40, early_exaggeration_iter=20, random_state=0, n_jobs=j),
    "LargeVis": lambda j: probdr.LargeVis(n_iter=80, random_state=0, n_jobs=j),
    "UMAP": lambda j: probdr.UMAP(n_epochs=80, random_state=0, n_jobs=j),
    "GraphCoupling": lambda j: probdr.GraphCoupling(n_iter=60, early_exaggeration_iter=20,
                                                    random_state=0, n_jobs=j),
}


@pytest.fixture
def fixed_threads():
    """Fits on exactly ``n_jobs`` threads (the governor off), 4 included on a 2-core machine."""
    from probdr import config

    config.set_adaptive_threads(False)
    try:
        yield
    finally:
        config.set_adaptive_threads(True)


def _fits(make, X, jobs=(1, 2, 4)):
    return {j: make(j).fit_transform(X) for j in jobs}


@pytest.mark.parametrize("name", list(SHORT))
def test_bitwise_the_same_on_1_2_4_threads(digits, name, fixed_threads):
    X = digits[0] if name != "SNE" else digits[0][:1000]  # SNE: exact n x n repulsion
    Z = _fits(SHORT[name], X)
    assert np.abs(Z[1]).max() > 1.0  # the map has moved off its initialisation
    np.testing.assert_array_equal(Z[2], Z[1])
    np.testing.assert_array_equal(Z[4], Z[1])


def test_the_samplers_draws_are_the_same_on_1_2_4_threads(fixed_threads):
    """A graph coupling's HMC posterior on 200 points (the exact curvature blocks that whiten
    the chains' moves reduce blocks of 40,000 pairs, which torch splits by thread; they run on
    one thread): the same draws on any thread count."""
    import sys
    import warnings
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from calibration_user import LAWS, simulate

    _, W = simulate("tsne", 200, 8.0, 3.0, 0)
    params = dict(restarts=0, warmup=12, num_samples=6, max_samples=6, max_leapfrog=8)

    def draws(j):
        est = probdr.GraphCoupling(**LAWS["tsne"], affinity="precomputed", coupling_weight=8.0,
                                   z_prior=3.0, inference="hmc", inference_params=params,
                                   random_state=0, n_jobs=j)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return est.fit(W).posterior_.chains

    out = {j: draws(j) for j in (1, 2, 4)}
    np.testing.assert_array_equal(out[2], out[1])
    np.testing.assert_array_equal(out[4], out[1])


def test_the_threads_set_outside_do_not_matter(digits, fixed_threads):
    X = digits[0]
    before = torch.get_num_threads()
    out = []
    try:
        for t in (1, 3):
            torch.set_num_threads(t)
            out.append(probdr.UMAP(n_epochs=40, random_state=0).fit_transform(X))
    finally:
        torch.set_num_threads(before)
    np.testing.assert_array_equal(out[0], out[1])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["TSNE", "SNE", "LargeVis", "UMAP", "GraphCoupling"])
def test_bitwise_the_same_at_the_defaults(digits, name, fixed_threads):
    """The defaults on the 1,797 digits (t-SNE 750 iterations, UMAP 100 epochs of 3 steps):
    before the fix, 1 and 2 threads differed by 6.5 (t-SNE, scale 25) and 2.5 (UMAP at 500
    epochs, scale 20)."""
    X = digits[0] if name != "SNE" else digits[0][:1000]  # SNE: 190 s on all 1,797
    Z = _fits(lambda j: getattr(probdr, name)(random_state=0, n_jobs=j), X)
    np.testing.assert_array_equal(Z[2], Z[1])
    np.testing.assert_array_equal(Z[4], Z[1])


def _per_thread_count(f):
    before, out = torch.get_num_threads(), []
    try:
        for t in (1, 2, 4):
            torch.set_num_threads(t)
            out.append(f())
    finally:
        torch.set_num_threads(before)
    return out


def test_the_ops_that_depended_on_the_thread_count():
    """Each op found to round by thread count: a long sum, the addr_ of the exact pairwise
    distances, the FFT normaliser on the smallest grid (16) and on a larger one (720)."""
    from probdr._compute.allpairs import pairwise_sq_distances
    from probdr._compute.fft import cauchy_log_total
    from probdr._utils import fixed_sum

    g = torch.Generator().manual_seed(0)
    x = torch.randn(100_003, generator=g)
    Z = torch.randn(1797, 2, generator=g) * 5

    def fft_grad(scale):
        z = (Z * scale).requires_grad_()
        cauchy_log_total(z).backward()
        return z.grad

    for f in (lambda: fixed_sum(x), lambda: pairwise_sq_distances(Z),
              lambda: fft_grad(0.1), lambda: fft_grad(8.0)):
        a, b, c = _per_thread_count(f)
        assert torch.equal(a, b) and torch.equal(a, c)


# -- the governor: the free cores, at most n_jobs ---------------------------------------------
class FakeClock:
    """Two cores; the other processes use ``load[i]`` cores in the i-th interval."""

    def __init__(self, load, running=0):
        self.cores, self.load, self.running = [0, 1], list(load), running
        self.t = self.everyone = self.own = 0.0

    def read(self):
        others = self.load.pop(0) if self.load and self.t else 0.0  # the first read: a baseline
        self.t += 1.0
        self.own += 0.5
        self.everyone += 0.5 + others
        return self.t, self.everyone, self.own

    def others_running(self):
        return self.running


def test_the_thread_count_is_the_free_cores_between_1_and_the_cap(monkeypatch):
    from probdr._compute import threads

    monkeypatch.setattr(threads, "POLL_SECONDS", 0.0)
    gov = threads.Governor(2, FakeClock([0.0, 1.0, 0.6, 0.3, 2.0, 0.0], running=1))
    before = torch.get_num_threads()
    try:
        assert gov.start() == 1  # another process running at entry
        seen = [gov.poll() for _ in range(6)]
    finally:
        torch.set_num_threads(before)
    assert seen == [2, 1, 1, 2, 1, 2]
    assert threads.Governor(1, FakeClock([])).threads_for(0.0) == 1
    assert threads.Governor(8, FakeClock([])).threads_for(0.0) == 2  # no more than the cores


def test_a_fit_whose_thread_count_changes_at_every_step_has_the_same_numbers(digits_small,
                                                                           monkeypatch):
    from probdr._compute import threads

    X, _ = digits_small
    one = probdr.TSNE(n_iter=60, early_exaggeration_iter=20, random_state=0,
                      n_jobs=1).fit_transform(X)
    monkeypatch.setattr(threads, "POLL_SECONDS", 0.0)
    monkeypatch.setattr(threads, "CoreClock", lambda: FakeClock([0.0, 1.0] * 100))
    seen = []
    est = probdr.TSNE(n_iter=60, early_exaggeration_iter=20, random_state=0, n_jobs=2,
                      callbacks=lambda *a: seen.append(torch.get_num_threads()),
                      callbacks_every=1)
    np.testing.assert_array_equal(est.fit_transform(X), one)
    assert set(seen) == {1, 2}


def test_governed_restores_the_count_and_nested_blocks_keep_the_cap(monkeypatch):
    from probdr._compute import threads

    monkeypatch.setattr(threads, "CoreClock", lambda: FakeClock([], running=1))
    before = torch.get_num_threads()
    with threads.governed(2) as outer:
        assert torch.get_num_threads() == 1
        with threads.governed(None) as inner:
            assert inner is outer
        with threads.governed(1) as inner:
            assert inner is not outer and inner.cap == 1
    assert torch.get_num_threads() == before


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2
                    or not __import__("os").path.exists("/proc/stat"),
                    reason="needs two cores and /proc/stat")
def test_a_busy_process_takes_a_core():
    """The real clock sees a process spinning beside this one."""
    import subprocess
    import sys
    import time

    from probdr._compute import threads

    before = torch.get_num_threads()
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        gov = threads.Governor(2)
        gov.start()
        time.sleep(0.6)
        gov._due = 0.0
        chosen = gov.poll()
    finally:
        busy.kill()
        torch.set_num_threads(before)
    assert chosen == 1, gov.history


def test_history_keeps_the_latest_choices_only():
    from probdr._compute import threads

    gov = threads.Governor(2, FakeClock([]))
    for _ in range(threads.HISTORY + 50):
        gov._choose(0.0)
    assert len(gov.history) == threads.HISTORY and gov.history[-1] == (2, 0.0)
