"""n_jobs: threads for the duration of fit / transform, restored after; on every estimator."""

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
    np.testing.assert_allclose(two.embedding_, est.embedding_, rtol=1e-4, atol=1e-6)
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
