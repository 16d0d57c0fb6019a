"""How a reader follows a fit through ``probdr/estimators/``: the files visited in call order
(``benchmarks/file_switches.py``). UMAP's fit resolves its configuration once and visits each
layer about once: at most 10 switches between files (there were 34 before the presets became
declarations and the configuration one step)."""

import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


@pytest.fixture(scope="module")
def file_switches():
    sys.path.insert(0, BENCH)
    try:
        import file_switches
    finally:
        sys.path.pop(0)
    return file_switches


@pytest.mark.parametrize("name, most", [("UMAP", 10), ("LargeVis", 10), ("TSNE", 11),
                                        ("GraphCoupling", 11)])
def test_a_fit_visits_each_layer_about_once(file_switches, digits_small, name, most):
    import probdr

    X, _ = digits_small
    est = getattr(probdr, name)(random_state=0, **({"n_iter": 20} if name != "UMAP" else
                                                  {"n_epochs": 5}))
    path = file_switches.visited_files(lambda: est.fit_transform(X[:120]))
    assert len(path) - 1 <= most, " -> ".join(path)
    assert path[0] == "base.py" and path[-1] == "base.py"
