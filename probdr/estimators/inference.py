r"""Posterior inference for estimators whose model is a Pyro program with a flat prior on Z.

The mixin :class:`PosteriorInference` (used by the Wishart estimators and the graph couplings,
:class:`~probdr.estimators.coupling.GraphCoupling` and its presets) gives an estimator the parameters ``inference``,
``inference_params``, ``z_prior`` and ``coupling_weight``. ``inference="map"`` (the papers'
estimator) fits the model as it is; ``"svi"``, ``"laplace"``, ``"hmc"`` or ``"mcmc"`` then fit, by
:func:`probdr.infer.posterior.fit_posterior` started at the MAP embedding :math:`\hat Z`,

.. math:: p_\omega(Z \mid \mathcal D) \;\propto\; p(Z)\; p(\mathcal D \mid Z)^{\omega},

with :math:`\omega` the coupling weight (an inverse temperature: the model's log-likelihood is
multiplied by it, ``poutine.scale``) and, in place of the improper flat prior, by default the
isotropic Gaussian

.. math:: Z_{ia} \sim \mathcal N(0, s^2),\qquad s = c\,\mathrm{RMS}(\hat Z),\quad c = 10,

:math:`\mathrm{RMS}(\hat Z) = (\tfrac1{nq}\sum_{ia}\hat Z_{ia}^2)^{1/2}`
(:data:`DEFAULT_Z_PRIOR_RMS_FACTOR`). Embeddings of different models live on very different
scales (unscaled PCA scores; eigenmaps axes of length :math:`(1/l_i - \beta)^{1/2}`), so a fixed
scale would be informative for some and vacuous for others; ten times the MAP's own scale is weak
next to the likelihood wherever the likelihood is curved, and makes the posterior proper along
the directions the likelihood does not see (translations of the Laplacian models). A Laplace
approximation gives a posterior covariance :math:`\approx H^{-1}/\omega`: the spread shrinks like
:math:`\omega^{-1/2}` and the posterior concentrates on the MAP as :math:`\omega` grows. The
likelihoods see Z only up to rotations (and translations), so draws are Procrustes-aligned to the
MAP embedding before they are summarised; the embedding is then their mean.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from ..infer.calibrate import Calibration, Simulation, calibrate_by_simulation, replications
from ..infer.mode import Mode, converge_mode, log_density
from ..infer.posterior import check_inference_options, check_mcmc_setup, fit_posterior
from ..laws.weights import sparse_to
from .params import InvalidParameterError

__all__ = ["PosteriorInference", "DEFAULT_Z_PRIOR_RMS_FACTOR", "default_z_prior_scale",
           "isotropic_gaussian"]

#: the default prior on Z of a posterior: isotropic Gaussian with a scale this many times the
#: RMS of the MAP embedding (see the module docstring)
DEFAULT_Z_PRIOR_RMS_FACTOR = 10.0
INFERENCES = ("map", "svi", "laplace", "hmc", "mcmc")
#: the posteriors that sample the posterior itself: no variance factor
SAMPLERS = ("hmc", "mcmc")
#: draws of each refitted approximation in a calibration (its per-point covariances)
CALIBRATION_DRAWS = 200
#: distances the calibration scores, at least (points x replications, at most
#: :data:`~probdr.infer.calibrate.MAX_REPLICATIONS` replications): SVI refits a guide each time
CALIBRATION_POINTS = {"laplace": 2000, "svi": 1000}
#: ``restarts="auto"``: MAP fits from random starts besides the schedule's own, for the sampler
#: (``inference="hmc"``, whose draws need no factor but stay in the basin they start in) on at
#: most :data:`RESTART_MAX_POINTS` points
AUTO_RESTARTS = 4
RESTART_MAX_POINTS = 5000


def _estimator_options(options: dict, inference: str, graph_given: bool = False) -> dict:
    """Pop the estimator's own options from ``options`` (``inference_params``) and return them
    checked, defaults filled in: ``converge`` (the mode search; default: Laplace and HMC, and
    SVI where the observed graph is given, ``graph_given``), ``restarts``, ``calibrate`` (the
    variance factor's rule; default None) and ``calibration_points``."""
    converge = inference in ("laplace", "hmc") or (inference == "svi" and graph_given)
    out = {"converge": options.pop("converge", converge),
           "calibrate": options.pop("calibrate", None),
           "calibration_points": options.pop("calibration_points",
                                             CALIBRATION_POINTS.get(inference, 1000)),
           "restarts": options.pop("restarts", "auto")}
    if not isinstance(out["converge"], bool):
        raise ValueError(f"converge must be True or False, got {out['converge']!r}.")
    k = out["restarts"]
    if not (k == "auto" or (isinstance(k, int) and not isinstance(k, bool) and k >= 0)):
        raise ValueError(f"restarts must be 'auto' or a non-negative integer, got {k!r}.")
    if k not in ("auto", 0) and not out["converge"]:
        raise ValueError("restarts compares the modes of several MAP fits: it needs "
                         "converge=True.")
    if not (out["calibrate"] is None or isinstance(out["calibrate"], bool)
            or out["calibrate"] == "local"):
        raise ValueError("calibrate must be None, True, False or 'local', got "
                         f"{out['calibrate']!r}.")
    points = out["calibration_points"]
    if isinstance(points, bool) or not isinstance(points, int) or points < 1:
        raise ValueError(f"calibration_points must be a positive integer, got {points!r}.")
    if out["calibrate"] not in (None, False) and inference in SAMPLERS:
        raise ValueError("calibrate is for the approximations (svi, laplace); a sampler "
                         f"({inference!r}) needs no factor.")
    return out


def _search_plan(steps: dict, n: int, restart, inference: str,
                 graph_given: bool) -> tuple[int, bool]:
    """The starts of the mode search besides the schedule's MAP: ``(k, graph)``, the number of
    MAP fits from random starts and whether starts read off the observed graph compete too.
    ``restarts`` k > 0: k fits (none for an estimator without a random start,
    ``restart=None``) and the graph's starts; 0: neither; ``"auto"``: for HMC up to
    :data:`RESTART_MAX_POINTS` points :data:`AUTO_RESTARTS` fits and the graph's starts, for
    the approximations the graph's starts where the observed graph is given (``graph_given``:
    data of the kind the latent law draws), else neither. Nothing without a mode search."""
    k = steps["restarts"]
    if not steps["converge"]:
        return 0, False
    if k == "auto":
        if inference == "hmc" and n <= RESTART_MAX_POINTS:
            return (0 if restart is None else AUTO_RESTARTS), True
        return 0, bool(graph_given)
    return (0 if restart is None else int(k)), int(k) > 0


def _in_float64(kwargs: dict) -> dict:
    """``kwargs`` with the observed graph ``W_X`` in float64. The multi-start search compares
    modes hundreds of nats apart, and in float32 the expanded squared distances of nearby points
    cancel, an error L-BFGS steers into (on 200 points of the B law a float32 mode read 83 nats
    above its float64 density, and above the mode searched from the truth). A sampler's
    Metropolis test on an exact density compares energies of about 10^5 nats (200 points at a
    coupling weight of 20) to within a nat, below float32's rounding there: the B law's chains
    tuned their step size down to 4e-7 and stopped (R-hat 6e4); in float64 0.15, R-hat 1.04."""
    W = kwargs.get("W_X")
    if not isinstance(W, torch.Tensor) or W.dtype == torch.float64:
        return kwargs
    return dict(kwargs, W_X=sparse_to(W, torch.float64) if W.is_sparse else W.double())


def _child_seed(gen: torch.Generator) -> int:
    """A seed for a side computation, fixed by ``gen``'s seed and leaving its stream as it is."""
    return (gen.initial_seed() * 1_000_003 + 7_919) % (2**63)


def default_z_prior_scale(Z_map: torch.Tensor) -> float:
    r"""The scale of the default prior on Z of a posterior: :data:`DEFAULT_Z_PRIOR_RMS_FACTOR`
    times the RMS of the MAP embedding, :math:`c\,(\tfrac1{nq}\sum_{ia}\hat Z_{ia}^2)^{1/2}`
    (computed in float64). The one rule of every estimator with a posterior."""
    rms = float(torch.as_tensor(Z_map).detach().double().square().mean().sqrt())
    if not (math.isfinite(rms) and rms > 0):
        raise ValueError("the MAP embedding is zero: no scale for the default Z prior; "
                         "pass z_prior=<scale>.")
    return DEFAULT_Z_PRIOR_RMS_FACTOR * rms


def isotropic_gaussian(scale: float, n: int, q: int, dtype=torch.float64):
    r""":math:`Z_{ia} \sim \mathcal N(0, s^2)` i.i.d., one distribution of event shape (n, q)."""
    import pyro.distributions as dist

    return dist.Normal(torch.zeros((), dtype=dtype), torch.tensor(float(scale), dtype=dtype)
                       ).expand([n, q]).to_event(2)


class PosteriorInference:
    r"""Posterior inference for an estimator whose model takes ``z_prior`` and
    ``coupling_weight`` arguments (see the module docstring).

    Parameters
    ----------
    inference : {"map", "svi", "laplace", "hmc", "mcmc"}
        MAP (the paper's estimator, default), or a posterior over Z started from the MAP
        embedding: SVI, the per-point Laplace approximation (graph couplings;
        :mod:`probdr.infer.laplace`), Hamiltonian Monte Carlo preconditioned by each point's
        curvature (the sampler that scales, :mod:`probdr.infer.hmc`) or NUTS (small n).
    inference_params : dict, optional
        Options of the posterior inference (:data:`probdr.infer.posterior.SVI_OPTIONS`,
        :data:`probdr.infer.posterior.MCMC_OPTIONS`: guide, steps, draws, chains, ...), and
        the estimator's own: ``converge`` (search the mode first; default for Laplace and
        HMC, and for SVI given the observed graph), ``restarts``, ``calibrate`` and
        ``calibration_points``. ``restarts``: the number of further MAP fits, from random
        starts through the estimator's own schedule, whose
        converged modes compete with the schedule's and with those searched from starts read
        off the observed graph (a graph coupling on at most
        :data:`probdr.estimators.starts.GEODESIC_MAX_POINTS` points: geodesic MDS of the lengths
        the kernel gives the edge frequencies or counts, :mod:`probdr.estimators.starts`; with
        any ``restarts`` > 0): the posterior is centred on the mode of highest density
        (``mode_restarts_``). A cold posterior (a large coupling weight) has
        many modes, and one fit's schedule may end in a basin far below the best one, which the
        sampler's chains do not leave. ``"auto"`` (default): :data:`AUTO_RESTARTS` and the
        graph's starts for ``inference="hmc"`` on at most :data:`RESTART_MAX_POINTS` points
        (graph couplings); for the approximations the graph's starts alone where the observed
        graph is given (``affinity="precomputed"``: data of the kind the latent law draws),
        else none (each restart costs a MAP fit and a mode search; ask for them with an
        integer); ``0``: the schedule's mode alone. ``calibrate``: ``None`` (default)
        measures the approximation's variance factor for this fit by simulation where the
        data are a graph the model could have drawn (``affinity="precomputed"``;
        ``calibration_``), each simulated refit run through the estimator's MAP schedule from
        its own start and its mode search (the optimiser's variability included); on
        affinities computed from features it applies the documented shortcut factor where the
        estimator has one for its setting (t-SNE's and UMAP's presets:
        :data:`probdr.estimators.coupling.CALIBRATED_INFLATION`), elsewhere none, and warns;
        ``True`` always measures it;
        ``"local"`` measures it with each refit started at the simulation's truth (the
        approximation alone, cheaper); ``False`` applies none. A given ``inflation``
        replaces all of them. ``calibration_points``: the distances the measurement scores, at
        least (2000 for Laplace, 1000 for SVI; at most 10 replications).
    z_prior : None, float or distribution
        Prior on Z. ``None``: flat for MAP; for SVI/MCMC the isotropic Gaussian of scale
        :data:`DEFAULT_Z_PRIOR_RMS_FACTOR` times the RMS of the MAP embedding. A float:
        isotropic Gaussian of that scale (in the MAP too); or a Pyro distribution of event shape
        (n, q).
    coupling_weight : float
        Weight :math:`\omega` of the likelihood (an inverse temperature): the posterior
        concentrates on the MAP as it grows; the flat-prior MAP does not depend on it.

    Attributes
    ----------
    posterior_ : probdr.infer.posterior.Posterior
        Posterior draws of Z, Procrustes-aligned to the MAP (any ``inference`` but ``"map"``);
        ``embedding_`` stays the MAP, ``posterior_mean_`` is their mean.
    posterior_samples_ : ndarray (draws, n, q)
        ``posterior_.samples`` (a Laplace posterior makes its draws on the first read).
    map_embedding_ : ndarray (n, q)
        The MAP embedding of the estimator's schedule (``embedding_``, in the fit's dtype),
        where the search for the posterior's mode starts.
    mode_embedding_ : ndarray (n, q)
        The mode the posterior is centred on and aligned to: the MAP continued on the
        posterior's own density (its prior and coupling weight, no exaggeration) until a
        convergence rule holds (:func:`probdr.infer.mode.converge_mode`), by default for the
        Laplace approximation, which needs a mode; ``inference_params={"converge": True}`` asks
        for it with SVI and NUTS too, ``False`` centres the posterior on the MAP itself.
    map_converged_ : bool or None
        Whether the rule held before its cap (a warning says when it did not); ``None`` when
        no search ran.
    mode_restarts_ : dict or None
        The multi-start mode search (``restarts``): the log density of each converged mode
        (``"log_density"``, the schedule's MAP's first), the one chosen (``"chosen"``), each
        one's convergence (``"converged"``) and start (``"starts"``: ``"schedule"``,
        ``"graph"`` for the starts read off the observed graph, ``"random"``); ``None`` when
        only the schedule's MAP was used.
    mode_steps_ : int or None
        The search's steps: L-BFGS calls of 20 iterations (a deterministic density) or Adam
        steps (a stochastic one, negative sampling).
    mode_grad_ratio_ : float or None
        The RMS gradient of the negative log posterior at the mode over its RMS at the MAP
        (a deterministic density; ``nan`` for a stochastic one, whose gradient at the mode is
        noise).
    calibration_ : probdr.infer.calibrate.Calibration or None
        The variance factor of the approximation (SVI's mean-field guide, Laplace) measured for
        this fit by simulation (:mod:`probdr.infer.calibrate`): data drawn from the model at
        the mode, the approximation refitted to them, the factor that makes its 50 % and 90 %
        regions hold the simulated truth, with the coverage before and after. ``None`` where
        nothing was measured (the samplers; a user's ``inflation``; ``calibrate=False``; a model
        that cannot be simulated, which warns); ``posterior_.diagnostics["calibration"]``
        says which.
    posterior_mean_ : ndarray (n, q)
        The mean of the aligned draws.
    z_prior_scale_ : float or None
        Scale of the isotropic Gaussian prior of the posterior (``None`` for a user-given
        distribution).
    posterior_sd_ : ndarray (n,)
        Each point's posterior spread, :meth:`~probdr.infer.draws.Posterior.point_std`.
    reliability_ : ndarray (n,)
        Each point's reliability in [0, 1]: the share of its 15 nearest neighbours that the
        posterior keeps (:meth:`~probdr.infer.draws.Posterior.point_reliability`): a relative
        score, for ranking points.
    stability_ : ndarray (n,)
        Each point's stability in [0, 1]: the posterior probability that it keeps at least 5 of
        its 15 nearest neighbours (:meth:`~probdr.infer.draws.Posterior.point_stability`);
        below 0.5 the point more likely than not loses most of its neighbourhood.
    """

    #: the estimator's model declares its per-point curvature (``inference="laplace"``)
    _has_laplace = False
    #: the estimator can rerun its MAP from random starts (``inference_params["restarts"]``)
    _has_restarts = False

    @property
    def posterior_samples_(self) -> np.ndarray:
        """``posterior_.samples``: read from the posterior, so that draws it makes on demand
        (the Laplace posterior's) are made only when asked for."""
        return self.posterior_.samples

    def _check_params_together(self) -> None:
        """The options of the posterior inference (``inference_params``), which need no data
        (the types of ``inference``, ``inference_params``, ``z_prior`` and ``coupling_weight``:
        the parameter table); a ``z_prior`` needs an iterative MAP (``solver="closed_form"``
        is the flat-prior MAP)."""
        super()._check_params_together()
        if getattr(self, "solver", "map") == "closed_form" and self.z_prior is not None:
            raise InvalidParameterError("z_prior needs solver='map': the closed form is the "
                                        "flat-prior MAP.")
        if self.inference == "laplace" and not self._has_laplace:
            raise InvalidParameterError(
                f"inference='laplace' is implemented for the graph couplings (TSNE, UMAP, ...); "
                f"use inference='svi' for {type(self).__name__}.")
        if self.inference != "map":
            try:
                options = dict(self.inference_params or {})
                steps = _estimator_options(options, self.inference, self._graph_given())
                check_inference_options(self.inference, **options)
                if steps["restarts"] not in ("auto", 0) and not self._has_restarts:
                    raise ValueError(f"restarts is for the graph couplings; "
                                     f"{type(self).__name__} has no random start.")
            except (TypeError, ValueError) as err:
                raise InvalidParameterError(f"The 'inference_params' parameter of "
                                            f"{type(self).__name__}: {err}") from err

    def _check_inference(self, n: int, q: int, repulsion: str = "exact") -> None:
        """The posterior settings against the data (before any heavy work): a ``z_prior``
        distribution over (n, q); NUTS's size limit and exact ``repulsion``."""
        zp = self.z_prior
        if isinstance(zp, torch.distributions.Distribution):
            if tuple(zp.batch_shape) != () or tuple(zp.event_shape) != (n, q):
                raise ValueError(f"z_prior must be a distribution of event shape ({n}, {q}) and "
                                 f"no batch shape, got event shape {tuple(zp.event_shape)}, "
                                 f"batch shape {tuple(zp.batch_shape)}.")
        if self.inference == "mcmc":
            check_mcmc_setup(n, q, repulsion=repulsion,
                             max_params=(self.inference_params or {}).get("max_params"))

    def _map_prior(self, n: int, q: int, dtype=torch.float64):
        """The prior of the MAP fit: the user's ``z_prior`` (a number: isotropic Gaussian of
        that scale, in ``dtype``), flat (``None``) otherwise -- also when a posterior follows."""
        zp = self.z_prior
        if zp is None or isinstance(zp, torch.distributions.Distribution):
            return zp
        return isotropic_gaussian(float(zp), n, q, dtype)

    def _weight_now(self) -> float:
        r"""The coupling weight :math:`\omega` of the fit."""
        return float(self.coupling_weight)

    def _map_kwargs(self, n: int, q: int) -> dict:
        """The prior and coupling-weight arguments of the model for the MAP fit."""
        return dict(z_prior=self._map_prior(n, q), coupling_weight=self._weight_now())

    def _posterior_z_prior(self, Z_map: torch.Tensor):
        """The prior on Z of the posterior, in ``Z_map``'s dtype; sets ``z_prior_scale_``: the
        user's ``z_prior`` (a number: isotropic Gaussian of that scale; a distribution: itself,
        scale ``None``), else the isotropic Gaussian of scale :func:`default_z_prior_scale`
        of the MAP embedding."""
        n, q = Z_map.shape
        zp = self.z_prior
        if isinstance(zp, torch.distributions.Distribution):
            self.z_prior_scale_ = None
            return zp
        self.z_prior_scale_ = default_z_prior_scale(Z_map) if zp is None else float(zp)
        return isotropic_gaussian(self.z_prior_scale_, n, q, Z_map.dtype)

    def _inference_options(self) -> dict:
        """The options passed to the posterior inference: ``inference_params``."""
        return dict(self.inference_params or {})

    def _posterior(self, model, model_kwargs: dict, Z_map: torch.Tensor,
                   gen: torch.Generator, reparam: dict | None = None, *,
                   prior=None, simulation: Simulation | str | None = None,
                   restart=None) -> torch.Tensor:
        """Fit the posterior from the MAP ``Z_map`` (on the linear change of variables
        ``reparam``, if any) with the prior ``prior`` (default :meth:`_posterior_z_prior`)
        and the variance factor measured on ``simulation`` (a string: why there is none);
        ``restart(generator)`` is another MAP from a random start (the candidates of
        ``restarts``; ``None``: the estimator has none). Sets ``posterior_`` (and so
        ``posterior_samples_``), ``z_prior_scale_``, ``map_embedding_``, ``mode_embedding_``
        (and the mode search's ``map_converged_``, ``mode_steps_`` and ``mode_restarts_``),
        ``calibration_`` and ``posterior_mean_``; returns the MAP (``embedding_``)."""
        if prior is None:
            prior = self._posterior_z_prior(Z_map)
        self.map_embedding_ = Z_map.detach().cpu().numpy().copy()
        kwargs = dict(model_kwargs, z_prior=prior, coupling_weight=self._weight_now())
        options = self._inference_options()
        steps = _estimator_options(options, self.inference, self._graph_given())
        self.map_converged_ = self.mode_steps_ = self.mode_grad_ratio_ = None
        self.mode_restarts_ = None
        restarts, graph = _search_plan(steps, Z_map.shape[0], restart, self.inference,
                                       self._graph_given())
        if restarts or graph:
            centre = self._best_mode(model, kwargs, Z_map.detach(), reparam, restarts,
                                     restart, _child_seed(gen) + 1)
        else:
            centre = self._mode(model, kwargs, Z_map.detach(), reparam, steps["converge"])
        self.mode_embedding_ = centre.cpu().numpy().copy()
        note = self._variance_factor(model, centre, gen, reparam, steps, options, simulation)
        if self.inference in SAMPLERS and kwargs.get("repulsion") == "exact":
            kwargs, centre = _in_float64(kwargs), centre.double()  # the Metropolis test's energy
        self.posterior_ = fit_posterior(model, kwargs, centre, method=self.inference,
                                        generator=gen, reparam=reparam,
                                        verbose=bool(getattr(self, "verbose", False)),
                                        **options)
        self.posterior_.diagnostics["calibration"] = (
            self.calibration_.as_dict() if self.calibration_ is not None
            else note or self._not_calibrated(steps, options))
        self.posterior_sd_ = self.posterior_.point_std()
        self.reliability_, self.stability_ = self.posterior_.neighbour_scores()
        self.posterior_mean_ = np.asarray(self.posterior_.mean, dtype=np.float64)
        return Z_map

    def _variance_factor(self, model, centre, gen, reparam, steps: dict, options: dict,
                         simulation) -> str | None:
        """Set ``options["inflation"]`` by the ``calibrate`` rule (the parameter's docstring)
        and ``calibration_``; returns where a factor not measured here came from (``None``:
        measured, or none asked for)."""
        self.calibration_ = None
        if self.inference in SAMPLERS or "inflation" in options or \
                options.get("guide", "normal") != "normal":
            return None
        auto = steps["calibrate"] is None
        # a given graph measures its factor: the shortcut holds only where it was measured
        shortcut = self._shortcut_factor() if auto and not self._measures_by_default() else None
        if shortcut is not None:
            options["inflation"] = shortcut
            return f"the shortcut factor {shortcut} of the Gaussian-blob study"
        if auto and not self._measures_by_default():
            warnings.warn(f"{type(self).__name__}: no variance factor for this posterior (no "
                          "shortcut for its setting, and its data are not a graph the model "
                          "could have drawn); its regions are the raw approximation's, narrower "
                          "than the posterior's. inference_params={'calibrate': True} measures "
                          "one by simulation (see the docs on what it measures on affinities "
                          "computed from features).", RuntimeWarning, stacklevel=5)
            return "not measured: no shortcut, and the data are not a drawn graph " \
                "(calibrate=True measures one)"
        if steps["calibrate"] is not False:
            self.calibration_ = self._calibrate(model, centre, gen, reparam, steps, options,
                                                simulation)
            options["inflation"] = 1.0 if self.calibration_ is None \
                else self.calibration_.inflation
        return None

    def _mode(self, model, kwargs: dict, Z: torch.Tensor, reparam, converge: bool,
              record: bool = True) -> torch.Tensor:
        """The posterior's centre: the mode searched from ``Z`` (:func:`converge_mode`) where
        ``converge``, else ``Z``; ``record`` sets ``map_converged_`` and ``mode_steps_``."""
        if not converge:
            return Z
        mode = converge_mode(model, kwargs, Z, reparam=reparam, desc=type(self).__name__,
                             warn=record)
        if record:
            self._record_mode(mode)
        return mode.Z

    def _record_mode(self, mode: Mode) -> None:
        self.map_converged_, self.mode_steps_ = mode.converged, mode.steps
        self.mode_grad_ratio_ = mode.grad_ratio

    def _best_mode(self, model, kwargs: dict, Z: torch.Tensor, reparam, restarts: int,
                   restart, seed: int) -> torch.Tensor:
        """The mode of highest log density among those searched from the schedule's MAP ``Z``,
        from the estimator's starts read off the observed graph (:meth:`_graph_starts`) and
        from ``restarts`` MAP fits from random starts (``restart(generator)``, the r-th
        seeded ``seed + r``); sets ``mode_restarts_`` and the chosen mode's
        ``map_converged_``, ``mode_steps_`` (warning if its search hit the cap). With no
        other start (a graph too large for its starts), the search of :meth:`_mode`."""
        name = type(self).__name__
        wide = _in_float64(kwargs)
        graph = self._graph_starts(kwargs, lambda S: log_density(model, wide, S.to(Z.device)))
        if not graph and not restarts:
            return self._mode(model, kwargs, Z, reparam, True)
        starts = [Z, *graph] + [restart(torch.Generator().manual_seed(seed + r))
                                for r in range(restarts)]
        modes = [converge_mode(model, wide, s.to(Z.device, torch.float64), reparam=reparam,
                               desc=name, warn=False) for s in starts]
        density = [log_density(model, wide, m.Z) for m in modes]
        best = int(np.argmax(np.where(np.isfinite(density), density, -np.inf)))
        self.mode_restarts_ = {"log_density": density, "chosen": best,
                               "converged": [m.converged for m in modes],
                               "starts": ["schedule"] + ["graph"] * len(graph)
                               + ["random"] * restarts}
        self._record_mode(modes[best])
        if not modes[best].converged:
            warnings.warn(f"{name}: the posterior's mode search hit its cap before its "
                          "convergence rule held; the posterior is centred where it stopped.",
                          RuntimeWarning, stacklevel=4)
        return modes[best].Z.to(Z.dtype)

    def _graph_starts(self, kwargs: dict, score) -> list[torch.Tensor]:
        """Starts of the multi-start mode search read off the data, searched to their modes
        as they are (the graph couplings': :func:`probdr.estimators.starts.geodesic_starts`); none
        here. ``score(Z)``: the posterior's log density at ``Z``."""
        return []

    def _shortcut_factor(self) -> float | None:
        """A documented factor for this fit's setting that replaces the measurement unless
        ``calibrate=True`` (none here; the graph couplings have four)."""
        return None

    def _graph_given(self) -> bool:
        """Whether the data are the observed graph itself, of the kind the latent law draws
        (a graph coupling with ``affinity="precomputed"``): its starts read off the graph are
        searched, and SVI searches the mode first, by default. None here."""
        return False

    def _measures_by_default(self) -> bool:
        """Whether ``calibrate=None`` measures the factor where there is no shortcut: where the
        data are of the kind the simulation draws (a graph coupling given its observed graph).
        On affinities computed from features the simulation measures the spread the model's
        own sparse draws would leave, far wider than the posterior given smooth affinities
        (SNE on 400 digits: a factor of about 370), so it is asked for explicitly there."""
        return True

    def _calibrate(self, model, centre: torch.Tensor, gen: torch.Generator, reparam,
                   steps: dict, options: dict, simulation) -> Calibration | None:
        """The variance factor of the approximation measured for this fit
        (:func:`probdr.infer.calibrate.calibrate_by_simulation`): data simulated at the mode
        ``centre``, the estimator's MAP schedule, mode search and approximation refitted;
        ``None`` (and a warning) where the model cannot be simulated."""
        if not isinstance(simulation, Simulation):
            why = simulation or f"{type(self).__name__} has no simulation of its data"
            warnings.warn(f"{type(self).__name__}: the posterior's variance factor is not "
                          f"measured ({why}); its regions are the raw approximation's, "
                          "narrower than the posterior's. Pass "
                          "inference_params={'inflation': c} to set one.", RuntimeWarning,
                          stacklevel=4)
            return None
        cal_gen = torch.Generator().manual_seed(_child_seed(gen))
        refit_options = dict(options, inflation=1.0, num_samples=CALIBRATION_DRAWS)

        def refit(data):
            kwargs = simulation.kwargs(data)
            pipeline = steps["calibrate"] != "local" and simulation.map_fit is not None
            start = simulation.map_fit(data) if pipeline else centre
            # the schedule's mode alone, not the graph's starts: the spread of the modes the
            # refits reach stands in for the posterior's mass in other basins, which a
            # Gaussian at one mode misses (docs "Are the regions calibrated?")
            start = self._mode(model, kwargs, start.to(centre.dtype), reparam,
                               steps["converge"], record=False)
            return fit_posterior(model, kwargs, start, method=self.inference,
                                 generator=cal_gen, reparam=reparam, **refit_options)

        reps = replications(centre.shape[0], steps["calibration_points"])
        return calibrate_by_simulation(lambda g: simulation.draw(centre, g), refit, centre,
                                       generator=cal_gen, n_replications=reps,
                                       scale=simulation.scale)

    def _not_calibrated(self, steps: dict, options: dict) -> str:
        """Why the posterior carries no measured factor (``diagnostics["calibration"]``)."""
        if "inflation" in (self.inference_params or {}):
            return f"the user's factor {options['inflation']!r}"
        if self.inference in SAMPLERS:
            return "not needed: the sampler draws from the posterior itself"
        if options.get("guide", "normal") != "normal":
            return "not measured: a guide other than the mean-field one"
        if steps["calibrate"] is False:
            return "not measured: calibrate=False"
        return "not measured: the model cannot be simulated"
