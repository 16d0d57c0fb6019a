"""The input object (probdr.input.InputGraph): it owns the calibration of the input side for the
fit and for new points, validates it once, and is what transform, save and load keep."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import probdr
from probdr.input import InputGraph
from probdr.input.graph import build_input_graph, knn_laplacian, new_point_rows


@pytest.fixture(scope="module")
def digits():
    X, y = probdr.datasets.load("digits")
    return X[:300], X[300:340]


def test_fit_is_build_input_graph_and_rows_are_new_point_rows(digits):
    X, X_new = (torch.as_tensor(a) for a in digits)
    for prior, aff in (("D", "entropic"), ("B~", "umap"), ("B", "binary"), ("E", "auto")):
        k = None if aff in ("entropic", "auto") else 12
        side = InputGraph(prior, aff, perplexity=20.0, n_neighbors=k,
                          metric="cosine").check(*X.shape)
        law = side.fit(X)
        ref = build_input_graph(X, prior, side.affinity, perplexity=20.0,
                                n_neighbors=side.n_neighbors, metric="cosine")
        assert type(law) is type(ref)
        assert torch.equal(law.mean.to_dense(), ref.mean.to_dense())
        P = side.rows(X_new)
        Q = new_point_rows(X_new, X, prior, side.affinity, perplexity=20.0,
                           n_neighbors=side.n_neighbors, metric="cosine")
        assert torch.equal(P.to_dense(), Q.to_dense())
        assert (side.matches(X_new) == -1).all()
        assert torch.equal(side.matches(X[[5, 0]]), torch.tensor([5, 0]))


def test_knn_affinity_is_the_laplacian_and_nearest_the_knn_query(digits):
    X, X_new = (torch.as_tensor(a) for a in digits)
    side = InputGraph(affinity="knn", n_neighbors=7).check(*X.shape)
    L = side.fit(X)
    assert torch.equal(L.dense(), knn_laplacian(X, 7).dense())
    D = torch.cdist(X_new, X)
    idx = side.nearest(X_new)
    assert idx.shape == (X_new.shape[0], 7)  # the 7 smallest distances (ties in any order)
    torch.testing.assert_close(D.gather(1, idx), D.topk(7, largest=False).values)
    with pytest.raises(ValueError, match="no row law"):
        side.rows(X_new)


def test_the_metric_is_made_canonical_once_and_checked_against_the_data():
    side = InputGraph("D", metric="L1", metric_params=None).check(50, 3)
    assert side.metric == "manhattan"
    with pytest.raises(ValueError, match="haversine metric takes 2 features"):
        InputGraph("D", metric="haversine").check(50, 3)
    with pytest.raises(ValueError, match="perplexity=30.0 is too large for n=20"):
        InputGraph("D", perplexity=30.0).check(20, 3)
    with pytest.raises(ValueError, match=r"\(1, n - 2\]"):
        InputGraph("E", "sea", perplexity=19).check(20, 3)
    with pytest.raises(ValueError, match="n_neighbors=25 is too large for n=20"):
        InputGraph(affinity="knn", n_neighbors=25).check(20, 3)
    with pytest.raises(ValueError, match="affinity must be"):
        InputGraph("D", "gaussian")


@pytest.mark.parametrize("name", ["TSNE", "UMAP", "ccPCA", "LaplacianWishart", "SNEkhorn"])
def test_a_fit_and_its_transform_validate_the_input_parameters_once(digits, monkeypatch, name):
    # the estimator's perplexity / n_neighbors / metric reach the input side once, in fit, and
    # are checked there against the data (the metric made canonical); transform re-passes and
    # re-checks nothing (the public neighbour functions below check their own arguments, as
    # every public function does)
    X, X_new = digits
    checks = []
    real_check = InputGraph.check

    def check(self, n, p):
        checks.append((n, p, self.metric))
        return real_check(self, n, p)

    monkeypatch.setattr(InputGraph, "check", check)
    fast = {"TSNE": dict(n_iter=60, early_exaggeration_iter=20), "UMAP": dict(n_epochs=20),
            "SNEkhorn": dict(n_iter=20)}.get(name, {})
    est = getattr(probdr, name)(random_state=0, metric="cosine", **fast).fit(X[:150])
    est.transform(X_new[:5])
    assert checks == [(150, X.shape[1], "cosine")]
    assert est.input_.metric == "cosine" and est.input_.n_ == 150


def test_new_points_use_the_fitted_calibration_not_the_current_parameters(digits):
    X, X_new = digits
    est = probdr.TSNE(perplexity=20, n_iter=60, early_exaggeration_iter=20, random_state=0,
                      metric="cosine").fit(X)
    before = est.transform(X_new)
    est.set_params(perplexity=5, metric="euclidean")  # a later change of the parameters ...
    np.testing.assert_array_equal(est.transform(X_new), before)  # ... is not the fit's
    assert est.input_.perplexity == 20 and est.input_.metric == "cosine"


def test_save_and_load_keep_the_input_object(digits, tmp_path):
    X, X_new = digits
    est = probdr.UMAP(n_epochs=30, random_state=0).fit(X)
    est.save(tmp_path / "m.npz")
    loaded = probdr.load(tmp_path / "m.npz")
    assert isinstance(loaded.input_, InputGraph) and loaded.input_.n_ == X.shape[0]
    np.testing.assert_array_equal(loaded.transform(X_new), est.transform(X_new))
    est.save(tmp_path / "nodata.npz", include_data=False)
    nodata = probdr.load(tmp_path / "nodata.npz")
    assert nodata.input_._X is None and est.input_._X is not None  # the fit keeps its data
    with pytest.raises(RuntimeError, match="include_data=False"):
        nodata.transform(X_new)


def test_a_model_saved_before_the_input_object_still_places_new_points(digits):
    # probdr 0.1.0 kept the training data as _X_fit and no input_: rebuilt from the parameters
    X, X_new = digits
    est = probdr.TSNE(n_iter=60, early_exaggeration_iter=20, random_state=0).fit(X)
    expect = est.transform(X_new)
    old = est.input_
    del est.input_
    est._X_fit = old._X
    np.testing.assert_array_equal(est.transform(X_new), expect)
    assert "input_" not in vars(est)  # rebuilt on demand: transform sets no fitted attribute


def test_sparse_reference_points_are_kept_sparse(digits):
    X, X_new = digits
    S = sp.csr_matrix(X)
    est = probdr.UMAP(n_epochs=20, random_state=0).fit(S)
    assert sp.issparse(est.input_.reference_data())
    assert est.transform(sp.csr_matrix(X_new)).shape == (X_new.shape[0], 2)


def test_precomputed_inputs_keep_no_reference_data(digits):
    X, X_new = digits
    from scipy.spatial.distance import cdist

    est = probdr.TSNE(metric="precomputed", n_iter=60, early_exaggeration_iter=20,
                      random_state=0, init="spectral").fit(cdist(X, X))
    assert est.input_.precomputed == "distances" and est.input_._X is None
    Z = est.transform(cdist(X_new, X))
    assert Z.shape == (X_new.shape[0], 2) and np.isfinite(Z).all()
    with pytest.raises(ValueError, match=f"expecting {X.shape[0]} features"):
        est.transform(cdist(X_new, X[:10]))


@pytest.mark.parametrize("name", ["TSNE", "UMAP", "SNEkhorn"])
def test_new_points_read_only_what_the_fit_gave_them(digits, name):
    """New points are an object made from the fit (``_new_points()``), not a mixin reading its
    host's attributes by name: every attribute they read is theirs."""
    import ast
    import inspect

    from probdr.estimators import coupling_new_points as cnp

    tree = ast.parse(inspect.getsource(cnp.NewPoints))
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "self"}
    X, _ = digits
    fast = {"TSNE": dict(n_iter=30, early_exaggeration_iter=10), "UMAP": dict(n_epochs=10),
            "SNEkhorn": dict(n_iter=10)}[name]
    new_points = getattr(probdr, name)(random_state=0, **fast).fit(X[:100])._new_points()
    missing = sorted(a for a in used if not hasattr(new_points, a))
    assert not missing, missing


def test_new_points_are_placed_with_the_fits_threads(digits, monkeypatch):
    X, X_new = digits
    est = probdr.TSNE(n_iter=30, early_exaggeration_iter=10, random_state=0, n_jobs=1).fit(X)
    seen = []
    real = type(est)._fitted_input

    def fitted_input(self):
        seen.append(torch.get_num_threads())
        return real(self)

    monkeypatch.setattr(type(est), "_fitted_input", fitted_input)
    torch.set_num_threads(2)
    est.set_params(n_jobs=2)  # after the fit: the fit's thread count (n_threads_) is kept
    est.transform(X_new[:3])
    assert est.n_threads_ == 1 and seen == [1]
