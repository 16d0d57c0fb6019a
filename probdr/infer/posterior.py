r"""Posterior inference over embeddings and the other latent sites of a model: SVI (AutoNormal,
low-rank, user guides), the per-point Laplace approximation (:mod:`probdr.infer.laplace`, for
models that declare their curvature) and NUTS.

The graph-coupling model (``probdr.models.coupling``) is a Pyro program with one latent site,
``Z``, and so are the Wishart couplings (``probdr.models.wishart_pca``,
``probdr.models.probdr_wishart``), with the same ``z_prior`` and ``coupling_weight`` arguments;
a researcher's model may have more (*Models with more latent sites* below).
MAP gives the classical methods; this module gives the posterior, e.g. for the graph coupling

.. math::
    p_\beta(Z \mid W_Z = \mathbb E[W_X]) \;\propto\; p(Z)\;
    \mathbb P_{\mathcal P_Z}\big(W_Z = \mathbb E[W_X];\ \pi \odot K_Z\big)^{\beta},

with a proper prior :math:`p(Z)` (the estimators use :math:`Z_{ia} \sim \mathcal N(0, s^2)`,
:math:`s` ten times the RMS of the MAP embedding unless ``z_prior`` says otherwise:
:class:`probdr.estimators.inference.PosteriorInference`) and the **temperature** :math:`1/\beta`, where
:math:`\beta` is the estimator's ``coupling_weight`` (``poutine.scale`` on the likelihood).

The temperature sets the spread
    The likelihood is a cross-entropy summed over :math:`n` rows of affinities, and its scale
    is a convention of the paper (e.g. :math:`\bar P^D = P + P^\top` versus
    :math:`(P+P^\top)/2n`), not a measured noise level. Where the likelihood is curved, the
    posterior covariance is :math:`(\beta H + \Sigma_0^{-1})^{-1} \approx H^{-1}/\beta` (Laplace),
    so standard deviations scale like :math:`\beta^{-1/2}`. With heavy-tailed kernels the
    likelihood is not curved far from a point's neighbours: moving point i to a distance
    :math:`d` from them costs only :math:`\beta m_i \log k(d^2)`, with
    :math:`m_i = \sum_j (P_{ij} + P_{ji})` (about 2 for the row-stochastic :math:`P^D`). For
    t-SNE's Cauchy kernel the conditional posterior of :math:`z_i` therefore has power-law tails
    :math:`\propto d^{-2\beta m_i}`, and in 2-D its variance is finite only if
    :math:`\beta m_i > 2`. At :math:`\beta = 1` the Z prior, not the data, sets the spread of
    many points. Use :math:`\beta \ge 2` (e.g. 4) for uncertainties that reflect the data, and
    read them **relatively** (which points are less determined than others). MAP does not depend
    on :math:`\beta` (up to the Z prior).

Invariances
    The likelihood depends on Z only through pairwise distances, so it is invariant to
    rotations, reflections and translations of the embedding. The isotropic Gaussian prior pins
    the translation (weakly) but not the rotation: a sampler may drift along rotations, and two
    chains may sit in mirror images. Summaries are therefore computed on draws aligned by
    orthogonal Procrustes (translation, rotation and reflection; no scaling) to a reference,
    by default the MAP embedding (:func:`procrustes_align`).

MCMC
    NUTS needs a deterministic potential and its exact gradient: the exact repulsion (all
    pairs, :math:`O(n^2)` per gradient). Negative sampling and the sampled normaliser are random
    estimates, the FFT normaliser an interpolation; all three are refused. The cost limits NUTS to
    small problems (:data:`MCMC_MAX_PARAMS` parameters :math:`n q`, measured below).

SVI
    Any guide works; with negative sampling the ELBO is an unbiased estimate of the ELBO of the
    negative-sampling surrogate likelihood (not of the exact one). The steps run on the MAP
    driver (:class:`probdr.infer.map.MAPFit` with the guide in place of the point mass), so a
    step costs what a MAP step costs at the same embedding.

Variance inflation
    A per-point Gaussian (the mean-field guide, the Laplace approximation) ignores the
    correlations between points and is narrower than the posterior. ``inflation`` multiplies
    the variance of the draws around their mean; the estimators set the factor they measure
    for each fit by simulation from the fitted model (:mod:`probdr.infer.calibrate`).

Preconditioning
    A badly scaled posterior (the Wishart couplings: curvatures spread over the spectrum of
    :math:`I + XX^\top`) is slow for Adam, and a mean-field guide in Z misses its correlations
    across points. ``reparam={"Z": (to_site, from_site)}``, the change of variables of the MAP
    driver (:class:`probdr.infer.map.MAPFit`), runs the inference on
    :math:`\tilde Z = \texttt{from\_site}(Z)` instead, with :math:`Z = \texttt{to\_site}(\tilde Z)`
    and the density :math:`p(Z = \texttt{to\_site}(\tilde Z), \mathcal D)`; the maps must be
    linear (a constant Jacobian), so that this is the same posterior. Draws are mapped back to Z.

Models with more latent sites
    A model may have latent sites besides Z, e.g. a Student kernel's degrees of freedom
    :math:`\nu > 0`, a kernel scale, or one parameter per cluster. :func:`fit_posterior` finds
    them by running the model once (:func:`latent_sites`) and fits them jointly with Z, each with
    a proper prior. They start at ``init_values`` where given, else at their prior median
    (:func:`~pyro.infer.autoguide.initialization.init_to_median`: the median of 15 prior draws,
    taken in the model's order, so a prior that depends on an earlier site sees that site's
    start). The median is defined for heavy-tailed priors that have no mean, and lies in the
    bulk of a skewed prior (a LogNormal(0, 1) has median 1, mean 1.65). The guides cover every
    site, in unconstrained space (a positive site as its log): AutoNormal one independent
    Gaussian per coordinate; the low-rank and full-covariance guides one Gaussian over all
    coordinates, which sees the correlations between Z and the other sites. NUTS also runs in
    unconstrained space (``torch.distributions.biject_to`` of each site's support), with the
    log-Jacobians of the transforms in the potential: Pyro builds that potential from the model;
    with ``reparam``, :func:`fit_posterior` builds it over every site. :data:`MCMC_MAX_PARAMS`
    counts every latent parameter. Discrete latent sites are refused: marginalise them.

    The result keeps every site: Z's draws are aligned as above (:attr:`Posterior.chains`), the
    others come back as drawn, in their support and shape (:attr:`Posterior.sites`), with
    per-site means, sds, R-hat and ESS in :meth:`Posterior.summary`, and as variables of their own
    in :func:`probdr.diagnostics.to_arviz`. Only Z is rotated: a site that lives in the
    embedding's coordinates (a cluster centre in Z space) is not aligned with it; fit with
    ``align=False`` and align such sites yourself, or summarise them through rotation-invariant
    quantities (distances).
"""

