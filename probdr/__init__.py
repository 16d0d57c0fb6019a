"""probdr: dimensionality reduction as probabilistic programs on Pyro."""

from . import (
               affinities,
               config,
               datasets,
               diagnostics,
               graphs,
               kernels,
               metrics,
               neighbors,
               plotting_bayes,
               priors,
)
from .ccpca import ccPCA
from .estimators import SNE, TSNE, UMAP, GraphCoupling, LargeVis, build_input_graph
from .ot.distr import DistR
from .ot.gwmds import GWMDS
from .ot.snekhorn import SNEkhorn, TSNEkhorn
from .wishart_estimators import LaplacianWishart, WishartEigenmaps, WishartPCA

__version__ = "0.1.0"

__all__ = [
    "GraphCoupling", "SNE", "TSNE", "LargeVis", "UMAP", "build_input_graph",
    "WishartPCA", "ccPCA", "LaplacianWishart", "WishartEigenmaps",
    "SNEkhorn", "TSNEkhorn", "DistR", "GWMDS",
    "affinities", "config", "datasets", "diagnostics", "graphs", "kernels", "metrics",
    "neighbors", "plotting_bayes", "priors",
]
