import numpy as np
import pytest
import torch

import probdr

EST = [lambda **k: probdr.TSNE(n_iter=5, early_exaggeration_iter=2, **k),
       lambda **k: probdr.UMAP(n_epochs=5, **k),
       lambda **k: probdr.SNE(n_iter=5, early_exaggeration_iter=2, **k),
       lambda **k: probdr.LargeVis(n_iter=5, **k)]


@pytest.mark.parametrize("make", EST)
def test_bad_input_raises_clear_errors(make):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 5))
    bad = X.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN|infinity"):
        make().fit(bad)
    bad[3, 2] = np.inf
    with pytest.raises(ValueError, match="NaN|infinity"):
        make().fit(bad)
    with pytest.raises(ValueError, match="2D array"):
        make().fit(X[:, 0])
    with pytest.raises(ValueError, match="0 sample"):
        make().fit(np.empty((0, 5)))
    with pytest.raises(ValueError, match="n_components"):
        make(n_components=0).fit(X)
    with pytest.raises(ValueError, match="string to float"):
        make().fit(np.array([["a", "b"], ["c", "d"]]))
    with pytest.raises(ValueError, match="[Cc]omplex"):
        make().fit(X + 1j)


def test_n_too_small_for_perplexity_or_neighbors():
    X = np.random.default_rng(0).normal(size=(20, 5))
    with pytest.raises(ValueError, match="perplexity"):
        probdr.TSNE().fit(X)
    with pytest.raises(ValueError, match="n_neighbors"):
        probdr.UMAP(n_neighbors=30).fit(X)


@pytest.mark.parametrize("make", EST)
def test_duplicated_rows_give_no_nan(make):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 5))
    X = np.vstack([X, X, X[:10]])  # every point duplicated, some three times
    Z = make(random_state=0).fit_transform(X)
    assert np.isfinite(Z).all()


def test_random_state_repeatable_and_types(digits_small):
    X, _ = digits_small
    a = probdr.TSNE(n_iter=20, early_exaggeration_iter=5, random_state=3).fit_transform(X)
    b = probdr.TSNE(n_iter=20, early_exaggeration_iter=5, random_state=3).fit_transform(X)
    assert isinstance(a, np.ndarray) and a.shape == (len(X), 2)
    np.testing.assert_array_equal(a, b)
    u1 = probdr.UMAP(n_epochs=10, random_state=3).fit_transform(X)
    u2 = probdr.UMAP(n_epochs=10, random_state=3).fit_transform(X)
    np.testing.assert_array_equal(u1, u2)
    Zt = probdr.UMAP(n_epochs=5, random_state=3).fit_transform(torch.from_numpy(X))
    assert isinstance(Zt, torch.Tensor)


def test_params_api():
    est = probdr.TSNE(perplexity=10)
    assert est.get_params()["perplexity"] == 10
    est.set_params(perplexity=20)
    assert est.perplexity == 20
    assert "perplexity=20" in repr(est)
    with pytest.raises(ValueError, match="Invalid parameter"):
        est.set_params(bogus=1)
    with pytest.raises(RuntimeError, match="not fitted"):
        probdr.TSNE().loss(np.zeros((3, 2)))