from __future__ import annotations

import gc
import math
import time
import warnings
from collections.abc import Callable
from numbers import Integral, Real
from typing import Any, NamedTuple

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer.autoguide import (
    AutoGuide,
    AutoLowRankMultivariateNormal,
    AutoMultivariateNormal,
    AutoNormal,
)
from pyro.infer.autoguide.initialization import InitMessenger, init_to_median, init_to_value
from pyro.poutine.util import site_is_subsample
from sklearn.utils import check_scalar
from torch.distributions import biject_to, constraints

from .._compute.alloc import release_free
from .._compute.isolation import global_stream, private_pyro, validation_off
from .._utils import generator
from .draws import Posterior, chain_diagnostics, procrustes_align
from .hmc import HMC_OPTIONS, sample_hmc
from .schedule import Phase, windows_agree

__all__ = ["Posterior", "fit_posterior", "latent_sites", "LatentSites", "check_inference",
           "check_inference_options", "check_mcmc_setup", "procrustes_align", "MCMC_MAX_PARAMS",
           "SVI_OPTIONS", "MCMC_OPTIONS", "LAPLACE_OPTIONS", "HMC_OPTIONS", "IterateAverage",
           "AVERAGE_SNAPSHOTS"]

#: Largest number of parameters n*q that NUTS accepts by default (exact repulsion). Every
#: gradient is an all-pairs pass and NUTS takes tens of them per draw, so the cost grows
#: quickly beyond (measurements in docs/bayesian.md). Raise it with ``max_params=``.
MCMC_MAX_PARAMS = 400

SVI_OPTIONS = {
    "guide": "normal", "num_steps": 1000, "lr": 0.2, "lr_decay": 0.05, "num_particles": 1,
    "num_samples": 200, "rank": None, "init_scale": 0.1, "inflation": 1.0, "reference": None,
    "align": True, "average": 0.2, "plateau": True, "max_steps": None,
}
#: SVI's plateau rule compares windows of this fraction of ``num_steps`` (at least
#: :data:`PLATEAU_MIN_WINDOW` steps); an extension runs two such windows
PLATEAU_WINDOW = 0.1
PLATEAU_MIN_WINDOW = 50
LAPLACE_OPTIONS = {
    "num_samples": 200, "inflation": 1.0, "reference": None, "align": True,
}
#: the posterior methods of :func:`fit_posterior`
METHODS = ("svi", "laplace", "hmc", "mcmc")
MCMC_OPTIONS = {
    "num_chains": 2, "warmup": 300, "num_samples": 300, "target_accept_prob": 0.8,
    "max_tree_depth": 8, "dense_mass": False, "init_jitter": 0.01, "max_params": None,
    "reference": None, "align": True,
}


# --------------------------------------------------------------------------------------------
# drivers
# --------------------------------------------------------------------------------------------
def _check_options(options: dict, allowed: dict, method: str) -> dict:
    bad = sorted(set(options) - set(allowed))
    if bad:
        raise TypeError(f"unknown option(s) {bad} for inference={method!r}; valid options: "
                        f"{sorted(allowed)}.")
    return {**allowed, **options}


def _seed(generator: torch.Generator | None) -> int:
    if generator is None:
        return int(torch.randint(0, 2**31 - 1, (1,)).item())
    return int(torch.randint(0, 2**31 - 1, (1,), generator=generator).item())


