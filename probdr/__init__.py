"""probdr: dimensionality reduction as probabilistic programs on Pyro.

Layout, one way from bottom to top: solvers (:mod:`probdr.ot`, kernels, pairwise sums) -> graph
and Wishart laws (:mod:`probdr.laws`) -> the input side (:mod:`probdr.input`) -> the Pyro models
(:mod:`probdr.models`) -> inference (:mod:`probdr.infer`) -> estimators
(:mod:`probdr.estimators`) -> diagnostics, metrics, plots and the command line.

``import probdr`` imports none of its layers: each public name and module is imported at its first
use (``probdr.TSNE`` imports torch, Pyro and scikit-learn, whose ``BaseEstimator`` the estimators
subclass); plotting (matplotlib), ArviZ, igraph, POT and anndata are imported by the functions
that use them. The ``probdr`` command parses and checks its arguments with the standard library,
then imports what the fit needs.
"""

import sys as _sys
import types as _types
import typing as _typing

from ._version import __version__ as __version__

#: the public names, each imported at its first use (PEP 562): ``name -> module``
_LAZY = {
    **dict.fromkeys(("GWMDS", "SNE", "TSNE", "UMAP", "DistR", "GraphCoupling", "LaplacianWishart",
                     "LargeVis", "ProbDR", "SNEkhorn", "TSNEkhorn", "WishartEigenmaps",
                     "WishartPCA", "ccPCA"), "probdr.estimators"),
    "build_input_graph": "probdr.input.graph",
    "load": "probdr.serialize",
}
#: the subpackages and modules reachable as attributes of ``probdr``, imported at first use
_SUBMODULES = ("affinities", "anndata", "config", "datasets", "diagnostics", "estimators", "infer",
               "input", "kernels", "laws", "metrics", "ot", "plotting", "serialize")


def __getattr__(name: str):
    """Import a public name or module at its first use: ``import probdr`` itself loads nothing
    (``probdr --help`` and ``import probdr`` answer at once); ``probdr.TSNE`` imports torch,
    Pyro, scikit-learn and the estimators."""
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))


if _typing.TYPE_CHECKING:  # what the names are, for type checkers and editors
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


__all__ = [
    "load", "GraphCoupling", "SNE", "TSNE", "LargeVis", "UMAP", "build_input_graph",
    "WishartPCA", "ccPCA", "LaplacianWishart", "WishartEigenmaps",
    "SNEkhorn", "TSNEkhorn", "DistR", "GWMDS", "ProbDR",
    "affinities", "config", "datasets", "diagnostics", "kernels", "metrics",
    "estimators", "infer", "input", "laws", "ot", "plotting",
]
