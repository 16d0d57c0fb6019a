"""The command line and the Python estimators fit the same model for the same options: a short
``--n-iter`` and ``n_iter=`` give the same early-exaggeration schedule and the same embedding."""

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

import probdr
from probdr.cli import command as cli
from probdr.estimators.fitted import early_exaggeration_steps

CASES = [("tsne", probdr.TSNE, 100), ("tsne", probdr.TSNE, 30), ("sne", probdr.SNE, 60),
         ("tsnekhorn", probdr.TSNEkhorn, 40)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    X = probdr.datasets.load("digits", n_samples=120)[0].astype(np.float64)
    path = tmp_path_factory.mktemp("agree") / "X.npy"
    np.save(path, X)
    return X, path


@pytest.mark.parametrize("method, cls, n_iter", CASES)
def test_short_n_iter_same_embedding_from_python_and_cli(method, cls, n_iter, data, tmp_path,
                                                         capsys):
    X, path = data
    out = tmp_path / "Z.npy"
    rc = cli.main(["embed", "--quiet", "--method", method, "--data", str(path), "--perplexity",
                   "10", "--n-iter", str(n_iter), "--out", str(out), "--n-jobs", "1"])
    assert rc == 0, capsys.readouterr().err
    est = cls(perplexity=10, n_iter=n_iter, random_state=0, n_jobs=1)
    Z = np.asarray(est.fit_transform(X))
    np.testing.assert_array_equal(np.load(out), Z)
    # the schedule: a third of a short fit exaggerated, 250 of a long one
    assert est.n_iter_ == n_iter


def test_auto_early_exaggeration_is_a_third_of_a_short_fit_and_250_of_a_long_one():
    assert early_exaggeration_steps("auto", 100) == 33
    assert early_exaggeration_steps("auto", 750) == 250
    assert early_exaggeration_steps("auto", 5000) == 250
    assert early_exaggeration_steps(40, 100) == 40
    assert probdr.TSNE().get_params()["early_exaggeration_iter"] == "auto"


def test_explicit_early_exaggeration_longer_than_the_fit_says_what_to_set():
    X = probdr.datasets.load("digits", n_samples=60)[0]
    with pytest.raises(InvalidParameterError, match=r"early_exaggeration_iter='auto' \("
                       r"min\(250, n_iter // 3\) = 33 here\) or a number up to 100"):
        probdr.TSNE(n_iter=100, early_exaggeration_iter=250, perplexity=5).fit(X)
