"""Every estimator parameter is declared with its type and range (one shared table,
``probdr.estimators.params``) and checked at the start of ``fit``, before any work: strings
where a number is due, booleans where an integer is due, infinities where a finite step is due,
an ``init`` array with NaN, data whose squared scale overflows (one test per case the fuzz of
the public surface found)."""

import inspect

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

import probdr
from probdr.estimators.base import DREstimator
from probdr.estimators.params import PARAMETERS

X = np.random.default_rng(0).normal(size=(60, 5))

ESTIMATORS = sorted(n for n in probdr.__all__ if isinstance(getattr(probdr, n), type)
                    and issubclass(getattr(probdr, n), DREstimator))


@pytest.fixture(autouse=True)
def no_heavy_work(monkeypatch):
    """Reaching ``_fit`` fails the test: every refusal below happens before it."""
    def refuse(*a, **k):
        raise AssertionError("_fit was reached")
    for name in ESTIMATORS:
        monkeypatch.setattr(getattr(probdr, name), "_fit", refuse)


@pytest.mark.parametrize("name, params, match", [
    ("WishartPCA", dict(learning_rate="fast"), "'learning_rate' parameter of WishartPCA"),
    ("LaplacianWishart", dict(learning_rate="fast"), "'learning_rate' parameter"),
    ("GraphCoupling", dict(n_neighbors="5"), "'n_neighbors' parameter of GraphCoupling"),
    ("WishartPCA", dict(learning_rate=float("inf")), "must be a finite float"),
    ("GWMDS", dict(n_neighbors=True), "'n_neighbors' parameter of GWMDS must be an int"),
    ("LaplacianWishart", dict(init=None), "'init' parameter of LaplacianWishart"),
    ("TSNE", dict(learning_rate=float("inf")), "'learning_rate' parameter of TSNE"),
    ("UMAP", dict(learning_rate=float("nan")), "'learning_rate' parameter of UMAP"),
    ("LargeVis", dict(negative_samples=2.5), "'negative_samples' parameter"),
    ("SNE", dict(momentum=1.0), "'momentum' parameter of SNE"),
    ("ProbDR", dict(solver="exact"), "'solver' parameter of ProbDR"),
    ("DistR", dict(n_prototypes=0), "'n_prototypes' parameter of DistR"),
    ("ccPCA", dict(n_samples=True), "'n_samples' parameter of ccPCA"),
])
def test_bad_parameter_is_refused_before_work(name, params, match):
    est = getattr(probdr, name)(**params)
    with pytest.raises(InvalidParameterError, match=match) as err:
        est.fit(X)
    assert isinstance(err.value, ValueError) and isinstance(err.value, TypeError)


def test_init_array_with_nan_is_refused():
    init = np.full((60, 2), np.nan)
    with pytest.raises(ValueError, match="init must name a method or be a 2-D array of finite"):
        probdr.LaplacianWishart(init=init).fit(X)


def test_data_near_the_float64_limit_is_refused_with_advice():
    with pytest.raises(ValueError, match="Rescale X"):
        probdr.WishartPCA().fit(X * 1e150)


@pytest.mark.parametrize("name, params", [("DistR", dict(perplexity=np.float32(5))),
                                          ("TSNE", dict(perplexity=np.float64(5), n_iter=np.int64(20),
                                                        early_exaggeration_iter=np.int32(5)))])
def test_numpy_scalars_are_numbers(name, params):
    with pytest.raises(AssertionError, match="_fit was reached"):  # passed every check
        getattr(probdr, name)(**params).fit(X)


def test_every_declared_name_is_a_parameter_of_some_estimator():
    """The shared table holds no stale names; each estimator's table covers its numbers."""
    names = set().union(*(inspect.signature(getattr(probdr, n).__init__).parameters
                          for n in ESTIMATORS))
    assert set(PARAMETERS) <= names
    for n in ESTIMATORS:
        cls = getattr(probdr, n)
        for k in ("learning_rate", "n_iter", "n_neighbors", "perplexity", "n_components"):
            if k in cls._get_param_names():
                assert k in cls._parameter_constraints, (n, k)
