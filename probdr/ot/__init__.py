"""Optimal-transport solvers: entropic and symmetric entropic affinities (SEA), symmetric
Sinkhorn, the semi-relaxed Gromov--Wasserstein energy, and the cost helpers. Solvers only: the
doubly stochastic graph law is in :mod:`probdr.laws`, the estimators (SNEkhorn, DistR, GW-MDS)
in :mod:`probdr.estimators`. See ``docs/ot.md``."""

from .costs import pearson_distance_correlation, stress
from .entropic import (
    SEAConvergenceWarning,
    bisect_log_beta,
    entropic_affinity_matrix,
    row_entropy,
    row_perplexity,
)
from .sea import symmetric_entropic
from .sinkhorn import sinkhorn_affinity, sinkhorn_kernel_domain, symmetric_sinkhorn
from .srgw import srgw_gradient, srgw_objective

__all__ = [
    "symmetric_entropic", "entropic_affinity_matrix", "sinkhorn_affinity", "symmetric_sinkhorn",
    "sinkhorn_kernel_domain", "row_perplexity", "row_entropy", "bisect_log_beta",
    "SEAConvergenceWarning", "srgw_objective", "srgw_gradient", "pearson_distance_correlation",
    "stress",
]