def fit_posterior(
    model: Callable,
    model_kwargs: dict[str, Any],
    Z_init: torch.Tensor,
    *,
    method: str = "svi",
    generator: torch.Generator | None = None,
    verbose: bool = False,
    reparam: dict | None = None,
    init_values: dict[str, Any] | None = None,
    **options,
) -> Posterior:
    r"""Fit the posterior of the latent sites of ``model`` (``Z`` and any others) by SVI or NUTS.

    Parameters
    ----------
    model : callable
        A Pyro model with a sample site ``"Z"`` of event shape ``(n, q)`` and a **proper** prior
        (``model_kwargs["z_prior"]``; the flat prior of the paper has no posterior), and any
        other continuous latent sites with proper priors (see *Models with more latent sites*
        above).
    model_kwargs : dict
        Keyword arguments of the model.
    Z_init : tensor (n, q)
        Starting point, normally the MAP embedding; also the default alignment reference.
    method : {"svi", "laplace", "mcmc", "hmc"}
    generator : torch.Generator, optional
        Seeds Pyro (and so every draw) for repeatable runs.
    verbose : bool
        Progress bars.
    reparam : dict, optional
        ``{"Z": (to_site, from_site)}``: two mutually inverse **linear** maps; the guide (or NUTS)
        then works on ``Z_raw = from_site(Z)``, a site ``"Z_raw"`` of a wrapped model, and every
        draw is mapped back by ``to_site`` (see *Preconditioning* above). A guide callable
        given in ``options`` must then be a guide of the wrapped model.
    init_values : dict, optional
        Starting values of latent sites other than Z, ``{name: value}`` (in the site's
        support, of its shape). Sites not named start at their prior median
        (:func:`pyro.infer.autoguide.initialization.init_to_median`, given the values of the
        sites before them).
    **options
        SVI (defaults in :data:`SVI_OPTIONS`):

        ``guide``
            ``"normal"`` (AutoNormal, mean field, default), ``"lowrank"``
            (AutoLowRankMultivariateNormal, ``rank`` defaults to :math:`\lceil\sqrt{d}\rceil`
            for :math:`d` latent parameters, :math:`nq` for a Z-only model), ``"mvn"``
            (AutoMultivariateNormal, full covariance, :math:`d^2` memory), an ``AutoGuide``
            subclass (instantiated on the model, started at the initial values), or any guide
            callable with the model's signature.
        ``num_steps``, ``lr``, ``lr_decay``
            Adam steps; learning rate decays geometrically to ``lr * lr_decay``.
        ``num_particles``
            ELBO particles per step.
        ``plateau``, ``max_steps``
            After the ``num_steps`` of the schedule, the ELBO must have stopped improving: the
            mean loss of the last window of ``num_steps / 10`` steps (at least 50) within two
            standard errors of the window before (the rule of the stochastic mode search).
            While it is not, two more windows run at the schedule's geometric middle rate
            (``lr * sqrt(lr_decay)``), their iterates averaged afresh, up to ``max_steps`` in all (``None``: ``3 * num_steps``); a
            ``RuntimeWarning`` says when the cap came first. ``plateau=False`` runs the schedule
            alone and only reports the verdict; a schedule of fewer than two windows is not
            judged. ``diagnostics``: ``num_steps`` (all steps
            run), ``elbo_plateau`` (the verdict; ``None`` with too few recorded losses) and
            ``elbo_improvement_se`` (the last windows' improvement in standard errors).
        ``average``
            Average the guide's parameters over this last fraction of the steps (Polyak-Ruppert
            averaging, :data:`AVERAGE_SNAPSHOTS` snapshots; 0: the last step's). With a
            one-particle ELBO gradient the last step's means jitter around the optimum; on a
            12-point Gaussian posterior at the defaults the average cut the median error of
            the means from 0.048 to 0.034 posterior standard deviations.
        ``num_samples``
            Draws from the fitted guide.
        ``init_scale``
            Initial guide standard deviation.
        ``inflation``
            Multiply the variance of Z's draws around their mean by this factor (1: none). A
            mean-field guide ignores the correlations between points and is narrower than the
            posterior; the estimators measure the factor that restores the coverage of the
            credible regions for each fit (:mod:`probdr.infer.calibrate`; docs: "How sure is
            the map?").

        Laplace (``method="laplace"``, defaults in :data:`LAPLACE_OPTIONS`; models that declare
        ``point_precisions``, :mod:`probdr.infer.laplace`): ``num_samples`` draws and the
        variance ``inflation``.

        MCMC (defaults in :data:`MCMC_OPTIONS`): ``num_chains``, ``warmup``, ``num_samples``
        (per chain), ``target_accept_prob``, ``max_tree_depth``, ``dense_mass``,
        ``init_jitter`` (chains start at ``Z_init`` plus Gaussian noise of this many standard
        deviations of ``Z_init``, and the other sites at their initial values plus this much
        Gaussian noise in unconstrained space), ``max_params`` (default
        :data:`MCMC_MAX_PARAMS`, counting every latent parameter).

        HMC (``method="hmc"``, defaults in :data:`HMC_OPTIONS`, :mod:`probdr.infer.hmc`):
        ``num_chains``, ``warmup``, ``num_samples`` (per chain, at least), ``max_samples``
        (at most: while the chains have not mixed, :func:`chains_mixed`, they draw more, at
        most ``num_samples`` at a time, :func:`draws_wanted`; ``"auto"``: 4 times
        ``num_samples``), ``target_ess`` (the median coordinate's effective draws the chains
        reach before they stop, default 400: the means' Monte Carlo error about 0.05 posterior
        sd), ``thin``, ``target_accept_prob``, ``max_leapfrog``, ``init_jitter``,
        ``chain_workers``.

        Both: ``reference`` (array (n, q)) for the Procrustes alignment; ``align`` (default
        True): set False for models whose Z is identified (e.g. a prior with a non-zero mean or
        anisotropic scales), where the raw draws are the posterior.

    Returns
    -------
    Posterior
        Aligned draws of Z (``chains``) and draws of the other sites (``sites``).

    Raises
    ------
    ValueError
        Improper Z prior; NUTS with negative sampling; NUTS above the size limit; bad options;
        discrete latent sites; initial values unknown, of the wrong shape or out of support.
    """
    Z_init = torch.as_tensor(Z_init)
    if Z_init.ndim != 2:
        raise ValueError(f"Z_init must be (n, q), got shape {tuple(Z_init.shape)}.")
    if not torch.isfinite(Z_init).all():
        raise ValueError("Z_init contains NaN or inf.")
    kwargs = dict(model_kwargs)
    if "z_prior" in kwargs and kwargs["z_prior"] is None:
        raise ValueError(
            "posterior inference needs a proper prior on Z: the flat prior of the paper is "
            "improper (the likelihood is invariant to translations), so the posterior does not "
            "exist. Pass z_prior=<scale> (isotropic Gaussian) or a distribution.")
    n, q = Z_init.shape
    repulsion = kwargs.get("repulsion", "exact")
    opts = check_inference(method, n, q, repulsion=repulsion, **options)
    if kwargs.get("exaggeration", 1.0) != 1.0:
        raise ValueError("posterior inference is defined without early exaggeration.")
    model, *site = _reparametrised(model, Z_init, reparam)
    # Pyro's guides and NUTS draw from the global generators: those blocks take turns across
    # threads (global_stream) and restore them; the handlers and parameters are the thread's
    with private_pyro():
        with global_stream():
            seed = _seed(generator)
            with torch.no_grad():
                raw0 = Z_init.detach() if site[2] is None else site[2](Z_init.detach())
            latent = latent_sites(model, kwargs,
                                  {**_other_values(init_values, raw0.dtype), site[0]: raw0},
                                  seed=seed)
        if method == "mcmc":
            check_mcmc_setup(n, q, repulsion=repulsion, max_params=opts["max_params"],
                             extra_params=sum(v.numel() for k, v in latent.values.items()
                                              if k != site[0]))
        if method == "laplace":
            return _fit_laplace(model, kwargs, Z_init, opts, seed, latent)
        if method == "hmc":
            return _fit_hmc(model, kwargs, Z_init, opts, seed, tuple(site), latent, repulsion)
        fit = _fit_svi if method == "svi" else _fit_mcmc
        with global_stream():
            return fit(model, kwargs, Z_init, opts, seed, verbose, tuple(site), latent)


