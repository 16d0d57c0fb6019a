r"""The variance factor of an approximate posterior, measured for the fit at hand by simulation.

A per-point Gaussian (the mean-field guide of SVI, the per-point Laplace approximation) ignores
the correlations between points and the skew of a heavy-tailed posterior, so its regions are
too narrow by a factor that depends on the model, its temperature, its prior and the geometry
of the map: no table measured once holds for a model a user writes. :func:`calibrate_by_simulation`
measures it for the fit itself, as a parametric bootstrap does:

1. take the fitted mode :math:`\hat Z` as the truth;
2. simulate the data the model would have seen at :math:`\hat Z` (``simulate``: for a graph
   coupling, the observed graph drawn from its latent law at its temperature,
   :func:`probdr.laws.simulate.simulate_observed_graph`);
3. fit the same approximation to the simulated data (``refit``: the same mode search, prior,
   temperature and options, the factor 1);
4. score where :math:`\hat Z`, Procrustes-aligned to the refit's mean, falls in each point's
   Gaussian: the squared Mahalanobis distance :math:`d_i^2` under the refit's per-point mean and
   covariance, which is :math:`\chi^2_q` distributed when the approximation is calibrated.

The factor :math:`c` divides the :math:`d_i^2` so that the 50 % and 90 % regions hold their
share: :math:`c = \big(\prod_{\ell} Q_\ell(d^2) / \chi^2_{q,\ell}\big)^{1/2}`, the geometric mean
over the two levels of the ratio of the empirical quantile to the chi-square one (each level's
own factor where the :math:`d_i^2` are :math:`c\,\chi^2_q`). One replication scores every point of
the map; small maps take several (:func:`replications`), so that at least
:data:`CALIBRATION_POINTS` distances enter the quantiles. :class:`Calibration` records the
factor and the coverage of the simulated truth before and after it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import scipy.stats as st
import torch

from .draws import Posterior, procrustes_align

__all__ = ["Simulation", "Calibration", "calibrate_by_simulation", "coverage_factor", "mahalanobis_sq",
           "replications", "CALIBRATION_POINTS", "MAX_REPLICATIONS", "LEVELS"]

#: the credible levels the factor is matched at
LEVELS = (0.5, 0.9)
#: distances (points x replications) the quantiles are read from, at least
CALIBRATION_POINTS = 2000
#: replications at most (small maps)
MAX_REPLICATIONS = 10


@dataclass
class Simulation:
    """What a calibration needs of an estimator: ``draw(Z, generator)`` draws the data the
    model would have seen at ``Z``; ``kwargs(data)`` are the posterior's model arguments for
    them; ``map_fit(data)`` runs the estimator's MAP schedule on them from its start (``None``:
    the refit starts at the truth); ``scale``: the fitted likelihood's maps have another size
    than the law that draws the data (the truth is scaled onto each refit)."""
    draw: Callable[[torch.Tensor, torch.Generator], object]
    kwargs: Callable[[object], dict]
    map_fit: Callable[[object], torch.Tensor] | None = None
    scale: bool = False


@dataclass
class Calibration:
    #: the variance factor (1: the approximation was calibrated as it is)
    inflation: float
    #: coverage of the simulated truth by the 50 % and 90 % regions before the factor
    raw_coverage: tuple[float, float]
    #: the same after the factor (in-sample: the quantiles it was read from)
    coverage: tuple[float, float]
    #: simulated data sets, and the distances scored over them
    replications: int
    points: int
    seconds: float
    method: str = "simulation"

    def as_dict(self) -> dict:
        return asdict(self)


def replications(n: int, points: int = CALIBRATION_POINTS,
                 most: int = MAX_REPLICATIONS) -> int:
    """Replications for a map of ``n`` points: enough for ``points`` distances, at most
    ``most``, at least one."""
    return int(min(most, max(1, math.ceil(points / max(n, 1)))))


def mahalanobis_sq(truth: np.ndarray, posterior: Posterior, *, scale: bool = False) -> np.ndarray:
    r"""Each point's :math:`d_i^2 = (z_i - \mu_i)^\top \Sigma_i^{-1} (z_i - \mu_i)` for the truth
    ``truth`` (n, q), Procrustes-aligned to the posterior mean :math:`\mu` (and, with
    ``scale``, scaled onto it by least squares: a likelihood whose maps have another size than
    the law that drew the data), :math:`\Sigma_i` the per-point covariance of the draws."""
    mean, cov = posterior.mean, posterior.point_covariances()
    t = procrustes_align(truth, mean)
    if scale:
        tc, mc = t - t.mean(0), mean - mean.mean(0)
        t = mean.mean(0) + tc * float((tc * mc).sum() / max((tc * tc).sum(), 1e-300))
    r = t - mean
    return np.einsum("na,nab,nb->n", r, np.linalg.inv(cov), r)


def coverage_factor(d2: np.ndarray, q: int, levels=LEVELS) -> float:
    """The variance factor that brings the ``levels`` regions to their share for the squared
    distances ``d2`` in ``q`` dimensions (the module docstring's geometric mean)."""
    d2 = np.asarray(d2, dtype=np.float64)
    d2 = d2[np.isfinite(d2)]
    if d2.size == 0:
        raise FloatingPointError("calibration: no finite distance of the truth to score.")
    ratios = [np.quantile(d2, lv) / st.chi2.ppf(lv, q) for lv in levels]
    return float(math.exp(np.mean(np.log(np.maximum(ratios, 1e-12)))))


def _coverage(d2: np.ndarray, q: int, factor: float = 1.0) -> tuple[float, ...]:
    return tuple(round(float(np.mean(d2 / factor <= st.chi2.ppf(lv, q))), 4) for lv in LEVELS)


def calibrate_by_simulation(simulate: Callable[[torch.Generator], object],
                            refit: Callable[[object], Posterior], truth: torch.Tensor, *,
                            generator: torch.Generator, n_replications: int | None = None,
                            scale: bool = False) -> Calibration:
    """The factor of the module docstring: ``simulate(generator)`` draws a data set at the truth
    ``truth`` (the fitted mode), ``refit(data)`` fits the approximation to it (factor 1),
    ``n_replications`` times (default :func:`replications`)."""
    t0 = time.perf_counter()
    Z = truth.detach().cpu().double().numpy()
    n, q = Z.shape
    reps = replications(n) if n_replications is None else int(n_replications)
    d2 = np.concatenate([mahalanobis_sq(Z, refit(simulate(generator)), scale=scale)
                         for _ in range(reps)])
    factor = coverage_factor(d2, q)
    return Calibration(factor, _coverage(d2, q), _coverage(d2, q, factor), reps, int(d2.size),
                       round(time.perf_counter() - t0, 3))
