"""probdr: dimensionality reduction as probabilistic programs on Pyro."""

from . import affinities, config, datasets, graphs, kernels, metrics, neighbors
from .estimators import SNE, TSNE, UMAP, GraphCoupling, LargeVis, build_input_graph

__version__ = "0.1.0"

__all__ = ["GraphCoupling", "SNE", "TSNE", "LargeVis", "UMAP", "build_input_graph",
           "affinities", "config", "datasets", "graphs", "kernels", "metrics", "neighbors"]
