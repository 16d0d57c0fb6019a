"""Facts the user docs quote, checked against the code: the AnnData keys of a posterior fit, the
automatic coupling weight, and the message that lists scanpy's neighbour graphs."""

import pathlib
import re

import numpy as np
import pytest
import torch

import probdr
from probdr.estimators.coupling_new_points import attraction_mass, auto_coupling_weight

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"


def _text(page):
    return (DOCS / page).read_text()


@pytest.fixture(scope="module")
def laplace_adata():
    anndata = pytest.importorskip("anndata")
    import probdr.anndata as pad

    X, _ = probdr.datasets.load("digits", n_samples=80)
    adata = anndata.AnnData(X.astype(np.float32))
    pad.embed(adata, "tsne", use_rep="X", inference="laplace", perplexity=10, n_iter=60,
              random_state=0)
    return adata


def test_uncertainty_and_anndata_pages_name_the_keys_a_laplace_fit_writes(laplace_adata):
    new_obsm = sorted(set(laplace_adata.obsm) - {"X_tsne"})
    assert new_obsm == ["X_tsne_std"] and list(laplace_adata.obs) == ["X_tsne_reliability",
                                                             "X_tsne_stability"]
    assert 'adata.obsm["X_tsne_std"]' in _text("uncertainty.md")
    assert "X_probdr_tsne_std" not in _text("uncertainty.md")
    rows = {r.split("|")[1].strip(): r for r in _text("anndata.md").splitlines()
            if r.startswith("| `adata.")}
    for key in ('`adata.obsm[key + "_std"]`', '`adata.obs[key + "_reliability"]`',
                '`adata.obs[key + "_stability"]`'):
        assert '"laplace"' in rows[key], key


def _auto_weight(est, n):
    X, _ = probdr.datasets.load("digits", n_samples=n)
    graph = est._make_input().check(*X.shape).fit(torch.as_tensor(X, dtype=torch.float64),
                                                  random_state=0)
    return auto_coupling_weight(est._make_kernel(), 2, attraction_mass(graph.mean))


def test_automatic_coupling_weight_quoted_in_the_docs():
    text = " ".join(_text("bayesian.md").split())
    m = re.search(r"at most 4 .*?: ([\d.]+) on 300 digits and ([\d.]+) on 1,000", text)
    assert m, "bayesian.md no longer quotes the automatic weight"
    for n, quoted in zip((300, 1000), m.groups(), strict=True):
        got = _auto_weight(probdr.TSNE(random_state=0), n)
        assert got <= 4 and round(got, len(quoted.split(".")[1])) == float(quoted)
    assert _auto_weight(probdr.UMAP(random_state=0), 1000) == 1.0


def test_neighbors_key_message_lists_scanpy_graphs_without_distances_key():
    anndata = pytest.importorskip("anndata")
    import scipy.sparse as sp

    import probdr.anndata as pad

    adata = anndata.AnnData(np.random.default_rng(0).normal(size=(30, 4)).astype(np.float32))
    adata.obsp["distances"] = sp.random(30, 30, density=0.2, format="csr", random_state=0)
    adata.uns["neighbors"] = {"params": {"n_neighbors": 6, "method": "umap"}}  # older scanpy
    with pytest.raises(KeyError, match=r"graphs found: \['neighbors'\]"):
        pad.embed(adata, "tsne", neighbors_key="nope", use_rep="X")
