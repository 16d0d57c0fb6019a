r"""Posterior inference over embeddings: SVI (AutoNormal, low-rank, user guides) and NUTS.

The graph-coupling model (``probdr.models.coupling``) is a Pyro program with one latent site,
``Z``, and so are the Wishart couplings (``probdr.models.wishart_pca``,
``probdr.models.probdr_wishart``), with the same ``z_prior`` and ``coupling_weight`` arguments.
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
    negative-sampling surrogate likelihood (not of the exact one).

Preconditioning
    A badly scaled posterior (the Wishart couplings: curvatures spread over the spectrum of
    :math:`I + XX^\top`) is slow for Adam, and a mean-field guide in Z misses its correlations
    across points. ``reparam={"Z": (to_site, from_site)}``, the change of variables of the MAP
    driver (:class:`probdr.infer.map.MAPFit`), runs the inference on
    :math:`\tilde Z = \texttt{from\_site}(Z)` instead, with :math:`Z = \texttt{to\_site}(\tilde Z)`
    and the density :math:`p(Z = \texttt{to\_site}(\tilde Z), \mathcal D)`; the maps must be
    linear (a constant Jacobian), so that this is the same posterior. Draws are mapped back to Z.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from numbers import Integral, Real
from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer import SVI, Trace_ELBO
from pyro.infer.autoguide import (
    AutoGuide,
    AutoLowRankMultivariateNormal,
    AutoMultivariateNormal,
    AutoNormal,
)
from pyro.infer.autoguide.initialization import init_to_value
from sklearn.utils import check_scalar
from torch.distributions import constraints
from tqdm.auto import tqdm

from .._utils import generator
from .draws import Posterior, procrustes_align

__all__ = ["Posterior", "fit_posterior", "check_inference", "check_inference_options",
           "check_mcmc_setup", "procrustes_align", "MCMC_MAX_PARAMS", "SVI_OPTIONS",
           "MCMC_OPTIONS"]

#: Largest number of parameters n*q that NUTS accepts by default (exact repulsion). Every
#: gradient is an all-pairs pass and NUTS takes tens of them per draw, so the cost grows
#: quickly beyond (measurements in docs/bayesian.md). Raise it with ``max_params=``.
MCMC_MAX_PARAMS = 400

SVI_OPTIONS = {
    "guide": "normal", "num_steps": 1000, "lr": 0.2, "lr_decay": 0.05, "num_particles": 1,
    "num_samples": 200, "rank": None, "init_scale": 0.1, "reference": None, "align": True,
}
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
    **options,
) -> Posterior:
    r"""Fit the posterior of the latent site ``Z`` of ``model`` by SVI or NUTS.

    Parameters
    ----------
    model : callable
        A Pyro model with a sample site ``"Z"`` of event shape ``(n, q)`` and a **proper** prior
        (``model_kwargs["z_prior"]``; the flat prior of the paper has no posterior).
    model_kwargs : dict
        Keyword arguments of the model.
    Z_init : tensor (n, q)
        Starting point, normally the MAP embedding; also the default alignment reference.
    method : {"svi", "mcmc"}
    generator : torch.Generator, optional
        Seeds Pyro (and so every draw) for repeatable runs.
    verbose : bool
        Progress bars.
    reparam : dict, optional
        ``{"Z": (to_site, from_site)}``: two mutually inverse **linear** maps; the guide (or NUTS)
        then works on ``Z_raw = from_site(Z)``, a site ``"Z_raw"`` of a wrapped model, and every
        draw is mapped back by ``to_site`` (see *Preconditioning* above). A guide callable
        given in ``options`` must then be a guide of the wrapped model.
    **options
        SVI (defaults in :data:`SVI_OPTIONS`):

        ``guide``
            ``"normal"`` (AutoNormal, mean field, default), ``"lowrank"``
            (AutoLowRankMultivariateNormal, ``rank`` defaults to :math:`\lceil\sqrt{nq}\rceil`),
            ``"mvn"`` (AutoMultivariateNormal, full covariance, :math:`(nq)^2` memory), an
            ``AutoGuide`` subclass (instantiated on the model, started at ``Z_init``), or any
            guide callable with the model's signature.
        ``num_steps``, ``lr``, ``lr_decay``
            Adam steps; learning rate decays geometrically to ``lr * lr_decay``.
        ``num_particles``
            ELBO particles per step.
        ``num_samples``
            Draws from the fitted guide.
        ``init_scale``
            Initial guide standard deviation.

        MCMC (defaults in :data:`MCMC_OPTIONS`): ``num_chains``, ``warmup``, ``num_samples``
        (per chain), ``target_accept_prob``, ``max_tree_depth``, ``dense_mass``,
        ``init_jitter`` (chains start at ``Z_init`` plus Gaussian noise of this many standard
        deviations of ``Z_init``), ``max_params`` (default :data:`MCMC_MAX_PARAMS`).

        Both: ``reference`` (array (n, q)) for the Procrustes alignment; ``align`` (default
        True): set False for models whose Z is identified (e.g. a prior with a non-zero mean or
        anisotropic scales), where the raw draws are the posterior.

    Returns
    -------
    Posterior

    Raises
    ------
    ValueError
        Improper Z prior; NUTS with negative sampling; NUTS above the size limit; bad options.
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
    opts = check_inference(method, n, q, repulsion=kwargs.get("repulsion", "exact"), **options)
    if kwargs.get("exaggeration", 1.0) != 1.0:
        raise ValueError("posterior inference is defined without early exaggeration.")
    model, *site = _reparametrised(model, Z_init, reparam)
    seed = _seed(generator)
    fit = _fit_svi if method == "svi" else _fit_mcmc
    return fit(model, kwargs, Z_init, opts, seed, verbose, tuple(site))


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
    if method not in ("svi", "mcmc"):
        raise ValueError(f"method must be 'svi' or 'mcmc', got {method!r}.")
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
        return opts
    opts = _check_options(options, MCMC_OPTIONS, method)
    for name in ("num_chains", "num_samples"):
        check_scalar(opts[name], name, Integral, min_val=1)
    check_scalar(opts["warmup"], "warmup", Integral, min_val=0)
    if opts["max_params"] is not None:
        check_scalar(opts["max_params"], "max_params", Integral, min_val=1)
    return opts


