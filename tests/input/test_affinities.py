import numpy as np
import pytest
import torch

import probdr
from probdr import affinities
from probdr.input.neighbors import knn


def test_entropic_rows_reach_target_perplexity(digits):
    X, _ = digits
    idx, d2 = knn(torch.from_numpy(X), 90)
    for perp in (5.0, 30.0, 50.0):
        P = affinities.entropic_affinity(d2, perp)
        assert torch.allclose(P.sum(1), torch.ones(len(X), dtype=P.dtype), atol=1e-12)
        H = affinities.perplexity_of_rows(P)
        assert ((H - perp).abs() / perp).max() < 1e-3


def test_input_graph_mean_is_row_stochastic_entropic(digits_small):
    X, _ = digits_small
    est = probdr.TSNE(n_iter=2, early_exaggeration_iter=1).fit(X)
    P = est.input_graph_.mean.to_dense()
    assert torch.allclose(P.sum(1), torch.ones(len(X), dtype=P.dtype))
    assert ((affinities.perplexity_of_rows(P) - 30).abs() / 30).max() < 1e-3
    assert torch.all(P.diagonal() == 0)


def test_umap_graph_matches_umap_learn(digits):
    umap_ = pytest.importorskip("umap.umap_")
    X, _ = digits
    est = probdr.UMAP(n_epochs=1, random_state=0).fit(X)
    ours = est.input_graph_.mean.to_dense().numpy()
    idx, d2 = knn(torch.from_numpy(X), 14)
    n = len(X)
    kidx = np.hstack([np.arange(n)[:, None], idx.numpy()])
    kd = np.hstack([np.zeros((n, 1)), np.sqrt(d2.numpy())]).astype(np.float32)
    G, _, _ = umap_.fuzzy_simplicial_set(X, 15, np.random.RandomState(0), "euclidean",
                                         knn_indices=kidx, knn_dists=kd)
    ref = G.toarray()
    assert np.abs(ours - ref).max() < 1e-4
    assert ((ours > 0) == (ref > 0)).all()


def test_local_connectivity_rho():
    # rho is the distance to the first non-identical neighbour: that edge has membership 1
    d2 = torch.tensor([[0.0, 1.0, 4.0, 9.0], [1.0, 1.0, 2.0, 3.0]])
    v = affinities.umap_membership(d2, n_neighbors=5)
    assert v[0, 0] == 1.0 and v[0, 1] == 1.0  # zero distance (duplicate) and the first positive
    assert v[1, 0] == 1.0 and v[1, 1] == 1.0 and v[1, 2] < 1.0
    psum = v[1].sum()
    assert psum == pytest.approx(np.log2(5), rel=1e-4)