def _fit_laplace(model, kwargs, Z_init, opts, seed, latent) -> Posterior:
    """The per-point Laplace approximation at ``Z_init`` (the MAP) of a model that declares its
    curvature (``model.point_precisions``, :mod:`probdr.infer.laplace`)."""
    blocks = getattr(model, "point_precisions", None)
    if blocks is None:
        raise ValueError("inference='laplace' needs a model that declares its per-point "
                         "curvature (model.point_precisions), as the graph couplings do; use "
                         "'svi' for this model.")
    if set(latent.values) != {"Z"}:
        raise ValueError("inference='laplace' covers models whose only latent site is Z; a "
                         f"model with {sorted(set(latent.values) - {'Z'})} needs 'svi'.")
    t0 = time.perf_counter()
    gen = generator(seed)
    P = blocks(Z_init.detach(), **kwargs)
    # the curvature sums' temporaries (some in autograd's reference cycles until a collection)
    # go back to the system before the draws (the fit's peak at a million points: 8.10 GiB
    # instead of 8.43; at 70,000: 1.25 instead of about 1.4)
    gc.collect()
    release_free()
    reference = _reference(opts, Z_init)
    L, info = torch.linalg.cholesky_ex(P)
    if bool((info != 0).any()):
        bad = torch.nonzero(info).flatten()[:5].tolist()
        raise FloatingPointError(
            f"Laplace: the curvature of {int((info != 0).sum())} point(s) (e.g. {bad}) is not "
            "positive definite or not finite at the mode; use inference='svi', or check the "
            "fit (its map, its kernel's scale) for points far from all others.")
    cov = torch.cholesky_inverse(L) * float(opts["inflation"])
    draws = _laplace_law(Z_init, cov, int(opts["num_samples"]),
                         reference if opts["align"] else None, gen)
    diag = {"precisions": _numpy(P), "covariances": _numpy(cov),
            "inflation": float(opts["inflation"]), "seconds": time.perf_counter() - t0}
    # the draws are the MAP plus independent noise, made when read (draws.GaussianDraws)
    return Posterior("laplace", None, reference, diag, draws=draws)


def _laplace_law(Z_init, cov, num_samples, reference, gen):
    """The per-point Gaussians of the Laplace posterior as a law of draws made on demand
    (:class:`probdr.infer.draws.GaussianDraws`), in the fit's precision (float32 fits:
    float32), aligned to ``reference`` (None: not aligned); its random streams are seeded from
    ``gen``."""
    from .draws import GaussianDraws

    dtype = np.float32 if Z_init.dtype in (torch.float32, torch.float16, torch.bfloat16) \
        else np.float64
    L = _numpy(torch.linalg.cholesky(cov)).astype(dtype)
    if not np.isfinite(L).all():
        raise FloatingPointError("Laplace: a point's curvature is not positive definite (its "
                                 "covariance has non-finite factors).")
    seed = int(torch.randint(0, 2**62, (1,), generator=gen).item())
    return GaussianDraws(_numpy(Z_init.detach()).astype(dtype), L, num_samples, seed,
                         None if reference is None else np.asarray(reference, dtype=np.float64))


def _other_values(init_values, dtype) -> dict[str, torch.Tensor]:
    """The user's initial values of the sites other than Z, as tensors (numbers in ``dtype``)."""
    given = dict(init_values or {})
    if {"Z", "Z_raw"} & set(given):
        raise ValueError("init_values sets the latent sites other than Z: Z starts at Z_init.")
    return {k: v.detach() if torch.is_tensor(v) else torch.as_tensor(v, dtype=dtype)
            for k, v in given.items()}


class LatentSites(NamedTuple):
    """The continuous latent sites of a model: initial ``values`` and ``supports``, by name, in
    the model's order (:func:`latent_sites`)."""

    values: dict[str, torch.Tensor]
    supports: dict[str, constraints.Constraint]


def latent_sites(model: Callable, model_kwargs: dict[str, Any], init_values: dict[str, Any],
                 *, seed: int | None = None) -> LatentSites:
    """Run ``model`` once, its latent sites set to ``init_values`` or else to their prior median
    (:func:`~pyro.infer.autoguide.initialization.init_to_median`), and return every latent
    site's value and support.

    Parameters
    ----------
    model : callable
    model_kwargs : dict
    init_values : dict
        ``{site: value}``; each must be a latent site of the model, of its shape and support.
    seed : int, optional
        Seeds Pyro before the run (the prior medians are medians of 15 prior draws).

    Raises
    ------
    ValueError
        An unknown site in ``init_values``, a value of the wrong shape or outside its support,
        or a discrete latent site (neither the guides nor NUTS draw them).
    """
    if seed is not None:
        pyro.set_rng_seed(seed)
    given = {k: torch.as_tensor(v) for k, v in init_values.items()}

    def init(site):  # the given values, checked before the model uses them
        name, fn = site["name"], site["fn"]
        if name not in given:
            return init_to_median(site)
        value = given[name]
        if tuple(value.shape) != tuple(fn.shape()):
            raise ValueError(f"the initial value of site {name!r} has shape "
                             f"{tuple(value.shape)}; the site has shape {tuple(fn.shape())}.")
        if not bool(torch.all(fn.support.check(value))):
            raise ValueError(f"the initial value of site {name!r} lies outside its support "
                             f"{fn.support}.")
        return value

    with validation_off(), poutine.block():
        tr = poutine.trace(InitMessenger(init)(model)).get_trace(**model_kwargs)
    values, supports = {}, {}
    for name, node in tr.nodes.items():
        if node["type"] != "sample" or node["is_observed"] or site_is_subsample(node):
            continue
        if node["fn"].has_enumerate_support:
            raise ValueError(f"the latent site {name!r} is discrete: fit_posterior draws "
                             "continuous sites only; marginalise it out of the model.")
        values[name], supports[name] = node["value"].detach(), node["fn"].support
    unknown = sorted(set(given) - set(values))
    if unknown:
        raise ValueError(f"init_values names {unknown}, which are not latent sites of the "
                         f"model; its latent sites are {list(values)}.")
    return LatentSites(values, supports)


def _reparametrised(model, Z_init, reparam):
    """``(model, site, to_site, from_site)`` of the inference: the site ``"Z"`` of ``model``,
    or the site ``"Z_raw"`` of a wrapped model in which ``Z = to_site(Z_raw)``."""
    if not reparam:
        return model, "Z", None, None
    if set(reparam) != {"Z"}:
        raise ValueError(f"reparam must map the site 'Z' only, got {sorted(reparam)}.")
    to_site, from_site = reparam["Z"]
    flat = dist.ImproperUniform(constraints.real, (), tuple(Z_init.shape))

    def reparametrised(**kwargs):
        raw = pyro.sample("Z_raw", flat)
        return poutine.condition(model, data={"Z": to_site(raw)})(**kwargs)

    return reparametrised, "Z_raw", to_site, from_site


def _to_z(to_site, raw: torch.Tensor) -> torch.Tensor:
    """Z from a value (n, q), or a stack of draws, of the inference variable."""
    if to_site is None:
        return raw
    return to_site(raw) if raw.ndim == 2 else torch.stack([to_site(r) for r in raw])


