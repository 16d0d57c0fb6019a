"""Every public estimator is a scikit-learn estimator, and ``fit`` touches no global state."""

import random

import numpy as np
import pyro
import pytest
import torch
from helpers import ESTIMATOR_CASES
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_estimator
from sklearn.utils.validation import check_is_fitted

import probdr

#: small-iteration parameters for scikit-learn's checks (their data sets have 10-30 samples): the
#: shared table of estimator cases
SMALL = {name: case["tiny"] for name, case in ESTIMATOR_CASES.items()}


def test_every_public_estimator_is_covered():
    public = {name for name in probdr.__all__
              if isinstance(getattr(probdr, name), type)
              and issubclass(getattr(probdr, name), probdr.estimators.base.DREstimator)}
    assert public == set(SMALL)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_check_estimator(name):
    """scikit-learn's own estimator checks, with no expected failures."""
    est = getattr(probdr, name)(**SMALL[name])
    results = check_estimator(est, on_fail=None)
    failed = [(r["check_name"], repr(r["exception"])[:300]) for r in results
              if r["status"] == "failed"]
    assert not failed, failed
    assert sum(r["status"] == "passed" for r in results) >= 35


@pytest.fixture(scope="module")
def X():
    rng = np.random.default_rng(0)
    centers = rng.normal(scale=6.0, size=(3, 6))
    return np.concatenate([c + rng.normal(size=(30, 6)) for c in centers])


QUICK = [
    lambda: probdr.TSNE(perplexity=10, n_iter=60, early_exaggeration_iter=20, random_state=0),
    lambda: probdr.UMAP(n_epochs=30, random_state=0),
    lambda: probdr.WishartPCA(random_state=0),
    lambda: probdr.ccPCA(perplexity=10, n_samples=5, random_state=0),
    lambda: probdr.TSNEkhorn(perplexity=10, n_iter=40, early_exaggeration_iter=10,
                             random_state=0),
    lambda: probdr.LaplacianWishart(n_iter=10, random_state=0),
    lambda: probdr.ProbDR(n_iter=10, random_state=0),
]


@pytest.mark.parametrize("make", QUICK)
def test_fit_leaves_global_state_as_it_found_it(make, X):
    """A user's Pyro parameters survive a fit, and torch's, numpy's and Python's global
    generators give the draws they would have given without it."""
    pyro.clear_param_store()
    pyro.param("w", torch.ones(3))
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    expected = (torch.rand(3), np.random.rand(3), random.random())
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    Z1 = make().fit_transform(X)
    got = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(expected[0], got[0])
    assert np.array_equal(expected[1], got[1])
    assert expected[2] == got[2]
    assert list(pyro.get_param_store().keys()) == ["w"]
    assert torch.equal(pyro.param("w").detach(), torch.ones(3))
    # and random_state still makes the fit bitwise repeatable, whatever the global state
    torch.manual_seed(7)
    np.random.seed(7)
    assert np.array_equal(Z1, make().fit_transform(X))
    pyro.clear_param_store()


def test_random_state_accepts_randomstate_and_generator(X):
    kw = dict(perplexity=10, n_iter=40, early_exaggeration_iter=10, init="random")
    a = probdr.TSNE(random_state=np.random.RandomState(3), **kw).fit_transform(X)
    b = probdr.TSNE(random_state=np.random.RandomState(3), **kw).fit_transform(X)
    c = probdr.TSNE(random_state=np.random.default_rng(3), **kw).fit_transform(X)
    d = probdr.TSNE(random_state=np.random.default_rng(3), **kw).fit_transform(X)
    assert np.array_equal(a, b) and np.array_equal(c, d)
    e = probdr.TSNE(random_state=np.uint32(2**32 - 1), **kw).fit(X)
    assert e.random_state_ == 2**32 - 1
    with pytest.raises(ValueError, match="random_state"):
        probdr.TSNE(random_state=2**32, **kw).fit(X)
    with pytest.raises(ValueError, match="random_state"):
        probdr.TSNE(random_state=-1, **kw).fit(X)
    with pytest.raises(TypeError, match="random_state"):
        probdr.TSNE(random_state=True, **kw).fit(X)
    with pytest.raises(TypeError, match="random_state"):
        probdr.TSNE(random_state="0", **kw).fit(X)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_fit_changes_no_parameter_and_presets_hold_only_parameters(name, X):
    est = getattr(probdr, name)(**SMALL[name])
    assert set(vars(est)) == set(est.get_params())
    before = {k: repr(v) for k, v in est.get_params().items()}
    est.fit(X)
    assert {k: repr(v) for k, v in est.get_params().items()} == before
    assert not [k for k in vars(est) if k not in before and not k.endswith("_")
                and not k.startswith("_")]


