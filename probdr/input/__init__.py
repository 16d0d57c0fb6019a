"""The input side of every family: X -> neighbours (:mod:`.neighbors`) -> affinities
(:mod:`.affinities`) -> input graph (:mod:`.graph`)."""

from . import affinities, graph, neighbors
from .graph import *  # noqa: F403

__all__ = ["affinities", "graph", "neighbors", *graph.__all__]