def check_inference(method: str, n: int, q: int, *, repulsion: str = "exact",
                    **options) -> dict[str, Any]:
    """Validate posterior-inference settings before any heavy work; return the full options.

    Estimators can call this in their parameter checks, before MAP, so that a bad setting
    (an unknown option, NUTS with a stochastic or approximate repulsion, NUTS above
    :data:`MCMC_MAX_PARAMS`) fails in milliseconds rather than after the MAP fit. It is
    :func:`check_inference_options` (the settings alone) then :func:`check_mcmc_setup` (NUTS on
    this problem).

    Raises
    ------
    ValueError, TypeError
    """
    opts = check_inference_options(method, **options)
    if method == "mcmc":
        check_mcmc_setup(n, q, repulsion=repulsion, max_params=opts["max_params"])
    return opts


def check_inference_options(method: str, **options) -> dict[str, Any]:
    """Validate the method and its options, which need no data (names, counts, rates); return
    the full options (defaults filled in). Raises ``ValueError`` or ``TypeError``."""
    if method not in METHODS:
        raise ValueError(f"method must be 'svi', 'laplace', 'hmc' or 'mcmc', got {method!r}.")
    if method == "hmc":
        return _check_hmc_options(_check_options(options, HMC_OPTIONS, method))
    if method == "laplace":
        opts = _check_options(options, LAPLACE_OPTIONS, method)
        check_scalar(opts["num_samples"], "num_samples", Integral, min_val=2)
        check_scalar(opts["inflation"], "inflation", Real, min_val=0,
                     include_boundaries="neither")
        return opts
    if method == "svi":
        opts = _check_options(options, SVI_OPTIONS, method)
        for name in ("num_steps", "num_samples", "num_particles"):
            check_scalar(opts[name], name, Integral, min_val=1)
        if opts["rank"] is not None:
            check_scalar(opts["rank"], "rank", Integral, min_val=1)
        check_scalar(opts["lr"], "lr", Real, min_val=0, include_boundaries="neither")
        check_scalar(opts["lr_decay"], "lr_decay", Real, min_val=0, max_val=1,
                     include_boundaries="right")
        check_scalar(opts["init_scale"], "init_scale", Real, min_val=0,
                     include_boundaries="neither")
        check_scalar(opts["inflation"], "inflation", Real, min_val=0,
                     include_boundaries="neither")
        check_scalar(opts["average"], "average", Real, min_val=0, max_val=1,
                     include_boundaries="left")
        check_scalar(opts["plateau"], "plateau", bool)
        if opts["max_steps"] is not None:
            check_scalar(opts["max_steps"], "max_steps", Integral, min_val=opts["num_steps"])
        return opts
    opts = _check_options(options, MCMC_OPTIONS, method)
    for name in ("num_chains", "num_samples"):
        check_scalar(opts[name], name, Integral, min_val=1)
    check_scalar(opts["warmup"], "warmup", Integral, min_val=0)
    if opts["max_params"] is not None:
        check_scalar(opts["max_params"], "max_params", Integral, min_val=1)
    return opts


def check_mcmc_setup(n: int, q: int, *, repulsion: str = "exact",
                     max_params: int | None = None, extra_params: int = 0) -> None:
    """NUTS on ``n`` points in ``q`` dimensions and ``extra_params`` other latent parameters:
    the repulsion must be exact (a deterministic log density with its exact gradient) and
    ``n * q + extra_params`` at most ``max_params`` (default :data:`MCMC_MAX_PARAMS`). Raises
    ``ValueError``."""
    if repulsion != "exact":
        why = ("is an interpolation whose gradient is not the exact gradient of one log density"
               if repulsion == "fft" else "draws random partners at every evaluation (a "
               "stochastic estimate of the log density, invalid inside Hamiltonian Monte Carlo)")
        raise ValueError(
            f"NUTS needs a deterministic log density and its exact gradient, but repulsion="
            f"{repulsion!r} {why}. Use repulsion='exact' with inference='mcmc', or "
            "inference='svi'.")
    max_params = max_params if max_params is not None else MCMC_MAX_PARAMS
    total = n * q + int(extra_params)
    if total > max_params:
        count = (f"n*q = {n}*{q} = {n * q} parameters" if not extra_params else
                 f"n*q + {extra_params} other latent parameters = {n}*{q} + {extra_params} = "
                 f"{total} parameters")
        raise ValueError(
            f"NUTS on {count} exceeds the limit of {max_params} "
            f"(MCMC_MAX_PARAMS, measured on 2 CPU cores: each gradient is an exact O(n^2) "
            "all-pairs pass and NUTS takes tens of gradients per draw). Use inference='svi' "
            "(guide='lowrank' for correlations), a subsample of the data, or pass "
            "inference_params={'max_params': ...} if you can afford the time.")


def _check_hmc_options(opts: dict) -> dict:
    for name in ("num_chains", "num_samples", "thin", "max_leapfrog"):
        check_scalar(opts[name], name, Integral, min_val=1)
    check_scalar(opts["warmup"], "warmup", Integral, min_val=0)
    check_scalar(opts["target_accept_prob"], "target_accept_prob", Real, min_val=0, max_val=1,
                 include_boundaries="neither")
    check_scalar(opts["init_jitter"], "init_jitter", Real, min_val=0)
    check_scalar(opts["target_ess"], "target_ess", Real, min_val=0)
    if opts["max_samples"] != "auto":
        check_scalar(opts["max_samples"], "max_samples", Integral, min_val=1)
    workers = opts["chain_workers"]
    if workers != "auto":
        check_scalar(workers, "chain_workers", Integral, min_val=1)
    return opts


def _reference(opts, Z_init):
    ref = opts.get("reference")
    if ref is None:
        return Z_init.detach().to(torch.float64).cpu().numpy()
    ref = np.asarray(ref, dtype=np.float64)
    if ref.shape != tuple(Z_init.shape):
        raise ValueError(f"reference must have shape {tuple(Z_init.shape)}, got {ref.shape}.")
    return ref


