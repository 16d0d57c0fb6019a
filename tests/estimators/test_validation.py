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


def test_duplicated_and_constant_rows_give_finite_embeddings():
    """All-zero, 90% identical and 0/1 data: the entropic calibration takes the uniform affinity
    on rows whose neighbours are all equidistant (openTSNE and umap-learn embed such data)."""
    rng = np.random.default_rng(0)
    data = [np.zeros((60, 5)), np.vstack([np.ones((54, 5)), rng.normal(size=(6, 5))]),
            rng.integers(0, 2, (60, 5)).astype(float)]
    for X in data:
        for est in (probdr.TSNE(perplexity=10, n_iter=40, early_exaggeration_iter=10),
                    probdr.LargeVis(perplexity=10, n_iter=20), probdr.UMAP(n_epochs=20),
                    probdr.ccPCA(perplexity=10, n_samples=5, n_components=2)):
            Z = est.set_params(random_state=0).fit_transform(X)
            assert Z.shape == (60, 2) and np.isfinite(Z).all()
    import torch

    P = probdr.affinities.entropic_affinity(torch.zeros(50, 10), 5.0)
    assert torch.isfinite(P).all() and torch.allclose(P, torch.full_like(P, 0.1))


@pytest.mark.parametrize("params, match", [
    (dict(early_exaggeration_iter=-1), "early_exaggeration_iter"),
    (dict(early_exaggeration=0), "early_exaggeration"),
    (dict(early_exaggeration=-2.0), "early_exaggeration"),
    (dict(momentum=1.5), "momentum"),
    (dict(early_momentum=-0.1), "early_momentum"),
    (dict(init="bar"), "init"),
    (dict(neighbors="x"), "neighbors"),
    (dict(n_components=None), "n_components"),
    (dict(n_components=True), "n_components"),
    (dict(random_state=2**32), "random_state"),
])
def test_parameters_checked_before_heavy_work(params, match, monkeypatch):
    """Each bad option raises a ValueError naming it before the neighbour search starts."""
    import probdr.input.search as search

    def boom(*a, **k):
        raise AssertionError("the neighbour search ran before the parameter check")

    monkeypatch.setattr(search, "neighbor_lists", boom)
    X = np.random.default_rng(0).normal(size=(60, 6))
    with pytest.raises(ValueError, match=match):
        probdr.TSNE(perplexity=10, **params).fit(X)


@pytest.mark.parametrize("params, match", [(dict(negative_samples=0), "negative_samples"),
                                           (dict(negative_weight=-1.0), "negative_weight")])
def test_umap_sampling_parameters(params, match):
    X = np.random.default_rng(0).normal(size=(60, 6))
    with pytest.raises(ValueError, match=match):
        probdr.UMAP(**params).fit(X)


def test_numpy_scalars_are_numbers():
    X = np.random.default_rng(0).normal(size=(60, 6))
    Z = probdr.TSNE(perplexity=np.float32(5), n_iter=np.int64(30), early_exaggeration_iter=10,
                    learning_rate=np.float64(20.0), random_state=0).fit_transform(X)
    assert np.isfinite(Z).all()


def test_rnx_block_size_is_checked():
    X = np.random.default_rng(0).normal(size=(40, 4))
    with pytest.raises(ValueError, match="block_size"):
        probdr.metrics.rnx(X, X[:, :2], 5, block_size=-1)
    assert probdr.metrics.rnx(X, X[:, :2], 5, block_size=7) == pytest.approx(
        probdr.metrics.rnx(X, X[:, :2], 5))


def test_latent_edge_prior_forbidding_input_edges_is_a_clear_error():
    """log pi = -inf on an edge the input graph has: an infinite cross-entropy, said before the
    optimisation (not as a FloatingPointError about the learning rate)."""
    import probdr

    X = np.random.default_rng(0).normal(size=(60, 5))
    pi = np.ones((60, 60))
    pi[0, :] = 0.0
    with pytest.raises(ValueError, match="latent_edge_prior is 0 on"):
        probdr.TSNE(perplexity=5, latent_edge_prior=pi).fit(X)
    pi = np.ones((60, 60))
    np.fill_diagonal(pi, 0.0)  # the diagonal is never an edge: fine
    probdr.TSNE(perplexity=5, n_iter=20, early_exaggeration_iter=5,
                latent_edge_prior=pi).fit(X)


def test_dataframe_errors_name_the_columns_and_say_what_to_do():
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(30, 3)), columns=["a", "b", "c"])
    est = probdr.TSNE(n_iter=5, early_exaggeration_iter=2, perplexity=5)
    with pytest.raises(ValueError, match=r"column\(s\) 'kind' are not numeric \(e.g. 'x'\)"):
        est.fit(df.assign(kind="x"))
    with pytest.raises(ValueError, match=r"column\(s\) 'kind' are not numeric"):
        est.fit(df.assign(kind=pd.Categorical(["x", "y"] * 15)))
    holes = df.assign(b=df["b"].where(df.index != 4))
    with pytest.raises(ValueError, match=r"NaN\) in column\(s\) 'b' \(1\);.*SimpleImputer") as e:
        est.fit(holes)
    assert "HistGradientBoosting" not in str(e.value)
    with pytest.raises(ValueError, match="X contains NaN.*SimpleImputer") as e:
        est.fit(holes.to_numpy())
    assert "HistGradientBoosting" not in str(e.value)
    est.fit(df)
    with pytest.raises(ValueError, match=r"column\(s\) 'b'"):
        est.transform(holes)