def check_mcmc_setup(n: int, q: int, *, repulsion: str = "exact",
                     max_params: int | None = None) -> None:
    """NUTS on ``n`` points in ``q`` dimensions: the repulsion must be exact (a deterministic
    log density with its exact gradient) and ``n * q`` at most ``max_params`` (default
    :data:`MCMC_MAX_PARAMS`). Raises ``ValueError``."""
    if repulsion != "exact":
        why = ("is an interpolation whose gradient is not the exact gradient of one log density"
               if repulsion == "fft" else "draws random partners at every evaluation (a "
               "stochastic estimate of the log density, invalid inside Hamiltonian Monte Carlo)")
        raise ValueError(
            f"NUTS needs a deterministic log density and its exact gradient, but repulsion="
            f"{repulsion!r} {why}. Use repulsion='exact' with inference='mcmc', or "
            "inference='svi'.")
    max_params = max_params if max_params is not None else MCMC_MAX_PARAMS
    if n * q > max_params:
        raise ValueError(
            f"NUTS on n*q = {n}*{q} = {n * q} parameters exceeds the limit of {max_params} "
            f"(MCMC_MAX_PARAMS, measured on 2 CPU cores: each gradient is an exact O(n^2) "
            "all-pairs pass and NUTS takes tens of gradients per draw). Use inference='svi' "
            "(guide='lowrank' for correlations), a subsample of the data, or pass "
            "inference_params={'max_params': ...} if you can afford the time.")


def _reference(opts, Z_init):
    ref = opts.get("reference")
    if ref is None:
        return Z_init.detach().to(torch.float64).cpu().numpy()
    ref = np.asarray(ref, dtype=np.float64)
    if ref.shape != tuple(Z_init.shape):
        raise ValueError(f"reference must have shape {tuple(Z_init.shape)}, got {ref.shape}.")
    return ref