def _make_guide(model, spec, values, opts):
    """The guide ``spec`` of ``model``, started at the initial ``values`` of every latent site;
    and its name."""
    init = init_to_value(values={k: v.detach().clone() for k, v in values.items()})
    scale = float(opts["init_scale"])  # positive: check_inference_options
    size = sum(v.numel() for v in values.values())
    if isinstance(spec, str):
        if spec == "normal":
            return AutoNormal(model, init_loc_fn=init, init_scale=scale), "AutoNormal"
        if spec == "lowrank":
            rank = opts["rank"]  # None or a positive integer: check_inference_options
            rank = int(math.ceil(math.sqrt(size))) if rank is None else int(rank)
            return (AutoLowRankMultivariateNormal(model, init_loc_fn=init, init_scale=scale,
                                                  rank=rank),
                    f"AutoLowRankMultivariateNormal(rank={rank})")
        if spec == "mvn":
            if size > 5000:
                raise ValueError(f"guide='mvn' stores a ({size}, {size}) covariance factor; use "
                                 "guide='lowrank' for this size.")
            return (AutoMultivariateNormal(model, init_loc_fn=init, init_scale=scale),
                    "AutoMultivariateNormal")
        raise ValueError(f"guide must be 'normal', 'lowrank', 'mvn', an AutoGuide class or a "
                         f"guide callable, got {spec!r}.")
    if isinstance(spec, type) and issubclass(spec, AutoGuide):
        try:
            return spec(model, init_loc_fn=init, init_scale=scale), spec.__name__
        except TypeError:
            return spec(model, init_loc_fn=init), spec.__name__
    if callable(spec):
        return spec, getattr(spec, "__name__", type(spec).__name__)
    raise ValueError(f"guide must be 'normal', 'lowrank', 'mvn', an AutoGuide class or a guide "
                     f"callable, got {spec!r}.")


def _fit_svi(model, kwargs, Z_init, opts, seed, verbose, site, latent) -> Posterior:
    # in a fresh parameter store: the caller's Pyro parameters are left as they are
    with pyro.get_param_store().scope():
        return _fit_svi_in_scope(model, kwargs, Z_init, opts, seed, verbose, site, latent)


def _fit_svi_in_scope(model, kwargs, Z_init, opts, seed, verbose, site, latent) -> Posterior:
    """SVI on the MAP driver (:class:`probdr.infer.map.MAPFit` with the guide in place of the
    point mass): the same engine room per step as a MAP step -- sync-free queues, the edge sums'
    values skipped between recorded steps, heap reuse, data-parallel shards -- and Adam with a
    geometric decay of the learning rate from ``lr`` to ``lr * lr_decay``."""
    from .map import MAPFit

    name, to_site, _ = site
    num_steps = int(opts["num_steps"])
    lr, decay = float(opts["lr"]), float(opts["lr_decay"])
    reference = _reference(opts, Z_init)
    pyro.set_rng_seed(seed)
    guide, guide_name = _make_guide(model, opts["guide"], latent.values, opts)
    average = IterateAverage(guide, num_steps, float(opts["average"]))
    t0 = time.perf_counter()
    with MAPFit(model, dict(latent.values), optimizer="adam", guide=lambda m, start: guide,
                collapse_floor=None, verbose=verbose, total_steps=num_steps, desc="SVI",
                callback=average.callback or False, callback_every=average.every,
                num_particles=int(opts["num_particles"])) as fit:
        try:
            fit.run(Phase(num_steps, lr, final_learning_rate=lr * decay, geometric=True,
                          name="svi"), kwargs)
            plateau = _until_plateau(fit, kwargs, opts, average)
        except FloatingPointError as err:
            raise FloatingPointError(f"{err} Lower lr or init_scale, or use "
                                     "dtype='float64'.") from err
        average.apply()
        draws = _guide_draws(guide, kwargs, list(latent.values), int(opts["num_samples"]))
    elbo = fit.history
    with torch.no_grad():
        raw = _numpy(_to_z(to_site, draws.pop(name)))[None]
    if float(opts["inflation"]) != 1.0:  # variance inflation of Z's draws around their mean
        mid = raw.mean(1, keepdims=True)
        raw = mid + math.sqrt(float(opts["inflation"])) * (raw - mid)
    sites = {k: _numpy(v)[None] for k, v in draws.items()}
    for k, v in (("Z", raw), *sites.items()):
        if not np.all(np.isfinite(v)):
            raise FloatingPointError(f"SVI: the guide produced non-finite draws of {k!r}.")
    diag = {"elbo": elbo, "elbo_steps": fit.loss_steps, "guide": guide_name,
            "num_steps": plateau.steps, "elbo_plateau": plateau.reached,
            "elbo_improvement_se": plateau.improvement, "inflation": float(opts["inflation"]),
            "averaged_snapshots": average.count,
            "seconds": time.perf_counter() - t0}
    aligned = procrustes_align(raw, reference) if opts["align"] else raw
    return Posterior("svi", aligned, reference, diag, raw, guide=guide, sites=sites)


class Plateau(NamedTuple):
    """SVI's ELBO-plateau rule's verdict: whether it held (``None``: too few recorded losses to
    judge), the last two windows' improvement in standard errors, the steps run in all."""

    reached: bool | None
    improvement: float
    steps: int


def _plateau(fit, window: int) -> tuple[bool | None, float]:
    """:func:`~probdr.infer.schedule.windows_agree` on the recorded losses of the last two
    windows of ``window`` steps (``None``: fewer than 5 recorded in either)."""
    losses, steps = fit.history, fit.loss_steps
    end = int(steps[-1]) if steps.size else 0
    latest = losses[steps > end - window]
    previous = losses[(steps > end - 2 * window) & (steps <= end - window)]
    if min(latest.size, previous.size) < 5:
        return None, float("nan")
    return windows_agree(previous, latest)