def test_preset_parameters_are_settable(X):
    """TSNE exposes momentum (it was a hidden preset attribute), and it changes the fit."""
    kw = dict(perplexity=10, n_iter=60, early_exaggeration_iter=20, random_state=0)
    a = probdr.TSNE(**kw).fit_transform(X)
    est = probdr.TSNE(**kw).set_params(momentum=0.5)
    assert est.get_params()["momentum"] == 0.5 and clone(est).momentum == 0.5
    assert not np.allclose(a, est.fit_transform(X))
    # UMAP resolves its epochs without rewriting a parameter
    u = probdr.UMAP(random_state=0).fit(X)
    assert u.get_params()["n_epochs"] is None and u.n_iter_ == 300  # 100 epochs of 3 steps
    assert "n_iter" not in u.get_params()


def test_sgd_settings_are_explicit(X):
    """optimizer='sgd' alone changes the optimiser, not the clipping, initialisation or
    schedule; UMAP's scheme (at one step an epoch) is GraphCoupling with those three set."""
    kw = dict(n_components=2, random_state=0, negative_samples=5,
              repulsion="negative_sampling", init="spectral", n_iter=500,
              early_exaggeration=1.0, early_exaggeration_iter=0, momentum=0.0,
              early_momentum=0.0, optimizer="sgd", n_neighbors=15)
    gc = probdr.GraphCoupling("B~", "B", "umap_odds", affinity="umap",
                              kernel_params=dict(zip("ab", probdr.kernels.find_ab_params(1.0, 0.1),
                                                     strict=True)),
                              learning_rate_decay=True, grad_clip=4.0, init_scale="umap", **kw)
    umap = probdr.UMAP(random_state=0, n_epochs=500, epoch_steps=1)
    assert np.array_equal(gc.fit_transform(X), umap.fit_transform(X))
    plain = probdr.GraphCoupling("B~", "B", "umap_odds", affinity="umap", **kw)
    assert plain.grad_clip is None and plain.init_scale == 1e-4
    assert not plain.learning_rate_decay


def test_n_components_need_not_be_below_n_features(X):
    """Like scikit-learn's TSNE: 4 components of 4 features (PCA-like methods keep q <= p)."""
    Z = probdr.TSNE(n_components=4, perplexity=10, n_iter=40, early_exaggeration_iter=10,
                    random_state=0).fit_transform(X[:, :4])
    assert Z.shape == (len(X), 4) and np.isfinite(Z).all()
    with pytest.raises(ValueError, match="at most the number of features"):
        probdr.WishartPCA(n_components=5).fit(X[:, :4])


def test_dataframes_feature_names_and_set_output(X):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(X, columns=[f"g{i}" for i in range(X.shape[1])])
    est = probdr.TSNE(perplexity=10, n_iter=40, early_exaggeration_iter=10, random_state=0)
    with pytest.raises(NotFittedError):
        check_is_fitted(est)
    est.set_output(transform="pandas")
    out = est.fit_transform(df)
    check_is_fitted(est)
    assert list(est.feature_names_in_) == list(df.columns) and est.n_features_in_ == 6
    assert list(est.get_feature_names_out()) == ["tsne0", "tsne1"]
    assert isinstance(out, pd.DataFrame) and list(out.columns) == ["tsne0", "tsne1"]
    assert np.array_equal(out.to_numpy(), est.embedding_)


def test_pipeline_last_step(X):
    """As the last step of a Pipeline (like scikit-learn's TSNE; ColumnTransformer and
    FeatureUnion need ``transform`` on new points, which these estimators do not define yet)."""
    tsne = probdr.TSNE(perplexity=10, n_iter=40, early_exaggeration_iter=10, random_state=0)
    Z = make_pipeline(StandardScaler(), clone(tsne)).fit_transform(X)
    assert np.array_equal(Z, clone(tsne).fit_transform(StandardScaler().fit_transform(X)))


def test_torch_in_torch_out(X):
    Xt = torch.as_tensor(X, dtype=torch.float32)
    Z = probdr.TSNE(perplexity=10, n_iter=40, early_exaggeration_iter=10,
                    random_state=0).fit_transform(Xt)
    assert isinstance(Z, torch.Tensor) and Z.dtype == torch.float32 and Z.shape == (len(X), 2)
