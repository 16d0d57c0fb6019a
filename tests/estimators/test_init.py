"""Spectral initialisation (probdr.init.spectral): the eigenvectors of the normalised adjacency,
the same on every call, also where the last eigenvalue kept is a repeated one."""

import numpy as np
import torch

import probdr
from probdr.init import spectral


def _cycle(n):
    i = torch.arange(n)
    rows = torch.cat([i, i])
    cols = torch.cat([(i + 1) % n, (i - 1) % n])
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.ones(2 * n,
                                   dtype=torch.float64), (n, n)).coalesce()


def test_repeated_last_eigenvalue_gives_the_same_vectors_every_call():
    """On a cycle of 8 nodes the normalised adjacency has eigenvalues cos(2 pi j / 8): 1, then
    pairs. Three components keep 1, the pair 0.707 and one vector of the pair at 0, a repeated
    eigenvalue cut in two; every call returns the same vectors, and they are eigenvectors."""
    G = _cycle(8)
    outs = [spectral(G, 3) for _ in range(10)]
    assert all(torch.equal(outs[0], o) for o in outs[1:])
    # the graph is regular (degree 2): D^{-1/2} is a constant, the columns are eigenvectors
    N = G.to_dense().numpy() / 2.0
    V = outs[0].numpy()
    lam = (V * (N @ V)).sum(0) / (V * V).sum(0)
    np.testing.assert_allclose(N @ V, V * lam, atol=1e-12)
    np.testing.assert_allclose(np.sort(lam), [0.0, np.sqrt(0.5), np.sqrt(0.5)], atol=1e-12)


def test_umap_on_a_tiny_graph_is_repeatable():
    """The case found by the property tests: 8 points, 2 neighbours, 3 components."""
    X = np.random.default_rng(11).normal(size=(8, 8))
    kw = dict(n_components=3, random_state=0, n_neighbors=2, n_epochs=5)
    runs = [probdr.UMAP(**kw).fit_transform(X) for _ in range(4)]
    assert all(np.array_equal(runs[0], r) for r in runs[1:])
