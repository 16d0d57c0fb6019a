"""The estimators: each chooses a model, builds its inputs through :mod:`probdr.input` and calls
a driver of :mod:`probdr.infer`."""

from ..input.graph import build_input_graph  # its earlier home
from .ccpca import ccPCA
from .coupling import GraphCoupling
from .distr import DistR
from .gwmds import GWMDS
from .presets import SNE, TSNE, UMAP, LargeVis
from .probdr import ProbDR
from .snekhorn import SNEkhorn, TSNEkhorn
from .wishart import LaplacianWishart, WishartEigenmaps, WishartPCA

__all__ = ["GraphCoupling", "SNE", "TSNE", "LargeVis", "UMAP", "WishartPCA", "ccPCA",
           "LaplacianWishart", "WishartEigenmaps", "SNEkhorn", "TSNEkhorn", "DistR", "GWMDS", "ProbDR",
           "build_input_graph"]
