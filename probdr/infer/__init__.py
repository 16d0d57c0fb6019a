"""Inference drivers: MAP (AutoDelta + scheduled optimisers)."""

from .map import MAPResult, Phase, run_map
from .optim import GainsMomentum

__all__ = ["Phase", "MAPResult", "run_map", "GainsMomentum"]
