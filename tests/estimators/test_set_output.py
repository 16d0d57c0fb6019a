"""scikit-learn's output contract: ``set_output(transform="pandas")`` gives DataFrames from
``fit_transform`` and ``transform`` alike (the estimator's feature names, the input's index), so a
Pipeline step after a probdr estimator reads named columns at ``transform`` time too."""

import numpy as np
import pytest
from helpers import ESTIMATOR_CASES
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

import probdr

pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def frame():
    X, _ = probdr.datasets.load("digits", n_samples=150)
    df = pd.DataFrame(X + np.random.default_rng(0).normal(scale=1e-3, size=X.shape),
                      columns=[f"px{i}" for i in range(X.shape[1])])
    return df.set_index(pd.Index(np.arange(1000, 1150), name="cell"))


@pytest.mark.parametrize("name", sorted(ESTIMATOR_CASES))
def test_transform_honours_set_output(name, frame):
    est = getattr(probdr, name)(random_state=0, **ESTIMATOR_CASES[name]["digits"])
    est.set_output(transform="pandas")
    Z = est.fit_transform(frame)
    assert isinstance(Z, pd.DataFrame) and list(Z.columns) == list(est.get_feature_names_out())
    assert list(est.feature_names_in_) == list(frame.columns)
    if not hasattr(est, "transform"):  # no out-of-sample map for this configuration
        return
    new = frame.iloc[10:15]
    Z_new = est.transform(new)
    assert isinstance(Z_new, pd.DataFrame), type(Z_new)
    assert list(Z_new.columns) == list(Z.columns) and list(Z_new.index) == list(new.index)
    est.set_output(transform="default")
    np.testing.assert_array_equal(est.transform(new), Z_new.to_numpy())


def test_pipeline_step_after_tsne_reads_columns_at_transform(frame):
    pick = FunctionTransformer(lambda d: d[["tsne0"]], feature_names_out=lambda s, f: ["tsne0"])
    pipe = make_pipeline(StandardScaler(), probdr.TSNE(random_state=0, perplexity=10, n_iter=90),
                         pick).set_output(transform="pandas")
    pipe.fit(frame)
    out = pipe.transform(frame.iloc[:7])
    assert isinstance(out, pd.DataFrame) and list(out.columns) == ["tsne0"]
    assert out.shape == (7, 1) and list(out.index) == list(frame.index[:7])
