"""Supervision: labels as a second observed graph (probdr.input.labels)."""

import numpy as np
import pytest
import torch

import probdr
from probdr.input.labels import check_labels, label_graph, supervised_mean

FIT = dict(n_epochs=1, random_state=0)


def test_check_labels_conventions():
    assert check_labels(np.array([0, -1, 2]), 3).tolist() == [0, -1, 2]
    assert check_labels(np.array([1.0, np.nan, 1.0]), 3).tolist() == [0 + 1, -1, 1]
    assert check_labels(np.array(["cat", None, "dog", ""], dtype=object), 4).tolist() == [0, -1, 1, -1]
    with pytest.raises(ValueError, match="1-D array of 3"):
        check_labels(np.zeros(4), 3)
    with pytest.raises(ValueError, match="every label is unknown"):
        check_labels(-np.ones(3, dtype=int), 3)
    with pytest.raises(ValueError, match="non-integer"):
        check_labels(np.array([0.5, 1.0]), 2)
    with pytest.raises(ValueError, match=">= 0"):
        check_labels(np.array([0, -2]), 2)


def test_label_graph_links_same_labels_only():
    y = np.array([0, 0, 0, 1, 1, -1, 2, 1])
    W = torch.eye(8).roll(1, 1).to_sparse()  # out-degree 1: one partner per row
    G = label_graph(y, W, k=5, generator=torch.Generator().manual_seed(0))
    (r, c), v = G.indices(), G.values()
    assert (r != c).all()
    assert (y[r.numpy()] == y[c.numpy()]).all()
    rows = torch.zeros(8, dtype=torch.float64).index_add_(0, r, v)
    # labelled rows with a partner sum to 1; the unknown point and the lone label 2 have none
    np.testing.assert_allclose(rows.numpy(), [1, 1, 1, 1, 1, 0, 0, 1])


def test_two_tempered_couplings_equal_one_mixture_coupling(digits_small):
    """The cross-entropy is linear in the observed graph: coupling with the mixture equals the
    sum of the two tempered couplings (the model's two observed graphs)."""
    X, y = digits_small
    est = probdr.TSNE(n_iter=2, early_exaggeration_iter=1, random_state=0).fit(X)
    P = est.input_graph_.mean
    y_semi = np.where(np.arange(len(y)) % 2 == 0, y, -1)
    G = label_graph(y_semi, P, generator=torch.Generator().manual_seed(1))
    alpha = 0.3
    mix = supervised_mean(P, G, y_semi, alpha)
    a = torch.where(torch.as_tensor(y_semi >= 0), alpha, 0.0).double()
    mass = torch.sparse.sum(P, 1).to_dense().double()
    def scale_rows(W, s):
        W = W.double().coalesce()
        return torch.sparse_coo_tensor(W.indices(), W.values() * s[W.indices()[0]], W.shape,
                                       check_invariants=False)

    part_x, part_y = scale_rows(P, 1 - a), scale_rows(G, a * mass)
    law = est.latent_law(est.embedding_)
    h_mix = float(law.cross_entropy(mix))
    h_sum = float(law.cross_entropy(part_x.coalesce())) + float(law.cross_entropy(part_y.coalesce()))
    assert h_mix == pytest.approx(h_sum, rel=1e-10)
    # labelled rows keep their mass; unlabelled rows are the data's
    np.testing.assert_allclose(torch.sparse.sum(mix, 1).to_dense().numpy(), mass.numpy(),
                               rtol=1e-12)
    unl = np.nonzero(y_semi < 0)[0][:5]
    np.testing.assert_allclose(mix.to_dense()[unl].numpy(), P.to_dense()[unl].numpy())


def test_target_weight_zero_is_unsupervised(digits_small):
    X, y = digits_small
    a = probdr.UMAP(n_epochs=30, random_state=0).fit(X).embedding_
    b = probdr.UMAP(n_epochs=30, random_state=0, target_weight=0.0).fit(X, y).embedding_
    np.testing.assert_array_equal(a, b)


def test_labels_separate_the_classes(digits_small):
    """Fully supervised: the label silhouette rises well above the unsupervised one; the fit
    records the label graph and the loss is the mixture's."""
    from sklearn.metrics import silhouette_score

    X, y = digits_small
    plain = probdr.UMAP(n_epochs=100, random_state=0).fit(X)
    sup = probdr.UMAP(n_epochs=100, random_state=0).fit(X, y)
    assert silhouette_score(sup.embedding_, y) > silhouette_score(plain.embedding_, y) + 0.1
    assert sup.label_graph_.shape == (len(y), len(y))
    assert sup.loss(sup.embedding_) != pytest.approx(plain.loss(sup.embedding_))
    # a refit without labels forgets them
    sup.fit(X)
    assert sup.label_graph_ is None
    assert sup.loss(sup.embedding_) == pytest.approx(
        probdr.UMAP(n_epochs=100, random_state=0).fit(X).loss(sup.embedding_))


def test_unsupervised_estimators_ignore_y(digits_small):
    X, y = digits_small
    a = probdr.WishartPCA(n_components=2, random_state=0).fit(X).embedding_
    b = probdr.WishartPCA(n_components=2, random_state=0).fit(X, y).embedding_
    np.testing.assert_array_equal(a, b)


def test_bad_labels_fail_before_the_fit(digits_small):
    X, y = digits_small
    with pytest.raises(ValueError, match="1-D array"):
        probdr.UMAP(**FIT).fit(X, y[:10])
    with pytest.raises(ValueError, match="target_weight"):
        probdr.UMAP(target_weight=1.5, **FIT).fit(X, y)