def _until_plateau(fit, kwargs: dict, opts: dict, average) -> Plateau:
    r"""After SVI's schedule: while the ELBO still improves between the last two windows
    (:data:`PLATEAU_WINDOW`), run two more windows at
    the schedule's geometric middle rate :math:`\mathrm{lr}\sqrt{\mathrm{lr\_decay}}`, their
    iterates averaged afresh, up to ``max_steps`` (``None``: three times ``num_steps``, and at
    least two extensions); warn
    when the cap comes first. ``plateau=False``: judge only. A schedule too short to hold two
    windows of recorded losses (a quick look, ``num_steps < 100``) is not judged (``None``) nor
    continued. (At the schedule's final rate the
    progress left per window hides in the ELBO's noise: on a 40-dimensional Gaussian started 6
    sds away, 100 steps of rate 0.05 were continued to a mean 0.34 sd off; at the middle rate,
    0.07 sd.)"""
    num_steps = int(opts["num_steps"])
    window = max(PLATEAU_MIN_WINDOW, int(round(PLATEAU_WINDOW * num_steps)))
    cap = num_steps if not opts["plateau"] else int(opts["max_steps"] or max(
        3 * num_steps, num_steps + 4 * window))
    rate = float(opts["lr"]) * math.sqrt(float(opts["lr_decay"]))
    steps, (held, z) = num_steps, _plateau(fit, window)
    while held is False and steps + 2 * window <= cap:
        average.restart(steps)
        fit.run(Phase(2 * window, rate, name="svi plateau"), kwargs)
        steps += 2 * window
        held, z = _plateau(fit, window)
    if held is False and opts["plateau"]:
        warnings.warn(f"SVI: the ELBO still improved after {steps} steps (by {z:.1f} standard "
                      f"errors between the last two windows of {window} steps); raise "
                      "max_steps or num_steps, or lr.", RuntimeWarning, stacklevel=4)
    return Plateau(held, z, steps)


#: the number of parameter snapshots an SVI fit averages over its last steps (``average``)
AVERAGE_SNAPSHOTS = 20


