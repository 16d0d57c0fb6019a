"""Optimal-transport DR: symmetric entropic affinities (SNEkhorn), DistR, GW-MDS.

See ``docs/ot.md``. Public names:

* affinities: :func:`symmetric_entropic`, :func:`entropic_affinity_matrix`,
  :func:`sinkhorn_affinity`, :func:`symmetric_sinkhorn`, :func:`row_perplexity`;
* estimators: :class:`SNEkhorn`, :class:`TSNEkhorn`, :class:`DistR`, :class:`GWMDS`;
* graph law: :class:`DoublyStochasticPrior`, :class:`DoublyStochasticGraph`;
* metrics: :func:`pearson_distance_correlation`, :func:`stress`.
"""

from ._common import pearson_distance_correlation, stress
from .distr import DistR, srgw_gradient, srgw_objective
from .gwmds import GWMDS, geodesic_distances
from .sea import (
    SEAConvergenceWarning,
    entropic_affinity_matrix,
    row_perplexity,
    sinkhorn_affinity,
    symmetric_entropic,
    symmetric_sinkhorn,
)

_LAZY = {"SNEkhorn", "TSNEkhorn", "DoublyStochasticPrior", "DoublyStochasticGraph"}


def __getattr__(name):
    # SNEkhorn builds on probdr.estimators, which imports probdr.affinities; importing it lazily
    # lets probdr.affinities re-export symmetric_entropic without an import cycle
    if name in _LAZY:
        from . import snekhorn

        return getattr(snekhorn, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "symmetric_entropic", "entropic_affinity_matrix", "sinkhorn_affinity", "symmetric_sinkhorn",
    "row_perplexity", "SEAConvergenceWarning",
    "SNEkhorn", "TSNEkhorn", "DoublyStochasticPrior", "DoublyStochasticGraph",
    "DistR", "srgw_objective", "srgw_gradient",
    "GWMDS", "geodesic_distances",
    "pearson_distance_correlation", "stress",
]
