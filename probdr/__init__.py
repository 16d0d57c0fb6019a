"""probdr: dimensionality reduction as probabilistic programs on Pyro.

Layout, one way from bottom to top: solvers (:mod:`probdr.ot`, kernels, pairwise sums) -> graph
and Wishart laws (:mod:`probdr.laws`) -> the input side (:mod:`probdr.input`) -> the Pyro models
(:mod:`probdr.models`) -> inference (:mod:`probdr.infer`) -> estimators
(:mod:`probdr.estimators`) -> diagnostics, metrics, plots and the command line.
"""

import sys as _sys
import types as _types

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
from .input import affinities
from .input.graph import build_input_graph
from .serialize import load

_sys.modules[f"{__name__}.affinities"] = affinities  # ``import probdr.affinities``

#: names of 0.1.0 that moved: ``old -> new module``; importable for one more release, with a
#: ``DeprecationWarning`` naming the new path at each use (``probdr.graphs.GraphLaw``, ``from
#: probdr.priors import from_labels``, ``import probdr.neighbors``)
MOVED = {"graphs": "probdr.laws", "priors": "probdr.laws.edge_priors",
         "neighbors": "probdr.input.neighbors", "plotting_bayes": "probdr.plotting",
         "posterior_graphs": "probdr.laws.components"}


class _MovedModule(_types.ModuleType):
    """The old name of a moved module: every attribute read warns and is read from the new one."""

    def __init__(self, old: str, new: str):
        super().__init__(f"{__name__}.{old}", f"Moved to {new}; this name will be removed.")
        self.__moved_to__ = new

    def __getattr__(self, attr):
        import importlib
        import warnings

        if attr.startswith("__"):
            raise AttributeError(attr)
        warnings.warn(f"{self.__name__} moved to {self.__moved_to__}; use "
                      f"{self.__moved_to__}.{attr} (the old name will be removed in the next "
                      "release).", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(self.__moved_to__), attr)


for _old, _new in MOVED.items():
    _sys.modules[f"{__name__}.{_old}"] = globals()[_old] = _MovedModule(_old, _new)
del _old, _new


__version__ = "0.1.0"

__all__ = [
    "load", "GraphCoupling", "SNE", "TSNE", "LargeVis", "UMAP", "build_input_graph",
    "WishartPCA", "ccPCA", "LaplacianWishart", "WishartEigenmaps",
    "SNEkhorn", "TSNEkhorn", "DistR", "GWMDS", "ProbDR",
    "affinities", "config", "datasets", "diagnostics", "kernels", "metrics",
    "estimators", "infer", "input", "laws", "ot", "plotting",
]
