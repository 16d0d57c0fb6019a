"""probdr.anndata.embed: AnnData in, obsm/uns out, scanpy's neighbour graphs reused."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.decomposition import PCA
from sklearn.neighbors import NearestNeighbors

anndata = pytest.importorskip("anndata")

import probdr  # noqa: E402
import probdr.anndata as pad  # noqa: E402

N_NEIGHBORS = 15  # scanpy's default: 14 stored neighbours per row, the point itself not stored
HAS_PRECOMPUTED = "metric" in probdr.UMAP().get_params()
needs_precomputed = pytest.mark.skipif(
    not HAS_PRECOMPUTED, reason="the estimators have no metric='precomputed' yet")
FAST_UMAP = dict(n_epochs=15)
FAST_TSNE = dict(n_iter=40, early_exaggeration_iter=15)


def scanpy_neighbors(adata, n_neighbors=N_NEIGHBORS, use_rep="X_pca", key_added=None):
    """What ``scanpy.pp.neighbors(adata, n_neighbors, use_rep=use_rep, key_added=key_added)``
    stores, with exact neighbours: ``obsp[distances]`` a CSR matrix with the ``n_neighbors - 1``
    nearest-neighbour distances of each row (self not stored), ``obsp[connectivities]`` a
    symmetric weighted graph, and ``uns[key]`` naming both."""
    X = np.asarray(adata.obsm[use_rep], dtype=np.float64)  # float32 distances differ by 1e-6
    n = X.shape[0]
    k = n_neighbors - 1
    dist, idx = NearestNeighbors(n_neighbors=n_neighbors).fit(X).kneighbors(X)
    dist, idx = dist[:, 1:], idx[:, 1:]  # drop the point itself
    rows = np.repeat(np.arange(n), k)
    D = sp.csr_matrix((dist.ravel(), (rows, idx.ravel())), shape=(n, n))
    sigma = dist.mean(1, keepdims=True)
    C = sp.csr_matrix((np.exp(-dist / sigma).ravel(), (rows, idx.ravel())), shape=(n, n))
    C = C.maximum(C.T).tocsr()
    key = key_added or "neighbors"
    dkey = "distances" if key_added is None else f"{key_added}_distances"
    ckey = "connectivities" if key_added is None else f"{key_added}_connectivities"
    adata.obsp[dkey], adata.obsp[ckey] = D, C
    adata.uns[key] = {"connectivities_key": ckey, "distances_key": dkey,
                      "params": {"n_neighbors": n_neighbors, "method": "umap",
                                 "metric": "euclidean", "random_state": 0, "use_rep": use_rep}}
    return adata


@pytest.fixture(scope="module")
def digits_adata():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    idx = np.random.default_rng(0).choice(len(X), 360, replace=False)
    X, y = X[idx].astype(np.float32), y[idx]
    adata = anndata.AnnData(X)
    adata.obs["digit"] = y.astype(str)
    adata.obsm["X_pca"] = PCA(20, random_state=0).fit_transform(X).astype(np.float32)
    return scanpy_neighbors(adata)


@pytest.fixture
def adata(digits_adata):
    return digits_adata.copy()


# -- entry point and outputs ---------------------------------------------------------------------
def test_import_probdr_does_not_import_anndata():
    code = ("import sys, probdr; assert 'anndata' not in sys.modules; "
            "import probdr.anndata; assert 'anndata' not in sys.modules; "
            "print(probdr.anndata.embed.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "embed"


def test_umap_in_place_and_h5ad_round_trip(adata, tmp_path):
    assert pad.embed(adata, "umap", **FAST_UMAP) is None
    Z = adata.obsm["X_umap"]
    assert Z.shape == (adata.n_obs, 2) and Z.dtype == np.float32 and np.isfinite(Z).all()
    info = adata.uns["X_umap"]
    assert info["method"] == "umap" and info["use_rep"] == "X_pca"
    assert info["probdr_version"] == probdr.__version__
    assert info["params"]["n_epochs"] == 15 and info["params"]["random_state"] == 0
    assert "X_umap_std" not in adata.obsm and "neighbors_key" not in info
    # every stored parameter is a plain scalar: None, arrays and callables are left out
    assert all(isinstance(v, (str, bool, int, float)) for v in info["params"].values())
    assert "callbacks" not in info["params"] and "z_prior" not in info["params"]

    path = tmp_path / "a.h5ad"
    adata.write_h5ad(path)
    back = anndata.read_h5ad(path)
    np.testing.assert_array_equal(back.obsm["X_umap"], Z)
    assert back.uns["X_umap"]["params"] == info["params"]
    assert back.uns["X_umap"]["method"] == "umap"


def test_copy_returns_a_modified_copy(adata):
    out = pad.embed(adata, "umap", copy=True, key_added="X_um", **FAST_UMAP)
    assert isinstance(out, anndata.AnnData) and out is not adata
    assert "X_um" in out.obsm and "X_um" in out.uns
    assert "X_um" not in adata.obsm and "X_um" not in adata.uns


def test_same_seed_same_embedding(adata):
    a = pad.embed(adata, "umap", copy=True, random_state=3, **FAST_UMAP)
    b = pad.embed(adata, "umap", copy=True, random_state=3, **FAST_UMAP)
    np.testing.assert_array_equal(a.obsm["X_umap"], b.obsm["X_umap"])


def test_sparse_X_and_float64(adata):
    adata.X = sp.csr_matrix(adata.X)
    est = pad.embed(adata, "tsne", use_rep="X", dtype="float64", return_estimator=True,
                    **FAST_TSNE)
    Z = adata.obsm["X_tsne"]
    assert Z.shape == (adata.n_obs, 2) and Z.dtype == np.float64
    assert adata.uns["X_tsne"]["use_rep"] == "X"
    assert est.n_features_in_ == adata.n_vars  # fitted on X, not on X_pca
    np.testing.assert_allclose(Z, est.embedding_)


def test_estimator_class_and_instance(adata):
    template = probdr.UMAP(n_neighbors=10, n_epochs=5)
    est = pad.embed(adata, template, return_estimator=True, min_dist=0.3)
    assert est is not template and not hasattr(template, "embedding_")
    assert est.n_neighbors == 10 and est.min_dist == 0.3 and template.min_dist == 0.1
    assert "X_umap" in adata.obsm
    pad.embed(adata, probdr.LargeVis, n_iter=10, perplexity=10)
    assert adata.uns["X_largevis"]["params"]["perplexity"] == 10


def test_svi_writes_the_posterior_spread(adata):
    est = pad.embed(adata, "tsne", inference="svi", return_estimator=True,
                    inference_params={"num_steps": 3, "num_samples": 8}, **FAST_TSNE)
    std = adata.obsm["X_tsne_std"]
    assert std.shape == (adata.n_obs, 2) and (std >= 0).all() and std.max() > 0
    np.testing.assert_allclose(std, est.posterior_samples_.std(0, ddof=1), rtol=1e-5)
    assert adata.uns["X_tsne"]["params"]["inference"] == "svi"
    rel = adata.obs["X_tsne_reliability"].to_numpy()
    np.testing.assert_array_equal(rel, est.reliability_)
    assert ((rel >= 0) & (rel <= 1)).all()
    np.testing.assert_array_equal(adata.obs["X_tsne_stability"].to_numpy(), est.stability_)
    # a MAP refit under the same key removes the stale spread, reliability and stability
    pad.embed(adata, "tsne", **FAST_TSNE)
    assert "X_tsne_std" not in adata.obsm and "X_tsne_reliability" not in adata.obs
    assert "X_tsne_stability" not in adata.obs


# -- the representation --------------------------------------------------------------------------
def test_missing_representation_is_a_clear_error(adata):
    with pytest.raises(KeyError, match=r"no 'X_umap'.*X_pca.*use_rep='X'"):
        pad.embed(adata, "umap", use_rep="X_umap")
    del adata.obsm["X_pca"]  # 64 variables: more than scanpy's 50 for embedding X directly
    with pytest.raises(KeyError, match=r"no 'X_pca'.*use_rep='X'"):
        pad.embed(adata, "umap")


def test_few_variables_fall_back_to_X():
    rng = np.random.default_rng(0)
    adata = anndata.AnnData(rng.normal(size=(120, 8)).astype(np.float32))
    pad.embed(adata, "umap", n_epochs=5)
    assert adata.uns["X_umap"]["use_rep"] == "X"
    assert adata.obsm["X_umap"].shape == (120, 2)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(method="umapp"), ValueError, "unknown method 'umapp'"),
    (dict(method=42), TypeError, "method must be"),
    (dict(method="umap", perplexityy=3), ValueError, r"no parameter\(s\) \['perplexityy'\]"),
    (dict(method="umap", key_added=""), ValueError, "key_added"),
    (dict(method="umap", neighbors_key="nbrs"), KeyError, r"no neighbour graph 'nbrs'.*neighbors"),
    (dict(method="umap", neighbors_key="neighbors", metric="cosine"), ValueError, "conflicts"),
    (dict(method="gwmds_is_not_here"), ValueError, "unknown method"),
])
def test_bad_arguments_fail_before_fitting(adata, kwargs, error, match):
    with pytest.raises(error, match=match):
        pad.embed(adata, **kwargs)
    assert not any(k not in ("X_pca",) for k in adata.obsm)


def test_an_instance_with_another_metric_conflicts_with_a_graph(adata):
    with pytest.raises(ValueError, match="conflicts"):
        pad.embed(adata, FakeUMAP(metric="cosine"), neighbors_key="neighbors")


def test_not_an_anndata():
    with pytest.raises(TypeError, match="AnnData"):
        pad.embed(np.zeros((10, 3)))


def test_missing_distances_matrix(adata):
    del adata.obsp["distances"]
    with pytest.raises(KeyError, match=r"obsp\['distances'\]"):
        pad.embed(adata, "umap", neighbors_key="neighbors")


# -- reusing a neighbour graph: the plumbing, on stand-in estimators -----------------------------
class _Recorder(BaseEstimator):
    """Records what it is fitted on; a fixed embedding."""

    def fit_transform(self, X, y=None):
        self.X_seen_ = X
        self.embedding_ = np.zeros((X.shape[0], 2))
        return self.embedding_


class FakeUMAP(_Recorder):
    def __init__(self, n_neighbors=15, metric="euclidean", random_state=None):
        self.n_neighbors, self.metric, self.random_state = n_neighbors, metric, random_state


class FakeTSNE(_Recorder):
    def __init__(self, perplexity=30.0, n_neighbors=None, metric="euclidean", random_state=None):
        self.perplexity, self.n_neighbors = perplexity, n_neighbors
        self.metric, self.random_state = metric, random_state


def test_sparse_X_reaches_estimators_that_take_it(adata):
    class SparseTaker(FakeUMAP):
        _accepts_sparse = True

    adata.X = sp.csr_matrix(adata.X)
    assert sp.issparse(pad.embed(adata, SparseTaker, use_rep="X", return_estimator=True).X_seen_)
    seen = pad.embed(adata, FakeUMAP, use_rep="X", return_estimator=True).X_seen_
    assert isinstance(seen, np.ndarray) and seen.shape == adata.shape
    np.testing.assert_array_equal(seen, adata.X.toarray())


def test_graph_reuse_sets_the_umap_neighbour_count(adata):
    est = pad.embed(adata, FakeUMAP, neighbors_key="neighbors", return_estimator=True)
    assert est.metric == "precomputed" and est.n_neighbors == N_NEIGHBORS
    assert sp.issparse(est.X_seen_) and (est.X_seen_ != adata.obsp["distances"]).nnz == 0
    info = adata.uns["X_fakeumap"]
    assert info["neighbors_key"] == "neighbors" and info["graph_neighbors"] == N_NEIGHBORS - 1
    assert "use_rep" not in info and "n_neighbors=15" in info["note"]
    # a count given by the user is kept (the estimator checks it against the graph)
    est = pad.embed(adata, FakeUMAP, neighbors_key="neighbors", return_estimator=True,
                    n_neighbors=8)
    assert est.n_neighbors == 8
    est = pad.embed(adata, FakeUMAP(n_neighbors=9), neighbors_key="neighbors",
                    return_estimator=True)
    assert est.n_neighbors == 9


def test_graph_reuse_sets_the_perplexity(adata):
    k = N_NEIGHBORS - 1
    with pytest.warns(UserWarning, match=r"chosen from the graph's.*Pass perplexity="):
        est = pad.embed(adata, FakeTSNE, neighbors_key="neighbors", return_estimator=True)
    assert est.perplexity == pytest.approx(k / 3) and est.n_neighbors == k
    assert np.ceil(3 * est.perplexity) <= k
    assert "perplexity" in adata.uns["X_faketsne"]["note"]
    for given in (dict(perplexity=20.0), dict(n_neighbors=40)):
        est = pad.embed(adata, FakeTSNE, neighbors_key="neighbors", return_estimator=True,
                        **given)
        assert est.get_params()[next(iter(given))] == next(iter(given.values()))
        assert "note" not in adata.uns["X_faketsne"]


@pytest.mark.parametrize("k", range(3, 100))
def test_graph_perplexity_never_asks_for_more_neighbours_than_stored(k):
    p = pad._perplexity_for(k)
    assert np.ceil(3 * p) <= k and p == pytest.approx(min(30, k / 3))


def test_graph_under_scanpy_key_added(adata):
    scanpy_neighbors(adata, n_neighbors=10, key_added="foo")
    est = pad.embed(adata, FakeUMAP, neighbors_key="foo", return_estimator=True)
    assert (est.X_seen_ != adata.obsp["foo_distances"]).nnz == 0 and est.n_neighbors == 10


def test_graph_rows_with_fewer_neighbours_lower_k_with_a_warning(adata):
    D = adata.obsp["distances"].tolil()
    D[3, D.rows[3][0]] = 0  # a row that lost a neighbour (scipy drops a duplicate's 0 distance)
    adata.obsp["distances"] = D.tocsr()
    with pytest.warns(UserWarning, match="1 rows .* fewer than .* 14"):
        est = pad.embed(adata, FakeUMAP, neighbors_key="neighbors", return_estimator=True)
    assert est.n_neighbors == N_NEIGHBORS - 1


def test_graph_reuse_needs_a_metric_parameter(adata):
    class NoMetric(_Recorder):
        def __init__(self, n_neighbors=15):
            self.n_neighbors = n_neighbors

    with pytest.raises(ValueError, match="no 'metric' parameter"):
        pad.embed(adata, NoMetric, neighbors_key="neighbors")


# -- reusing a neighbour graph: the estimators ---------------------------------------------------
@needs_precomputed
def test_umap_on_scanpy_graph_equals_umap_on_the_representation(adata, tmp_path):
    est_graph = pad.embed(adata, "umap", neighbors_key="neighbors", key_added="X_g",
                          return_estimator=True, **FAST_UMAP)
    est_rep = pad.embed(adata, "umap", key_added="X_r", return_estimator=True,
                        n_neighbors=N_NEIGHBORS, **FAST_UMAP)
    assert est_graph.n_neighbors == N_NEIGHBORS
    A, B = est_graph.input_graph_.mean, est_rep.input_graph_.mean
    A = A.to_dense() if A.is_sparse else A
    B = B.to_dense() if B.is_sparse else B
    np.testing.assert_allclose(A.numpy(), B.numpy(), atol=1e-6)
    assert adata.obsm["X_g"].shape == (adata.n_obs, 2)
    info = adata.uns["X_g"]
    assert info["params"]["metric"] == "precomputed" and info["neighbors_key"] == "neighbors"
    adata.write_h5ad(tmp_path / "g.h5ad")
    back = anndata.read_h5ad(tmp_path / "g.h5ad")
    np.testing.assert_array_equal(back.obsm["X_g"], adata.obsm["X_g"])
    assert back.uns["X_g"]["graph_neighbors"] == N_NEIGHBORS - 1


@needs_precomputed
def test_tsne_on_scanpy_graph_equals_tsne_on_the_representation(adata):
    k = N_NEIGHBORS - 1
    est_graph = pad.embed(adata, "tsne", neighbors_key="neighbors", key_added="X_g",
                          return_estimator=True, **FAST_TSNE)
    assert est_graph.perplexity == pad._perplexity_for(k)
    est_rep = pad.embed(adata, "tsne", key_added="X_r", return_estimator=True,
                        perplexity=est_graph.perplexity, **FAST_TSNE)
    A, B = est_graph.input_graph_.mean, est_rep.input_graph_.mean
    A = A.to_dense() if A.is_sparse else A
    B = B.to_dense() if B.is_sparse else B
    np.testing.assert_allclose(A.numpy(), B.numpy(), atol=1e-6)
    assert "perplexity" in adata.uns["X_g"]["note"]


@needs_precomputed
def test_too_few_graph_neighbours_for_the_perplexity_is_the_estimators_error(adata):
    with pytest.raises(ValueError):
        pad.embed(adata, "tsne", neighbors_key="neighbors", perplexity=30, **FAST_TSNE)
    assert "X_tsne" not in adata.obsm


def test_default_key_is_scanpys_so_its_plots_name_the_axes_umap1(adata):
    pad.embed(adata, "umap", **FAST_UMAP)
    assert adata.obsm["X_umap"].shape == (adata.n_obs, 2)
    sc = pytest.importorskip("scanpy", reason="scanpy is in the dev extra; pip install -c "
                             "constraints.txt scanpy")
    import matplotlib

    matplotlib.use("Agg")
    ax = sc.pl.umap(adata, color="digit", show=False)
    assert ax.get_xlabel() == "UMAP1" and ax.get_ylabel() == "UMAP2"
    matplotlib.pyplot.close("all")


def test_replacing_another_tools_embedding_warns_and_a_rerun_does_not(adata):
    adata.obsm["X_umap"] = np.zeros((adata.n_obs, 2), dtype=np.float32)  # scanpy.tl.umap's
    with pytest.warns(UserWarning, match=r"replacing adata.obsm\['X_umap'\].*X_probdr_umap"):
        pad.embed(adata, "umap", **FAST_UMAP)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pad.embed(adata, "umap", **FAST_UMAP)  # probdr's own: replaced silently
    pad.embed(adata, "umap", key_added="X_probdr_umap", **FAST_UMAP)
    assert {"X_umap", "X_probdr_umap"} <= set(adata.obsm)