def _make_guide(model, spec, Z_init, opts, name="Z"):
    init = init_to_value(values={name: Z_init.detach().clone()})
    scale = float(opts["init_scale"])  # positive: check_inference_options
    if isinstance(spec, str):
        if spec == "normal":
            return AutoNormal(model, init_loc_fn=init, init_scale=scale), "AutoNormal"
        if spec == "lowrank":
            rank = opts["rank"]  # None or a positive integer: check_inference_options
            rank = int(math.ceil(math.sqrt(Z_init.numel()))) if rank is None else int(rank)
            return (AutoLowRankMultivariateNormal(model, init_loc_fn=init, init_scale=scale,
                                                  rank=rank),
                    f"AutoLowRankMultivariateNormal(rank={rank})")
        if spec == "mvn":
            if Z_init.numel() > 5000:
                raise ValueError(f"guide='mvn' stores a ({Z_init.numel()}, {Z_init.numel()}) "
                                 "covariance factor; use guide='lowrank' for this size.")
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


def _fit_svi(model, kwargs, Z_init, opts, seed, verbose, site=("Z", None, None)) -> Posterior:
    # in a fresh parameter store: the caller's Pyro parameters are left as they are
    with pyro.get_param_store().scope():
        return _fit_svi_in_scope(model, kwargs, Z_init, opts, seed, verbose, site)


def _fit_svi_in_scope(model, kwargs, Z_init, opts, seed, verbose, site) -> Posterior:
    name, to_site, from_site = site
    num_steps = int(opts["num_steps"])
    num_samples = int(opts["num_samples"])
    num_particles = int(opts["num_particles"])
    lr, decay = opts["lr"], opts["lr_decay"]
    reference = _reference(opts, Z_init)
    pyro.set_rng_seed(seed)
    with torch.no_grad():
        raw0 = Z_init.detach() if from_site is None else from_site(Z_init.detach())
    guide, guide_name = _make_guide(model, opts["guide"], raw0, opts, name)
    optim = pyro.optim.ClippedAdam({"lr": float(lr), "lrd": float(decay) ** (1.0 / num_steps)})
    svi = SVI(model, guide, optim, loss=Trace_ELBO(num_particles=num_particles))
    elbo = np.empty(num_steps)
    t0 = time.perf_counter()
    with tqdm(total=num_steps, desc="SVI", disable=not verbose, leave=False) as bar:
        for t in range(num_steps):
            elbo[t] = svi.step(**kwargs)
            if not np.isfinite(elbo[t]):
                raise FloatingPointError(
                    f"SVI: the ELBO became non-finite at step {t}; lower lr or init_scale, or "
                    "use dtype='float64'.")
            if verbose and (t + 1) % 50 == 0:
                bar.set_postfix(loss=f"{elbo[t]:.4g}")
                bar.update(50)
    draws = np.empty((num_samples, *Z_init.shape))
    with torch.no_grad():
        for s in range(num_samples):
            tr = poutine.trace(guide).get_trace(**kwargs)
            Z = _to_z(to_site, tr.nodes[name]["value"])
            draws[s] = Z.detach().to(torch.float64).cpu().numpy()
    if not np.all(np.isfinite(draws)):
        raise FloatingPointError("SVI: the guide produced non-finite draws.")
    raw = draws[None]
    diag = {"elbo": elbo, "guide": guide_name, "num_steps": num_steps,
            "seconds": time.perf_counter() - t0}
    aligned = procrustes_align(raw, reference) if opts["align"] else raw
    return Posterior("svi", aligned, reference, diag, raw, guide=guide)


