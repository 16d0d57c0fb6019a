"""Asking for a posterior does not change the map: the MAP of a posterior fit is the plain fit's
MAP bit for bit at the same seed, ``embedding_`` stays that MAP, and the posterior mean has its
own attribute."""

import numpy as np
import pytest

import probdr


@pytest.fixture(scope="module")
def digits():
    return probdr.datasets.load("digits", n_samples=1000)[0]


@pytest.fixture(scope="module")
def plain(digits):
    return probdr.TSNE(random_state=0, n_iter=150).fit(digits)


@pytest.mark.parametrize("inference, params", [
    ("laplace", None), ("svi", {"num_steps": 5, "num_samples": 4})])
def test_posterior_fit_keeps_the_plain_map(inference, params, digits, plain):
    est = probdr.TSNE(random_state=0, n_iter=150, inference=inference,
                      inference_params=params).fit(digits)
    assert est.coupling_weight_ > 1  # the posterior's tail rule, not the MAP's weight
    np.testing.assert_array_equal(est.map_embedding_.astype(np.float64), plain.embedding_)
    np.testing.assert_array_equal(est.embedding_, plain.embedding_)
    np.testing.assert_array_equal(est.posterior_mean_, est.posterior_.mean)
    assert not np.array_equal(est.posterior_mean_, est.embedding_)


def test_wishart_posterior_keeps_its_map():
    X = probdr.datasets.load("digits", n_samples=150)[0]
    svi = dict(inference="svi", inference_params={"num_steps": 5, "num_samples": 4})
    est = probdr.WishartPCA(random_state=0, **svi).fit(X)
    np.testing.assert_array_equal(est.embedding_, est.map_embedding_.astype(np.float64))
    assert est.posterior_mean_.shape == est.embedding_.shape
