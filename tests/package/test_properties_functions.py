"""Property-based tests (hypothesis) over the public functions of the modelling layer: random
shapes (0-D to 3-D, empty), dtypes, scales and values (NaN, inf, negative), numpy and torch. Each
call ends in a ``ValueError``/``TypeError`` from probdr's own checks or in a finite result (every
tensor, array or number it returns is finite). The default profile runs a few derandomized
examples per function; the ``slow`` one many more."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import probdr
from probdr import metrics, ot
from probdr.input import affinities, graph, neighbors
from probdr.laws import components
from probdr.ot import costs

EXAMPLES = {"fast": 12, "slow": 150}
PROFILES = [pytest.param("fast", id="fast"),
            pytest.param("slow", id="slow", marks=pytest.mark.slow)]

#: name -> call on one array argument (the array may be anything the strategy draws)
FUNCTIONS = {
    "affinities.entropic_affinity": lambda a: affinities.entropic_affinity(a, 2.0),
    "affinities.entropic_bandwidths": lambda a: affinities.entropic_bandwidths(a, 2.0),
    "affinities.umap_membership": affinities.umap_membership,
    "affinities.binary_knn": affinities.binary_knn,
    "affinities.perplexity_of_rows": affinities.perplexity_of_rows,
    "build_input_graph": lambda a: probdr.build_input_graph(a, "D", perplexity=2.0),
    "build_input_graph(umap)": lambda a: probdr.build_input_graph(a, "B", "umap", n_neighbors=3),
    "precomputed_input_graph": graph.precomputed_input_graph,
    "knn_laplacian": lambda a: graph.knn_laplacian(a, 2),
    "euclidean_distance_matrix": graph.euclidean_distance_matrix,
    "geodesic_distances": graph.geodesic_distances,
    "dense_cost": graph.dense_cost,
    "sea_affinity": lambda a: graph.sea_affinity(a, 2.0),
    "neighbors.knn": lambda a: neighbors.knn(a, 2),
    "components.batch_memberships": components.batch_memberships,
    "components.component_statistics": components.component_statistics,
    "components.laplacian": components.laplacian,
    "components.connected_components": components.connected_components,
    "ot.symmetric_entropic": lambda a: ot.symmetric_entropic(a, 2.0),
    "ot.entropic_affinity_matrix": lambda a: ot.entropic_affinity_matrix(a, 2.0),
    "ot.sinkhorn_affinity": ot.sinkhorn_affinity,
    "ot.row_perplexity": ot.entropic.row_perplexity,
    "costs.stress": lambda a: costs.stress(a, a),
    "costs.pearson_distance_correlation": lambda a: costs.pearson_distance_correlation(a, a),
    "metrics.trustworthiness": lambda a: metrics.trustworthiness(a, a, k=1),
    "metrics.knn_accuracy": lambda a: metrics.knn_accuracy(a, np.arange(len(a)) % 2, k=1),
    "metrics.rnx": lambda a: metrics.rnx(a, a, 1),
}


@st.composite
def arrays(draw):
    ndim = draw(st.sampled_from([0, 1, 2, 2, 2, 2, 3]))
    n = draw(st.integers(0, 9))
    shape = {0: (), 1: (n,), 2: (n, draw(st.sampled_from([n, n, 1, 2, 3]))),
             3: (draw(st.integers(1, 2)), n, n)}[ndim]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    a = rng.normal(size=shape) * 10.0 ** draw(st.integers(-3, 3))
    if draw(st.booleans()):
        a = np.abs(a)  # distances, weights
    if a.size and draw(st.integers(0, 4)) == 0:
        a.flat[draw(st.integers(0, a.size - 1))] = draw(st.sampled_from([np.nan, np.inf, -1.0]))
    dtype = draw(st.sampled_from(["float64", "float64", "float32", "int64", "bool"]))
    a = a > 0 if dtype == "bool" else a.astype(dtype) if dtype != "int64" else np.round(
        np.nan_to_num(a)).astype(np.int64)
    return torch.from_numpy(np.ascontiguousarray(a)) if draw(st.booleans()) else a


def _finite(out) -> bool:
    if isinstance(out, (torch.Tensor, np.ndarray)):
        t = torch.as_tensor(out.to_dense() if getattr(out, "is_sparse", False) else out)
        return bool(torch.isfinite(t.to(torch.float64) if t.is_floating_point() else
                                    t.double()).all()) if t.numel() else True
    if isinstance(out, (float, int, np.floating, np.integer)):
        return bool(np.isfinite(out))
    if isinstance(out, (tuple, list)):
        return all(_finite(o) for o in out)
    if dataclasses.is_dataclass(out):
        return all(_finite(getattr(out, f.name)) for f in dataclasses.fields(out))
    return True  # laws and other objects: built without error


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_clear_error_or_finite_result(name, profile):
    func = FUNCTIONS[name]

    @settings(max_examples=EXAMPLES[profile], derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(arrays())
    def prop(a):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                out = func(a)
            except (ValueError, TypeError):
                return
        assert _finite(out), (name, a)

    prop()