# -- every rule that needs no computed graph is checked before any work ------------------------
def _no_work(monkeypatch, cls):
    """Make ``cls._fit`` (where every fit's work starts: neighbours, affinities, optimisation)
    fail loudly, so an error raised by ``fit`` came from validation."""
    def fit(self, *args, **kwargs):
        raise AssertionError(f"{cls.__name__}._fit ran before the error")
    monkeypatch.setattr(cls, "_fit", fit)


INIT_ESTIMATORS = ["SNE", "TSNE", "LargeVis", "UMAP", "GraphCoupling", "SNEkhorn", "TSNEkhorn",
                   "LaplacianWishart", "ProbDR", "GWMDS"]


@pytest.mark.parametrize("name", INIT_ESTIMATORS)
def test_an_init_array_of_the_wrong_shape_is_refused_before_any_work(name, monkeypatch):
    cls = getattr(probdr, name)
    _no_work(monkeypatch, cls)
    X = np.random.default_rng(0).normal(size=(120, 6))
    with pytest.raises(ValueError, match=r"init.*shape \(120, 2\)"):
        cls(init=np.zeros((50, 2))).fit(X)
    with pytest.raises(ValueError, match=r"init.*shape \(120, 2\)"):
        cls(init=torch.zeros(120, 3)).fit(X)


def test_distr_prototypes_init_is_checked_before_any_work(monkeypatch):
    _no_work(monkeypatch, probdr.DistR)
    X = np.random.default_rng(0).normal(size=(120, 6))
    with pytest.raises(ValueError, match=r"n_prototypes, n_components"):
        probdr.DistR(n_prototypes=10, init=np.zeros((120, 2))).fit(X)


@pytest.mark.parametrize("make", [
    lambda: probdr.SNE(repulsion="fft"),
    lambda: probdr.GraphCoupling(prior_z="D", repulsion="fft"),
    lambda: probdr.TSNE(n_components=3, repulsion="fft"),
    lambda: probdr.GraphCoupling("D", "E", "gaussian", repulsion="fft"),
])
def test_fft_repulsion_outside_its_laws_is_refused_before_any_work(make, monkeypatch):
    est = make()
    _no_work(monkeypatch, type(est))
    X = np.random.default_rng(0).normal(size=(120, 6))
    with pytest.raises(ValueError, match="repulsion='fft'"):
        est.fit(X)


def test_fft_repulsion_where_it_applies_still_fits():
    X = np.random.default_rng(0).normal(size=(120, 6))
    for est in (probdr.TSNE(repulsion="fft", n_iter=20, early_exaggeration_iter=5),
                probdr.UMAP(repulsion="fft", n_epochs=10)):
        assert np.isfinite(est.fit_transform(X)).all()


def test_wishart_eigenmaps_beta_past_one_over_ridge_is_refused_before_any_work(monkeypatch):
    _no_work(monkeypatch, probdr.WishartEigenmaps)
    X = np.random.default_rng(0).normal(size=(60, 5))
    with pytest.raises(ValueError, match="1/ridge"):
        probdr.WishartEigenmaps(beta=1e6, ridge=0.01).fit(X)


def test_wishart_eigenmaps_beta_too_large_for_the_spectrum_fails_before_optimising(monkeypatch):
    """Without a ridge the bound is the graph's spectrum, known once the Laplacian is: the
    error says which beta works, and no MAP step has run."""
    import probdr.estimators.wishart as wishart

    def no_map(*args, **kwargs):
        raise AssertionError("the MAP ran before the error")
    monkeypatch.setattr(wishart, "map_estimate", no_map)
    X = np.random.default_rng(0).normal(size=(60, 5))
    with pytest.raises(ValueError, match=r"use beta < "):
        probdr.WishartEigenmaps(beta=1e6).fit(X)


def test_gwmds_on_a_disconnected_graph_fails_before_optimising(monkeypatch):
    """Connectivity needs the neighbour graph; the error comes right after it, before any GW
    plan or MAP step."""
    def no_plan(*args, **kwargs):
        raise AssertionError("a GW plan was solved before the error")
    monkeypatch.setattr(probdr.GWMDS, "_solve_plan", no_plan)
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(30, 4)), rng.normal(size=(30, 4)) + 1000.0])
    with pytest.raises(ValueError, match="connected components"):
        probdr.GWMDS(geodesic=True, n_neighbors=5).fit(X)


@pytest.mark.parametrize("name", ["GWMDS", "TSNE", "WishartPCA"])
def test_data_near_float64_underflow_is_refused_before_any_work(name, monkeypatch):
    cls = getattr(probdr, name)
    _no_work(monkeypatch, cls)
    X = np.random.default_rng(0).normal(size=(120, 6)) * 1e-150
    with pytest.raises(ValueError, match="underflow"):
        cls().fit(X)


def test_coinciding_points_are_not_refused_as_tiny():
    X = np.zeros((40, 3))
    with pytest.warns(RuntimeWarning, match="coincide"):
        probdr.GWMDS().fit(X)


def test_from_graph_refuses_an_empty_graph():
    from probdr.laws.edge_priors import from_graph

    with pytest.raises(ValueError, match="empty graph"):
        from_graph(np.zeros((0, 0)))
