"""The modelling layer checks its inputs like the estimators: each function a user writing a
custom graph prior calls takes numpy and torch alike and refuses a wrong dimension, NaN, inf,
negative distances, empty input, a wrong type or a non-law with a ``ValueError`` or
``TypeError`` naming the argument, before any work (one regression test per case found by the
fuzz of the public surface)."""

import numpy as np
import pytest
import torch

import probdr
from probdr import metrics
from probdr.input import affinities
from probdr.laws import components
from probdr.laws.edge_priors import check_edge_prior

RNG = np.random.default_rng(0)
X = RNG.normal(size=(40, 3))
D2 = np.sort(((X[:, None] - X[None]) ** 2).sum(-1), 1)[:, 1:11]  # (40, 10) neighbour lists


@pytest.mark.parametrize("func", [
    lambda d: affinities.entropic_affinity(d, 5.0),
    lambda d: affinities.entropic_bandwidths(d, 5.0),
    lambda d: affinities.umap_membership(d, n_neighbors=11),
    affinities.binary_knn])
def test_numpy_and_torch_give_the_same_affinities(func):
    got, ref = func(D2), func(torch.as_tensor(D2))
    assert isinstance(got, torch.Tensor) and torch.equal(got, ref)
    assert got.shape[0] == 40 and bool(torch.isfinite(got).all())


BAD_SQ_DIST = {
    "1-D": (D2[0], ValueError, "sq_dist must be a 2-D array"),
    "NaN": (np.where(D2 > 1, np.nan, D2), ValueError, "sq_dist contains .* NaN"),
    "inf": (np.where(D2 > 1, np.inf, D2), ValueError, "sq_dist contains .* infinite"),
    "negative": (-D2, ValueError, "sq_dist has negative entries"),
    "empty": (np.zeros((0, 5)), ValueError, "sq_dist is empty"),
    "strings": (np.array([["a", "b"]]), TypeError, "sq_dist must be numeric"),
}


@pytest.mark.parametrize("case", sorted(BAD_SQ_DIST))
@pytest.mark.parametrize("name", ["entropic_affinity", "entropic_bandwidths", "umap_membership",
                                  "binary_knn"])
def test_bad_squared_distances_are_refused(name, case):
    d2, err, match = BAD_SQ_DIST[case]
    args = {"entropic_affinity": (2.0,), "entropic_bandwidths": (2.0,)}.get(name, ())
    with pytest.raises(err, match=match):
        getattr(affinities, name)(d2, *args)


@pytest.mark.parametrize("kw, err, match", [
    (dict(n_neighbors=0), ValueError, "n_neighbors must lie in"),
    (dict(n_neighbors="5"), TypeError, "n_neighbors must be an integer"),
    (dict(local_connectivity=20), ValueError, "local_connectivity must lie in"),
    (dict(local_connectivity=-1), ValueError, "local_connectivity must lie in"),
    (dict(n_iter=0), ValueError, "n_iter must lie in")])
def test_umap_membership_parameters(kw, err, match):
    with pytest.raises(err, match=match):
        affinities.umap_membership(D2, **kw)


@pytest.mark.parametrize("perplexity, err", [(0.5, ValueError), (11, ValueError),
                                             ("30", TypeError), (np.inf, ValueError)])
def test_entropic_perplexity_range(perplexity, err):
    with pytest.raises(err, match="perplexity"):
        affinities.entropic_affinity(D2, perplexity)


def test_numpy_scalar_perplexity_is_a_number():
    P = affinities.entropic_affinity(D2, np.float32(5))
    assert torch.allclose(affinities.perplexity_of_rows(P), torch.full((40,), 5.0,
                                                                       dtype=torch.float64),
                          rtol=1e-4)


def test_perplexity_of_rows_refuses_negative_rows():
    with pytest.raises(ValueError, match="P has negative entries"):
        affinities.perplexity_of_rows(-np.ones((3, 3)))


@pytest.fixture(scope="module")
def law():
    return probdr.build_input_graph(X, "D", perplexity=5)  # numpy X is accepted


