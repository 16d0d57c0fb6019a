"""Inference drivers: MAP (AutoDelta + scheduled optimisers)."""

from .map import MAPResult, Phase, run_map
from .optim import SGD, Adam, GainsMomentum

__all__ = ["Phase", "MAPResult", "run_map", "GainsMomentum", "SGD", "Adam"]
