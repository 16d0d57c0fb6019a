"""probdr: dimensionality reduction as probabilistic programs on Pyro.

Layout, one way from bottom to top: solvers (:mod:`probdr.ot`, kernels, pairwise sums) -> graph
and Wishart laws (:mod:`probdr.laws`) -> the input side (:mod:`probdr.input`) -> the Pyro models
(:mod:`probdr.models`) -> inference (:mod:`probdr.infer`) -> estimators
(:mod:`probdr.estimators`) -> diagnostics, metrics, plots and the command line.

``import probdr`` imports torch, Pyro and scikit-learn (the estimators subclass its
``BaseEstimator``); plotting (matplotlib), ArviZ, igraph, POT and anndata are imported by the
functions that use them. In the process of the ``probdr`` command (its console script,
``python -m probdr`` or ``python -m probdr.cli``) the package imports none of its layers: the
command parses and checks its arguments with the standard library, then imports what the fit
needs.
"""

import sys as _sys
import types as _types

from ._version import __version__ as __version__


def _started_as_the_command() -> bool:
    """Whether this process is the ``probdr`` command: its console script (``sys.argv[0]`` is
    ``probdr``, ``probdr.exe`` or ``probdr-script.py`` while the package is imported), or
    ``python [options] -m probdr`` or ``-m probdr.cli`` (``torchrun -m probdr.cli``, the ranks of
    ``--nproc``)."""
    import os

    script = os.path.basename(_sys.argv[0]) if _sys.argv else ""
    if script in ("probdr", "probdr.exe", "probdr-script.py", "probdr-script.pyw"):
        return True
    args = iter(getattr(_sys, "orig_argv", [])[1:])  # the interpreter's own options first
    for arg in args:
        if arg in ("-X", "-W", "--check-hash-based-pycs"):
            next(args, None)  # an option's value
        elif arg.startswith("-m"):
            return (arg[2:] or next(args, "")) in ("probdr", "probdr.cli")
        elif arg in ("-c", "-", "--") or not arg.startswith("-"):
            return False  # a command string, standard input or a script
    return False


# The command parses its arguments and checks its paths with the standard library alone, then
# imports the layers it uses (so ``probdr --help`` answers at once); everywhere else ``import
# probdr`` gives the whole public API below.
if not _started_as_the_command():
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


__all__ = [
    "load", "GraphCoupling", "SNE", "TSNE", "LargeVis", "UMAP", "build_input_graph",
    "WishartPCA", "ccPCA", "LaplacianWishart", "WishartEigenmaps",
    "SNEkhorn", "TSNEkhorn", "DistR", "GWMDS", "ProbDR",
    "affinities", "config", "datasets", "diagnostics", "kernels", "metrics",
    "estimators", "infer", "input", "laws", "ot", "plotting",
]
