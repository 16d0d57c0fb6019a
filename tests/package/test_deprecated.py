"""Names of 0.1.0 that moved keep working for one release, each use warning with the new path
(CHANGELOG.md lists them)."""

import importlib
import warnings

import pytest

import probdr

MOVED = [("graphs", "probdr.laws", "GraphLaw"),
         ("priors", "probdr.laws.edge_priors", "from_labels"),
         ("neighbors", "probdr.input.neighbors", "knn"),
         ("plotting_bayes", "probdr.plotting", "plot_embedding"),
         ("posterior_graphs", "probdr.laws.components", "sample_memberships")]


@pytest.mark.parametrize("old, new, attr", MOVED)
def test_moved_module_warns_and_forwards(old, new, attr):
    target = getattr(importlib.import_module(new), attr)
    with pytest.warns(DeprecationWarning, match=rf"probdr\.{old} moved to {new}; use {new}\.{attr}"):
        assert getattr(getattr(probdr, old), attr) is target
    with pytest.warns(DeprecationWarning, match=f"{new}.{attr}"):
        assert getattr(importlib.import_module(f"probdr.{old}"), attr) is target
    with pytest.warns(DeprecationWarning):
        ns = {}
        exec(f"from probdr.{old} import {attr}", ns)
        assert ns[attr] is target


def test_missing_name_of_a_moved_module_is_an_attribute_error():
    with pytest.raises(AttributeError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probdr.graphs.no_such_thing  # noqa: B018


def test_star_import_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        exec("from probdr import *", {})


@pytest.mark.parametrize("name, new", [("symmetric_entropic", "probdr.ot"),
                                       ("sinkhorn_affinity", "probdr.ot.sinkhorn")])
def test_moved_affinity_functions(name, new):
    """probdr.affinities.symmetric_entropic / sinkhorn_affinity warn and give the new function's
    result."""
    import torch

    X = torch.randn(30, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    C = torch.cdist(X, X).square()
    new_func = getattr(importlib.import_module(new), name)
    with pytest.warns(DeprecationWarning, match=f"moved to {new}.{name}"):
        old = getattr(probdr.affinities, name)(C, 5.0)
    expected = new_func(C, 5.0)
    old, expected = (old[0], expected[0]) if isinstance(old, tuple) else (old, expected)
    assert torch.equal(old, expected)