def _fit_mcmc(model, kwargs, Z_init, opts, seed, verbose, site=("Z", None, None)) -> Posterior:
    from pyro.infer import MCMC, NUTS

    num_chains = int(opts["num_chains"])
    warmup = int(opts["warmup"])
    num_samples = int(opts["num_samples"])
    reference = _reference(opts, Z_init)
    jitter = float(opts["init_jitter"])
    name, to_site, from_site = site
    with torch.no_grad():
        Z0 = Z_init.detach() if from_site is None else from_site(Z_init.detach())
    sd = float(Z0.std()) if Z0.numel() > 1 else 1.0
    g = generator(seed)
    chains, divs, div_idx, acc, steps = [], [], [], [], []
    t0 = time.perf_counter()
    def potential_model():  # no arguments: MCMC.run's own keywords (e.g. "kernel") cannot clash
        return model(**kwargs)

    # a reparametrised model runs as a potential energy: Pyro's set-up of a model wraps it in an
    # enumeration handler that needs tensor observations (the Wishart couplings observe
    # structured matrices), and its flat raw site has nothing to draw initial values from
    nuts_model = dict(model=potential_model) if to_site is None else dict(
        potential_fn=_potential_energy(model, kwargs, name))
    for c in range(num_chains):
        pyro.set_rng_seed(seed + 1 + c)
        kernel = NUTS(**nuts_model, target_accept_prob=float(opts["target_accept_prob"]),
                      max_tree_depth=int(opts["max_tree_depth"]),
                      full_mass=bool(opts["dense_mass"]), jit_compile=False)
        init = Z0 + jitter * sd * torch.randn(Z0.shape, generator=g, dtype=Z0.dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup, num_chains=1,
                        initial_params={name: init}, disable_progbar=not verbose)
            mcmc.run()
        with torch.no_grad():
            Zc = _to_z(to_site, mcmc.get_samples()[name]).to(torch.float64).cpu().numpy()
        if not np.all(np.isfinite(Zc)):
            raise FloatingPointError(f"NUTS chain {c} produced non-finite draws.")
        chains.append(Zc)
        d = mcmc.diagnostics()
        # Pyro records t - warmup_steps: negative indices are warm-up divergences
        bad = [int(i) for i in d.get("divergences", {}).get("chain 0", []) if int(i) >= 0]
        divs.append(len(bad))
        div_idx.append(bad)
        acc.append(float(d.get("acceptance rate", {}).get("chain 0", float("nan"))))
        steps.append(float(kernel.step_size))
    raw = np.stack(chains)
    aligned = procrustes_align(raw, reference) if opts["align"] else raw
    diag = {"divergences": divs, "divergent_draws": div_idx, "accept_prob": acc,
            "step_size": steps,
            "num_chains": num_chains, "warmup": warmup, "num_samples": num_samples,
            "seconds": time.perf_counter() - t0}
    diag.update(_chain_stats(aligned))
    _warn_convergence(diag)
    return Posterior("mcmc", aligned, reference, diag, raw)


#: NUTS warns above this split R-hat (Vehtari et al. 2021 recommend 1.01; 1.05 is the older,
#: looser rule) and below this many effective draws of the worst coordinate
R_HAT_WARN = 1.05
ESS_WARN = 100


def _warn_convergence(diag: dict) -> None:
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
        warnings.warn("NUTS: the chains may not have converged (" + "; ".join(problems)
                      + "). Run more warm-up and draws (inference_params warmup=, num_samples=), "
                      "more chains, or raise the coupling weight.", RuntimeWarning, stacklevel=3)


def _potential_energy(model, kwargs, name):
    """``params -> -log p(params, data)`` of a model whose only latent site is ``name``."""
    def potential_fn(params):
        with pyro.validation_enabled(False):
            tr = poutine.trace(poutine.condition(model, data={name: params[name]})).get_trace(
                **kwargs)
            return -tr.log_prob_sum()

    return potential_fn


def _chain_stats(chains: np.ndarray) -> dict:
    """Split R-hat and ESS (Pyro's estimators) over all aligned coordinates."""
    from pyro.ops.stats import effective_sample_size, split_gelman_rubin

    C, S = chains.shape[:2]
    if S < 4:
        return {"r_hat_max": float("nan"), "ess_min": float("nan")}
    x = torch.as_tensor(chains.reshape(C, S, -1))
    r = split_gelman_rubin(x, chain_dim=0, sample_dim=1)
    e = effective_sample_size(x, chain_dim=0, sample_dim=1)
    return {"r_hat_max": float(torch.nan_to_num(r, nan=1.0).max()),
            "ess_min": float(torch.nan_to_num(e, nan=0.0).min())}
