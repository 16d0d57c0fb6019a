r"""Global starts of the multi-start mode search, read off the observed graph.

A cold posterior has many basins, and a MAP schedule started near the origin (or from the
graph's spectral embedding) can end folded: hundreds to thousands of nats below the best basin,
where a sampler's chains then stay. The observed graph itself says how far apart the points
are wherever the latent law gives the kernel's values, not only their ranks. Under the
**B** law (independent Bernoulli cells of probability :math:`k/(1+k)`) the average
:math:`w_{ij}` of :math:`\omega` graphs estimates the edge probability, so

.. math:: \hat k_{ij} = \frac{\hat p_{ij}}{1 - \hat p_{ij}},\qquad
          \hat p_{ij} = \frac{\omega w_{ij} + \tfrac12}{\omega + 1}

(the Krichevsky-Trofimov estimate, finite for cells drawn 0 or :math:`\omega` times), and
inverting the kernel gives a length :math:`d_{ij} = k^{-1}(\hat k_{ij})` in the embedding's own
units. :func:`geodesic_starts` takes Isomap's steps on these lengths: the shortest paths through
the graph (the noisy long lengths replaced by sums of better-measured short ones), then classical
MDS. Two neighbourhoods (every pair; each point's :data:`GEODESIC_NEIGHBOURS` heaviest edges)
and three scales of each (shortest paths shrink or stretch distances) give
:math:`2 \times 3` starts, each searched to its mode by
:func:`~probdr.infer.mode.converge_mode` directly: the MAP schedule's early phases fold them
again. The **E** and **D** laws give the kernel only up to a normaliser (all cells', each
row's), which these starts do not estimate: no starts there (:func:`law_log_kernel`).
"""

from __future__ import annotations

import numpy as np
import torch

from ..init import classical_mds

__all__ = ["geodesic_starts", "law_log_kernel", "kernel_distance", "GEODESIC_NEIGHBOURS",
           "GEODESIC_SCALES", "GEODESIC_MAX_POINTS"]

#: the heaviest edges per point of the second neighbourhood (the first: every pair)
GEODESIC_NEIGHBOURS = 20
#: the scales each MDS embedding is tried at
GEODESIC_SCALES = (0.7, 1.0, 1.4)
#: the largest graph the starts are computed for (all-pairs shortest paths: O(n^3) time)
GEODESIC_MAX_POINTS = 1000
#: bisection steps of :func:`kernel_distance` (in log d^2 over [-30, 30]: 60 / 2^60 at the end)
BISECTION_STEPS = 60


def law_log_kernel(kind: str, W: torch.Tensor, weight: float) -> torch.Tensor | None:
    r"""The kernel's values :math:`\log \hat k_{ij}` that the observed graph ``W`` (dense, the
    average of ``weight`` graphs) estimates under the latent law ``kind`` (the module's
    docstring): the B law's log odds of the shrunk edge frequency; ``None`` for a law that
    gives the kernel only up to a normaliser."""
    if kind != "B":
        return None
    p = (weight * W.clamp(0.0, 1.0) + 0.5) / (weight + 1.0)
    return p.log() - (-p).log1p()


def kernel_distance(kernel, log_k: torch.Tensor) -> torch.Tensor:
    r"""The distance :math:`d` with :math:`\log k(d^2)` = ``log_k``, elementwise, by bisection
    in :math:`\log d^2` (the kernel decreasing in :math:`d^2`); clipped to
    :math:`[e^{-15}, e^{15}]`."""
    lo, hi = torch.full_like(log_k, -30.0), torch.full_like(log_k, 30.0)
    with torch.no_grad():
        for _ in range(BISECTION_STEPS):
            mid = (lo + hi) / 2
            near = kernel.log_k(mid.exp()) > log_k  # k too large: the distance is further out
            lo, hi = torch.where(near, mid, lo), torch.where(near, hi, mid)
    return ((lo + hi) / 2).exp().sqrt()


def _shortest_paths(lengths: np.ndarray) -> np.ndarray:
    """All-pairs shortest paths (a zero length: no edge); a pair in two components gets the
    longest finite path."""
    from scipy.sparse.csgraph import shortest_path

    D = shortest_path(lengths, directed=False)
    finite = np.isfinite(D)
    D[~finite] = D[finite].max()
    return D


def geodesic_starts(W: torch.Tensor, kernel, kind: str, weight: float,
                    n_components: int) -> list[torch.Tensor]:
    """The starts of the module's docstring (float64 ``(n, n_components)``), none where the law
    gives no kernel values or the graph has more than :data:`GEODESIC_MAX_POINTS` nodes."""
    n = W.shape[0]
    if n > GEODESIC_MAX_POINTS or n <= n_components + 1:
        return []
    W = (W.to_dense() if W.is_sparse else W).detach().to("cpu", torch.float64)
    log_k = law_log_kernel(kind, W, float(weight))
    if log_k is None:
        return []
    lengths = kernel_distance(kernel, log_k)
    lengths = 0.5 * (lengths + lengths.T)
    lengths.fill_diagonal_(0.0)
    heaviest = torch.argsort(-W, dim=1)[:, :min(GEODESIC_NEIGHBOURS, n - 1)]
    keep = torch.zeros_like(W, dtype=torch.bool).scatter_(1, heaviest, True)
    keep = (keep | keep.T) & (W > 0)
    starts = []
    for L in (lengths, torch.where(keep, lengths, torch.zeros_like(lengths))):
        Z = classical_mds(torch.as_tensor(_shortest_paths(L.numpy())), n_components)
        starts += [c * Z for c in GEODESIC_SCALES]
    return starts
