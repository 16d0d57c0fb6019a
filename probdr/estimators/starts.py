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
again.

The **E** and **D** laws give the kernel only up to a normaliser (all cells', each row's): the
pair drawn :math:`c_{ij} = \omega (w_{ij} + w_{ji})` times has
:math:`\mathbb{E}\, c_{ij} \propto k_{ij}` (for the D law, up to the two rows' sums). The
lengths of the drawn pairs are the kernel inverted at :math:`\log c_{ij}`, shifted so that the
most drawn pair lies at unit distance (:func:`relative_log_kernel`); a second shape counts hops
instead (every drawn pair at unit length: at small :math:`\omega` nearly every pair is drawn once
and the counts say little). Their shortest paths and classical MDS give two shapes whose scale the
graph leaves open, so each is scaled to the highest posterior density on a geometric ladder of
scales (the ``score`` of :func:`geodesic_starts`), then tried at :data:`GEODESIC_SCALES` around it:
:math:`2 \times 3` starts again. (A third shape, the counts divided by the normalisers read
off the better of the two, reached poorer modes on the laws' simulated data.) Without a
``score`` these laws get no starts.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..init import classical_mds

__all__ = ["geodesic_starts", "law_log_kernel", "relative_log_kernel", "kernel_distance",
           "GEODESIC_NEIGHBOURS", "GEODESIC_SCALES", "GEODESIC_MAX_POINTS", "SCALE_LADDER"]

#: the heaviest edges per point of the second neighbourhood (the first: every pair)
GEODESIC_NEIGHBOURS = 20
#: the scales each MDS embedding is tried at
GEODESIC_SCALES = (0.7, 1.0, 1.4)
#: the largest graph the starts are computed for (all-pairs shortest paths: O(n^3) time)
GEODESIC_MAX_POINTS = 1000
#: bisection steps of :func:`kernel_distance` (in log d^2 over [-30, 30]: 60 / 2^60 at the end)
BISECTION_STEPS = 60
#: the scales (of a shape of unit RMS radius) on which the E and D laws' starts are scored: powers
#: of sqrt(2) from 1/8 to 2,048
SCALE_LADDER = tuple(2.0 ** (k / 2) for k in range(-6, 23))
#: the laws whose graph gives the kernel's values up to a normaliser
RELATIVE_LAWS = ("E", "D")


def law_log_kernel(kind: str, W: torch.Tensor, weight: float) -> torch.Tensor | None:
    r"""The kernel's values :math:`\log \hat k_{ij}` that the observed graph ``W`` (dense, the
    average of ``weight`` graphs) estimates under the latent law ``kind`` (the module's
    docstring): the B law's log odds of the shrunk edge frequency; ``None`` for a law that
    gives the kernel only up to a normaliser."""
    if kind != "B":
        return None  # E, D: relative_log_kernel
    p = (weight * W.clamp(0.0, 1.0) + 0.5) / (weight + 1.0)
    return p.log() - (-p).log1p()


def relative_log_kernel(W: torch.Tensor, weight: float, kernel) -> torch.Tensor:
    r"""The E and D laws' kernel values up to their normaliser (the module's docstring):
    :math:`\log c_{ij}` of the pairs drawn :math:`c_{ij} = \omega (w_{ij} + w_{ji}) > 0` times,
    shifted so that the most drawn pair has the kernel's value at unit distance; ``-inf`` where
    the pair was not drawn (no length: not in the graph)."""
    counts = (weight * (W + W.T)).fill_diagonal_(0.0)  # a self-pair is no length
    drawn = counts > 0
    log_c = torch.where(drawn, counts.clamp_min(1e-300).log(), torch.full_like(W, -math.inf))
    unit = kernel.log_k(torch.ones((), dtype=W.dtype))
    return log_c - log_c.max() + unit


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
                    n_components: int, score=None) -> list[torch.Tensor]:
    """The starts of the module's docstring (float64 ``(n, n_components)``); ``score(Z)`` is the
    posterior's log density, which sets the scale of the E and D laws' starts (none of theirs
    without it). None where the graph has more than :data:`GEODESIC_MAX_POINTS` nodes."""
    n = W.shape[0]
    if n > GEODESIC_MAX_POINTS or n <= n_components + 1:
        return []
    W = (W.to_dense() if W.is_sparse else W).detach().to("cpu", torch.float64)
    if kind in RELATIVE_LAWS:
        return _relative_starts(W, kernel, float(weight), n_components, score)
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


def _relative_starts(W: torch.Tensor, kernel, weight: float, n_components: int,
                     score) -> list[torch.Tensor]:
    """The E and D laws' starts: two shapes (the drawn pairs' lengths, their hops), each at the
    scale of highest ``score`` on :data:`SCALE_LADDER` times :data:`GEODESIC_SCALES`."""
    if score is None:
        return []
    log_k = relative_log_kernel(W, weight, kernel)
    drawn = torch.isfinite(log_k)
    drawn.fill_diagonal_(False)
    if not bool(drawn.any()):
        return []
    lengths = kernel_distance(kernel, torch.where(drawn, log_k, 0.0).clamp_min(-600.0))
    starts = []
    for L in (torch.where(drawn, lengths, torch.zeros_like(lengths)), drawn.to(W.dtype)):
        Z = classical_mds(torch.as_tensor(_shortest_paths(L.numpy())), n_components)
        rms = Z.square().sum(1).mean().sqrt()
        if bool(rms > 0):
            c = _best_scale(Z / rms, score)
            starts += [c * f * Z / rms for f in GEODESIC_SCALES]
    return starts


def _best_scale(Z: torch.Tensor, score) -> float:
    """The scale of :data:`SCALE_LADDER` at which ``score`` is highest (1 where it is nowhere
    finite)."""
    density = np.array([score(c * Z) for c in SCALE_LADDER], dtype=np.float64)
    if not np.isfinite(density).any():
        return 1.0
    return SCALE_LADDER[int(np.argmax(np.where(np.isfinite(density), density, -np.inf)))]