def test_build_input_graph_takes_numpy(law):
    ref = probdr.build_input_graph(torch.as_tensor(X), "D", perplexity=5)
    assert torch.equal(law.mean.to_dense(), ref.mean.to_dense())


@pytest.mark.parametrize("kw, err, match", [
    (dict(chunk_size=-1), ValueError, "chunk_size must lie in"),
    (dict(chunk_size=2.5), TypeError, "chunk_size must be an integer"),
    (dict(n_samples=0), ValueError, "n_samples must lie in"),
    (dict(generator=3), TypeError, "generator must be a torch.Generator")])
def test_sample_memberships_parameters(law, kw, err, match):
    args = dict(n_samples=7, generator=torch.Generator().manual_seed(0)) | kw
    with pytest.raises(err, match=match):
        components.sample_memberships(law, **args)


def test_sample_memberships_refuses_a_non_law():
    with pytest.raises(TypeError, match="law must be a graph law"):
        components.sample_memberships(np.zeros((3, 3)), 7)


def test_batch_memberships_numpy_and_shapes():
    W = np.zeros((2, 4, 4))
    W[0, 0, 1] = W[1, 2, 3] = 1
    assert torch.equal(components.batch_memberships(W),
                       components.batch_memberships(torch.as_tensor(W)))
    assert components.batch_memberships(W).tolist() == [[0, 0, 1, 2], [0, 1, 2, 2]]
    for bad in (np.zeros(5), np.zeros((2, 3, 4)), np.zeros((1, 1, 2, 2))):
        with pytest.raises(ValueError, match="W must be a graph"):
            components.batch_memberships(bad)


@pytest.mark.parametrize("m, err", [(np.zeros((0, 0), dtype=int), ValueError),
                                    (np.zeros(5, dtype=int), ValueError),
                                    (-np.ones((2, 3), dtype=int), ValueError),
                                    (np.zeros((2, 3)), TypeError)])
def test_component_statistics_refuses_bad_labels(m, err):
    with pytest.raises(err, match="memberships"):
        components.component_statistics(m)


@pytest.mark.parametrize("prior, err, match", [
    ("strong", TypeError, "edge_prior must be None, an edge prior"),
    (np.full((40, 40), np.nan), ValueError, "finite weights >= 0"),
    (-np.ones((40, 40)), ValueError, "finite weights >= 0"),
    (np.ones((39, 39)), ValueError, r"\(40, 40\) array"),
    (0.0, ValueError, "forbids every edge")])
def test_edge_prior_is_checked_before_any_work(prior, err, match):
    with pytest.raises(err, match=match):
        check_edge_prior(prior, 40)
    with pytest.raises(err, match=match):
        probdr.TSNE(edge_prior=prior, perplexity=5, n_iter=10, early_exaggeration_iter=5).fit(X)


def test_metric_parameters():
    y = np.arange(40) % 2
    with pytest.raises(TypeError, match="k must be an integer"):
        metrics.knn_accuracy(X[:, :2], y, k=2.5)
    with pytest.raises(ValueError, match="sample_size=1 is too small"):
        metrics.trustworthiness(X, X[:, :2], sample_size=1)
    assert metrics.knn_accuracy(X[:, :2], y, k=np.int64(3)) == metrics.knn_accuracy(X[:, :2], y,
                                                                                     k=3)


@pytest.mark.parametrize(("kw", "match"), [
    (dict(name="digitz"), "Unknown data set"),
    (dict(name="digits", n_samples=0), "n_samples"),
    (dict(name="digits", n_samples=2.5), "n_samples"),
    (dict(name="mnist_deformed", n_samples=-3), "n_samples"),
    (dict(name="digits", pca=0), "pca"),
    (dict(name="digits", pca=True), "pca"),
])
def test_datasets_load_refuses_bad_arguments_before_any_work(kw, match):
    with pytest.raises(ValueError, match=match):
        probdr.datasets.load(**kw)


def test_datasets_load_subsets_and_projects():
    X, y = probdr.datasets.load("digits", n_samples=np.int64(50), pca=5)
    assert X.shape == (50, 5) and y.shape == (50,)
    assert probdr.datasets.load("digits", n_samples=10**6)[0].shape == (1797, 64)
