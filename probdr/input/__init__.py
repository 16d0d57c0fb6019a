"""The input side of every family: X -> neighbours (:mod:`.neighbors`) -> affinities
(:mod:`.affinities`) -> input graph (:mod:`.graph`), owned for one fit and its new points by
one object, :class:`InputGraph` (:mod:`.calibration`)."""

from . import affinities, calibration, graph, neighbors
from .calibration import InputGraph
from .graph import *  # noqa: F403

__all__ = ["affinities", "calibration", "graph", "neighbors", "InputGraph", *graph.__all__]
