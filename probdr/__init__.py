"""probdr: dimensionality reduction as probabilistic programs on Pyro.

Layout, one way from bottom to top: solvers (:mod:`probdr.ot`, kernels, pairwise sums) -> graph
and Wishart laws (:mod:`probdr.laws`) -> the input side (:mod:`probdr.input`) -> the Pyro models
(:mod:`probdr.models`) -> inference (:mod:`probdr.infer`) -> estimators
(:mod:`probdr.estimators`) -> diagnostics, metrics, plots and the command line.
"""

import sys as _sys

from . import (
    config,
    datasets,
    diagnostics,
    estimators,
    infer,
    input,
    kernels,
    laws,
    metrics,
    ot,
    plotting,
)
from .estimators import (
    GWMDS,
    SNE,
    TSNE,
    UMAP,
    DistR,
    GraphCoupling,
    LaplacianWishart,
    LargeVis,
    ProbDR,
    SNEkhorn,
    TSNEkhorn,
    WishartEigenmaps,
    WishartPCA,
    ccPCA,
)
from .input import affinities, neighbors
from .input.graph import build_input_graph
from .laws import edge_priors as priors
from .serialize import load

#: the graph laws and priors, under their earlier module name
graphs = laws
#: the plots of the Bayesian workflow, under their earlier module name
plotting_bayes = plotting
# the earlier module names stay importable (``from probdr.graphs import GraphLaw``)
for _old, _module in {"graphs": laws, "priors": priors, "neighbors": neighbors,
                      "affinities": affinities, "plotting_bayes": plotting}.items():
    _sys.modules[f"{__name__}.{_old}"] = _module
del _old, _module

__version__ = "0.1.0"

__all__ = [
    "load", "GraphCoupling", "SNE", "TSNE", "LargeVis", "UMAP", "build_input_graph",
    "WishartPCA", "ccPCA", "LaplacianWishart", "WishartEigenmaps",
    "SNEkhorn", "TSNEkhorn", "DistR", "GWMDS", "ProbDR",
    "affinities", "config", "datasets", "diagnostics", "graphs", "kernels", "metrics",
    "neighbors", "plotting_bayes", "priors", "estimators", "infer", "input", "laws", "ot",
    "plotting",
]
