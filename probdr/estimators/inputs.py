"""What X may be for the graph-coupling estimators, and where their fit starts: the initial
embedding for every kind of input (features, dense or sparse; precomputed distances, neighbour
lists or affinities; a graph law)."""

from __future__ import annotations

import torch

from ..init import initialize
from ..laws.graph import GraphLaw

__all__ = ["initial_embedding"]


def initial_embedding(init, X, mean, input_graph, n_components: int, init_scale,
                      precomputed: str | None, gen: torch.Generator) -> torch.Tensor:
    """The initial embedding ``init`` (a name or an array) of the graph-coupling fit of ``X``
    with input-graph mean ``mean`` (:func:`probdr.init.initialize`). Without features
    (``precomputed`` input) ``"pca"`` is classical MDS of dense distances, else spectral."""
    data, given = X, False
    if isinstance(X, GraphLaw):  # no features: the initialisers need the size only
        data = torch.empty(X.n, 0, dtype=torch.float64)
    if isinstance(init, str) and init == "pca" and precomputed is not None:
        import scipy.sparse as sp

        if precomputed == "distances" and not sp.issparse(X):
            from ..init import classical_mds

            data, given = classical_mds(X, n_components), True
        else:
            init = "spectral"
    if given:
        from ..init import pad_columns, rescale

        Z = pad_columns(data, n_components, gen)
        return rescale(Z, init_scale, gen)
    return initialize(init, data, n_components, graph=mean, input_graph=input_graph,
                      scale=init_scale, generator=gen)
