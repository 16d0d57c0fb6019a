"""Inference drivers: MAP (:func:`run_map` with scheduled optimisers, :func:`map_estimate` with
L-BFGS or Adam) and posteriors by SVI or NUTS (:mod:`.posterior`)."""

from ..optim import SGD, Adam, GainsMomentum
from .draws import PointSummary, point_summary
from .map import MAPFit, MAPResult, Phase, RelativeChange, fit_callbacks, map_estimate, run_map

__all__ = ["Phase", "MAPResult", "MAPFit", "RelativeChange", "run_map", "map_estimate",
           "fit_callbacks", "point_summary", "PointSummary", "GainsMomentum", "SGD", "Adam"]
