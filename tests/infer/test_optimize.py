"""``optimize`` continues a MAP fit: its optimiser state, its random stream and its schedule.

Oracles: the uninterrupted fit itself (bitwise), and the learning rates the SGD optimiser is
actually stepped with, against the rule ``optimize``'s docstring states. The constant-schedule
case with exact repulsion is ``tests/estimators/test_transform.py::test_fit_then_optimize_equals_one_longer_fit``.
"""

import numpy as np
import pytest
from sklearn.datasets import load_digits

import probdr
from probdr.optim import SGD


@pytest.fixture(scope="module")
def X():
    X = load_digits().data
    return X[np.random.default_rng(0).permutation(len(X))[:250]]


def _stop_at(step):
    return dict(callbacks=lambda s, Z, loss: s >= step, callbacks_every=step)


@pytest.mark.parametrize("make", [
    # UMAP's 3 steps an epoch on small data: n steps, stopped inside an epoch (40 = 13 x 3 + 1)
    lambda n, **kw: probdr.UMAP(n_epochs=n // 3, random_state=0, **kw),
    lambda n, **kw: probdr.UMAP(n_epochs=n // 3, repulsion="exact", random_state=0, **kw),
    lambda n, **kw: probdr.LargeVis(n_iter=n, random_state=0, **kw),
    lambda n, **kw: probdr.LargeVis(n_iter=n, repulsion="exact", random_state=0, **kw),
], ids=["umap", "umap-exact", "largevis", "largevis-exact"])
def test_stopped_fit_then_optimize_is_the_uninterrupted_fit(X, make):
    """A fit of 60 steps stopped (by a callback) after 40, then ``optimize(20)``, is bitwise the
    fit of 60: the decaying rate goes on at the planned rates, the negative samples where the
    stopped fit left them."""
    full = make(60).fit(X)
    part = make(60, **_stop_at(40)).fit(X)
    assert part.stopped_by_callback_ and part.n_iter_ == 40
    part.set_params(callbacks=None).optimize(20)  # (optimize runs the callbacks too)
    assert part.n_iter_ == 60
    np.testing.assert_array_equal(part.embedding_, full.embedding_)


def test_stopped_in_early_exaggeration_resumes_the_schedule(X):
    """t-SNE stopped inside its early-exaggeration phase resumes it (exaggeration, momentum),
    then runs the main phase: bitwise the uninterrupted fit."""
    kw = dict(n_iter=60, early_exaggeration_iter=30, repulsion="exact", random_state=0)
    full = probdr.TSNE(**kw).fit(X)
    part = probdr.TSNE(**kw, **_stop_at(20)).fit(X)
    part.set_params(callbacks=None).optimize(25).optimize(15)
    np.testing.assert_array_equal(part.embedding_, full.embedding_)


def test_negative_sampling_with_a_constant_rate_continues_bitwise(X):
    """LargeVis's model and negative sampling at a constant rate: ``fit`` of 40 steps then
    ``optimize(20)`` is bitwise a fit of 60 steps (the negative samples continue, not restart)."""
    kw = dict(prior_x="D", prior_z="B", kernel_z="student", repulsion="negative_sampling",
              negative_samples=5, negative_weight=7.0, optimizer="sgd", momentum=0.0,
              learning_rate=1.0, learning_rate_decay=False, early_exaggeration=1.0,
              early_exaggeration_iter=0, grad_clip=4.0, init="spectral", init_scale="umap",
              random_state=0)
    a = probdr.GraphCoupling(n_iter=40, **kw).fit(X).optimize(20)
    b = probdr.GraphCoupling(n_iter=60, **kw).fit(X)
    np.testing.assert_array_equal(a.embedding_, b.embedding_)


def _rates(est, monkeypatch, **kw):
    """The learning rate of every SGD step of ``est.optimize(**kw)``."""
    seen = []
    step = SGD.step

    def spy(self, *args, **kwargs):
        seen.append(self.param_groups[0]["lr"])
        return step(self, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(SGD, "step", spy)
        est.optimize(**kw)
    return np.array(seen)


def test_optimize_past_a_linear_decay_stretches_it(X, monkeypatch):
    """Past UMAP's decay to 0 (rate ``1 - t / a`` at step ``t`` of a fit of ``a`` epochs),
    ``optimize(b)`` runs steps ``a .. a + b - 1`` of the decay planned ``a + b`` steps long; a
    given learning rate is held constant; a later ``optimize`` stretches the decay again."""
    a, b = 30, 20
    est = probdr.UMAP(n_epochs=a, epoch_steps=1, random_state=0).fit(X)  # a steps
    np.testing.assert_allclose(_rates(est, monkeypatch, n_iter=b),
                               1.0 - np.arange(a, a + b) / (a + b), rtol=0, atol=1e-15)
    np.testing.assert_allclose(_rates(est, monkeypatch, n_iter=10),
                               1.0 - np.arange(a + b, a + b + 10) / (a + b + 10), atol=1e-15)
    assert set(_rates(est, monkeypatch, n_iter=5, learning_rate=0.3)) == {0.3}
    assert est.n_iter_ == a + b + 15


def test_optimize_continues_after_save_and_load(X, tmp_path):
    """The schedule and random stream are saved with the estimator: a loaded UMAP continues as
    the one that was saved."""
    est = probdr.UMAP(n_epochs=30, random_state=0).fit(X)
    est.save(tmp_path / "umap.npz")
    loaded = probdr.load(tmp_path / "umap.npz")
    np.testing.assert_array_equal(loaded.optimize(10).embedding_, est.optimize(10).embedding_)