class IterateAverage:
    r"""Polyak-Ruppert averaging of a guide's parameters over the last ``fraction`` of
    ``num_steps`` SVI steps: :attr:`callback` (for :class:`probdr.infer.map.MAPFit`, every
    :attr:`every` steps) adds a snapshot of the guide's unconstrained parameters,
    :meth:`apply` puts their mean in place. At a small learning rate a stochastic-gradient
    iterate jitters around the optimum; the mean of :data:`AVERAGE_SNAPSHOTS` snapshots spread
    over the window jitters less, up to :math:`\sqrt{20}` times where the snapshots are
    uncorrelated (Adam's momentum correlates near ones). Scales are averaged on the unconstrained (log) scale: their geometric
    mean. Guides that are not ``torch.nn.Module`` (plain callables) are left as they are, as
    are windows of fewer than two steps (``callback`` is then ``None``)."""

    def __init__(self, guide, num_steps: int, fraction: float):
        window = int(round(num_steps * fraction))
        usable = isinstance(guide, torch.nn.Module) and window >= 2
        self.guide, self.start = guide, num_steps - window
        #: snapshot every this many steps (0: no averaging)
        self.every = max(1, window // AVERAGE_SNAPSHOTS) if usable else 0
        self.callback = self._snapshot if usable else None
        #: snapshots taken
        self.count = 0
        self._sums: list[torch.Tensor] = []
        self._params: list[torch.Tensor] = []

    def _snapshot(self, step: int, Z, loss) -> bool:
        if step > self.start:
            with torch.no_grad():
                if not self._params:
                    self._params = [p for p in self.guide.parameters() if p.requires_grad]
                    self._sums = [torch.zeros_like(p) for p in self._params]
                for total, p in zip(self._sums, self._params, strict=True):
                    total.add_(p)
            self.count += 1
        return False

    def restart(self, start: int) -> None:
        """Average afresh over the steps after ``start`` (an extension of the fit)."""
        self.start, self.count, self._sums = start, 0, [torch.zeros_like(t) for t in self._sums]

    def apply(self) -> None:
        """Set the guide's parameters to the snapshots' mean (nothing without snapshots)."""
        if not self.count:
            return
        with torch.no_grad():
            for total, p in zip(self._sums, self._params, strict=True):
                p.copy_(total / self.count)


def _guide_draws(guide, kwargs, names, num_samples) -> dict[str, torch.Tensor]:
    """``num_samples`` draws of the sites ``names`` from ``guide``: ``{name: (S, *shape)}``."""
    draws = {k: [] for k in names}
    with torch.no_grad():
        for _ in range(num_samples):
            tr = poutine.trace(guide).get_trace(**kwargs)
            for k in names:
                draws[k].append(tr.nodes[k]["value"].detach())
    return {k: torch.stack(v) for k, v in draws.items()}


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().to(torch.float64).cpu().numpy()


def _fit_mcmc(model, kwargs, Z_init, opts, seed, verbose, site, latent) -> Posterior:
    from pyro.infer import MCMC, NUTS

    num_chains = int(opts["num_chains"])
    warmup = int(opts["warmup"])
    num_samples = int(opts["num_samples"])
    reference = _reference(opts, Z_init)
    name, to_site, _ = site
    transforms = {k: biject_to(c).inv for k, c in latent.supports.items()}
    g = generator(seed)
    draws = {k: [] for k in latent.values}
    divs, div_idx, acc, steps = [], [], [], []
    t0 = time.perf_counter()
    def potential_model():  # no arguments: MCMC.run's own keywords (e.g. "kernel") cannot clash
        return model(**kwargs)

    # a reparametrised model runs as a potential energy: Pyro's set-up of a model wraps it in an
    # enumeration handler that needs tensor observations (the Wishart couplings observe
    # structured matrices), and its flat raw site has nothing to draw initial values from
    nuts_model = dict(model=potential_model) if to_site is None else dict(
        potential_fn=_potential_energy(model, kwargs, transforms))
    for c in range(num_chains):
        pyro.set_rng_seed(seed + 1 + c)
        kernel = NUTS(**nuts_model, target_accept_prob=float(opts["target_accept_prob"]),
                      max_tree_depth=int(opts["max_tree_depth"]),
                      full_mass=bool(opts["dense_mass"]), jit_compile=False)
        init = _initial_params(latent, transforms, name, g, float(opts["init_jitter"]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup, num_chains=1,
                        initial_params=init, disable_progbar=not verbose,
                        transforms=None if to_site is None else transforms)
            mcmc.run()
        samples = mcmc.get_samples()
        with torch.no_grad():
            samples[name] = _to_z(to_site, samples[name])
        for k in draws:
            draws[k].append(_numpy(samples[k]))
            if not np.all(np.isfinite(draws[k][-1])):
                raise FloatingPointError(f"NUTS chain {c} produced non-finite draws of {k!r}.")
        d = mcmc.diagnostics()
        # Pyro records t - warmup_steps: negative indices are warm-up divergences
        bad = [int(i) for i in d.get("divergences", {}).get("chain 0", []) if int(i) >= 0]
        divs.append(len(bad))
        div_idx.append(bad)
        acc.append(float(d.get("acceptance rate", {}).get("chain 0", float("nan"))))
        steps.append(float(kernel.step_size))
    raw = np.stack(draws.pop(name))
    sites = {k: np.stack(v) for k, v in draws.items()}
    aligned = procrustes_align(raw, reference) if opts["align"] else raw
    diag = {"divergences": divs, "divergent_draws": div_idx, "accept_prob": acc,
            "step_size": steps,
            "num_chains": num_chains, "warmup": warmup, "num_samples": num_samples,
            "seconds": time.perf_counter() - t0}
    diag.update(chain_diagnostics(aligned, sites, np.random.default_rng(seed)))
    _warn_convergence(diag)
    return Posterior("mcmc", aligned, reference, diag, raw, sites=sites)


def _fit_hmc(model, kwargs, Z_init, opts, seed, site, latent, repulsion) -> Posterior:
    """Block-preconditioned HMC on the model's own engine (:mod:`probdr.infer.hmc`)."""
    reference = _reference(opts, Z_init)
    last: dict = {}  # the draws' count and their diagnostics: the last test's serve the result

    def diagnostics(draws: dict) -> tuple[np.ndarray, np.ndarray, dict, dict]:
        if last.get("count") != draws["Z"].shape[1]:
            draws = dict(draws)
            raw = draws.pop("Z")
            draws.pop(site[0], None)
            aligned = procrustes_align(raw, reference) if opts["align"] else raw
            last.update(count=raw.shape[1], out=(raw, aligned, draws, chain_diagnostics(
                aligned, draws, np.random.default_rng(seed))))
        return last["out"]

    def further(draws: dict) -> int:
        return draws_wanted(diagnostics(draws)[3], draws["Z"].shape[1],
                            int(opts["num_samples"]), float(opts["target_ess"]))

    draws, diag = sample_hmc(model, kwargs, latent, site, Z_init, reference, opts, seed,
                             repulsion, further=further)
    raw, aligned, draws, mixing = diagnostics(draws)
    diag.update(mixing)
    _warn_convergence(diag, "HMC")
    return Posterior("hmc", aligned, reference, diag, raw, sites=draws)


#: the effective draws of the median point's coordinates that the sampler's chains reach by default
#: before they stop drawing (``target_ess``, :func:`chains_mixed`, up to ``max_samples``): the
#: posterior means then carry about 1/sqrt(400) = 0.05 posterior sd of Monte Carlo error
MIX_ESS = HMC_OPTIONS["target_ess"]


def chains_mixed(diag: dict, target_ess: float = MIX_ESS) -> bool:
    """The sampler's rule for stopping (up to ``max_samples``): the chains have mixed when the
    split R-hat of the points' distances to their partners (no rotation changes them) is at most
    :data:`R_HAT_WARN` and the median point's coordinates have at least ``target_ess``
    effective draws (default :data:`MIX_ESS`)."""
    return (diag["r_hat_max_distances"] <= R_HAT_WARN
            and diag["ess_median"] >= target_ess)


def draws_wanted(diag: dict, drawn: int, block: int, target_ess: float = MIX_ESS) -> int:
    """How many more draws each chain should make, from the diagnostics of ``drawn`` draws a
    chain: 0 once :func:`chains_mixed`; a whole ``block`` while the distances' R-hat is high (the
    chains are in different places, and a rate says nothing); otherwise the draws that bring the
    median coordinate's effective draws to ``target_ess`` at their rate so far, with a tenth
    more for the estimate's own noise, at least a quarter of a block and at most a block (the
    rate is measured again after it)."""
    if chains_mixed(diag, target_ess):
        return 0
    ess = diag["ess_median"]
    if diag["r_hat_max_distances"] > R_HAT_WARN or not ess > 0:
        return block
    need = math.ceil(drawn * (target_ess * 11 / 10 - ess) / ess)
    return int(min(block, max(need, -(-block // 4))))


def _initial_params(latent: LatentSites, transforms, name, g, jitter) -> dict[str, torch.Tensor]:
    """A chain's starting point in unconstrained space: the inference variable ``name`` plus
    Gaussian noise of ``jitter`` times its standard deviation, the other sites transformed plus
    noise of standard deviation ``jitter``."""
    Z0 = latent.values[name]
    sd = float(Z0.std()) if Z0.numel() > 1 else 1.0
    out = {name: Z0 + jitter * sd * torch.randn(Z0.shape, generator=g, dtype=Z0.dtype)}
    for k, v in latent.values.items():
        if k != name:
            u = transforms[k](v)
            out[k] = u + jitter * torch.randn(u.shape, generator=g, dtype=u.dtype)
    return out


#: NUTS warns above this split R-hat (Vehtari et al. 2021 recommend 1.01; 1.05 is the older,
#: looser rule) and below this many effective draws of the worst coordinate
R_HAT_WARN = 1.05
ESS_WARN = 100


def _warn_convergence(diag: dict, sampler: str = "NUTS") -> None:
    """Warn when the chains have not mixed: split R-hat above :data:`R_HAT_WARN`, effective
    sample size below :data:`ESS_WARN` (both over the aligned coordinates), or divergences."""
    problems = []
    if diag["r_hat_max"] > R_HAT_WARN:
        problems.append(f"max split R-hat {diag['r_hat_max']:.3f} > {R_HAT_WARN}")
    if diag["ess_min"] < ESS_WARN:
        problems.append(f"min effective sample size {diag['ess_min']:.0f} < {ESS_WARN}")
    n_div = int(sum(diag["divergences"]))
    if n_div:
        problems.append(f"{n_div} divergent transitions")
    if problems:
        warnings.warn(f"{sampler}: the chains may not have converged (" + "; ".join(problems)
                      + "). Run more warm-up and draws (inference_params warmup=, num_samples=), "
                      "more chains, or raise the coupling weight.", RuntimeWarning, stacklevel=3)


def _potential_energy(model, kwargs, transforms):
    r"""``params -> -log p(params, data)`` over the latent sites of ``model`` in unconstrained
    space: each site's value is ``transforms[name].inv(params[name])``, and the potential adds
    the log-Jacobians of the transforms (as Pyro's own, ``pyro.infer.mcmc.util``)."""
    def potential_fn(params):
        with validation_off():
            values = {k: transforms[k].inv(v) for k, v in params.items()}
            tr = poutine.trace(poutine.condition(model, data=values)).get_trace(**kwargs)
            log_joint = tr.log_prob_sum()
            for k, t in transforms.items():
                log_joint = log_joint - t.log_abs_det_jacobian(values[k], params[k]).sum()
            return -log_joint

    return potential_fn
