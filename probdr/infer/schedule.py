r"""The pieces of a MAP fit (:mod:`probdr.infer.map`): its schedule (:class:`Phase`, stopping
rules), its result (:class:`MAPResult`), the optimisers it can run, the collapse rescue, the
callbacks of the fit in progress (:func:`fit_callbacks`), a rank's share of the latent priors
in a data-parallel fit (:func:`latent_share`) and the optimiser's heuristics applied to a model
(:class:`OptimiserHooks`, :func:`with_hooks`)."""

from __future__ import annotations

import contextlib
import contextvars
import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyro
import torch
from pyro.infer import Trace_ELBO
from pyro.infer.util import is_identically_zero
from pyro.poutine.messenger import Messenger

from .._compute.isolation import fit_generator
from ..optim import SGD, Adam, GainsMomentum

__all__ = ["OPTIMIZERS", "fit_callbacks", "RelativeChange", "windows_agree", "Phase", "MAPResult",
           "COLLAPSE_FLOOR", "continue_schedule", "random_stream", "set_random_stream",
           "OptimiserHooks", "with_hooks"]

#: the optimisers of the driver (see :class:`MAPFit`)
OPTIMIZERS = ("gains", "sgd", "adam", "lbfgs")


#: the callback of the MAP fits run inside :func:`fit_callbacks` (an estimator's ``fit``)
_CALLBACK: contextvars.ContextVar = contextvars.ContextVar("probdr_fit_callback",
                                                          default=(None, 50))


def fit_callback() -> tuple[Callable | None, int]:
    """``(callback, every)`` of the block of :func:`fit_callbacks` that runs this fit (``(None,
    50)`` outside one)."""
    return _CALLBACK.get()


@contextlib.contextmanager
def fit_callbacks(callback: Callable | None, every: int = 50):
    """Run a block whose MAP fits (:class:`MAPFit`) call ``callback(step, Z, loss)`` every
    ``every`` steps (unless a fit is given its own); a true return value stops the fit. Used by
    the estimators' ``callbacks=``."""
    token = _CALLBACK.set((callback, every))
    try:
        yield
    finally:
        _CALLBACK.reset(token)


@dataclass(frozen=True)
class RelativeChange:
    r"""Stopping rule :math:`|\ell_{t-1} - \ell_t| \le \mathrm{tol}\,\max(1, |\ell_t|)`: the loss
    changed by less than ``tol`` relative to its size (absolute below 1). The L-BFGS rule of
    :func:`map_estimate`."""

    tol: float

    def __call__(self, previous: float, loss: float) -> bool:
        return abs(previous - loss) <= self.tol * max(1.0, abs(loss))


def windows_agree(previous, latest) -> tuple[bool, float]:
    r"""The stopping rule of a noisy objective: two consecutive windows of losses agree when
    their means differ by less than twice the standard error of the difference,
    :math:`|\bar\ell_1 - \bar\ell_2| < 2\sqrt{s_1^2/k_1 + s_2^2/k_2}` (the noise of the
    objective hides any progress left). Returns the verdict and the improvement
    :math:`(\bar\ell_1 - \bar\ell_2)` in standard errors (positive: the loss still falls).
    The stochastic mode search's rule (:mod:`probdr.infer.mode`) and SVI's ELBO plateau."""
    a, b = np.asarray(previous, dtype=np.float64), np.asarray(latest, dtype=np.float64)
    se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    gap = float(a.mean() - b.mean())
    if se == 0.0:
        return gap == 0.0, (0.0 if gap == 0.0 else math.copysign(math.inf, gap))
    return abs(gap) < 2 * se, gap / se


@dataclass
class Phase:
    """One stage of a MAP fit.

    With ``optimizer="lbfgs"`` one step is one L-BFGS iteration (up to 20 inner iterations with a
    strong-Wolfe line search), and ``learning_rate`` its initial step length; ``momentum`` and
    ``final_learning_rate`` do not apply.
    """

    n_iter: int
    learning_rate: float
    momentum: float = 0.0
    #: learning rate at the end of the phase (linear decay); ``None`` keeps it constant
    final_learning_rate: float | None = None
    #: decay geometrically (a constant factor per step) instead of linearly
    geometric: bool = False
    #: the linear decay's length in steps (``None``: ``n_iter``) and the position in it of the
    #: phase's first step: the phase's step ``t`` runs at the decay's step ``decay_start + t``
    #: (a phase that continues or prolongs another: :func:`continue_schedule`)
    decay_steps: int | None = None
    decay_start: int = 0
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    name: str = "optimise"
    #: stop the phase early once the relative loss variation
    #: ``|l_t - l_{t-1}| / |l_{t-1} + tol_offset|`` falls below ``tol`` (the SNEkhorn thesis'
    #: rule, there with tol 1e-5 on the KL); ``None`` runs all ``n_iter`` steps
    tol: float | None = None
    #: added to the recorded loss in that rule's denominator, e.g. to turn the model's negative
    #: log-likelihood into the KL divergence whose relative variation is meant
    tol_offset: float = 0.0
    #: another stopping rule, ``converged(previous_loss, loss) -> bool``, checked after every
    #: step from the second on (e.g. :class:`RelativeChange`); it replaces the ``tol`` rule
    converged: Callable[[float, float], bool] | None = None
    #: whether the sites of :class:`probdr.infer.map.MAPFit`'s ``site_lr`` (a kernel's learned numbers) take
    #: steps in this phase; ``False`` holds them (t-SNE's early exaggeration distorts the
    #: objective they would fit)
    learn_sites: bool = True


def continue_schedule(phases: list[Phase], done: int, n_iter: int) -> list[Phase]:
    """The phases of the next ``n_iter`` steps of the schedule ``phases`` after ``done`` steps.

    First the rest of the schedule as planned: an unfinished phase goes on where it stopped, a
    linear decay at the rates of the uninterrupted schedule, so that a schedule stopped after
    ``done`` steps and continued is the uninterrupted one, step for step. Past the schedule's
    end its last phase is prolonged: a constant learning rate goes on; a linear decay is
    stretched to the new end, its new steps taking the rates that the same decay planned
    ``done + n_iter`` steps long gives them (a decay from ``lr0`` to 0 over a phase of ``a``
    steps, prolonged by ``b``, restarts at ``lr0 * b / (a + b)`` and decays to 0 again).
    """
    out, start, left = [], 0, int(n_iter)
    for i, ph in enumerate(phases):
        last = i == len(phases) - 1
        pos, length = done - start, ph.decay_steps or ph.n_iter
        start += ph.n_iter
        if left <= 0 or (pos >= ph.n_iter and not last):
            continue
        steps = left if last else min(left, ph.n_iter - pos)
        at = ph.decay_start + pos  # the decay's step of the new phase's first step
        if last:
            length = max(length, at + steps)
        out.append(replace(ph, n_iter=steps, decay_steps=length, decay_start=at))
        left, done = left - steps, done + steps
    return out


def random_stream(device) -> list[torch.Tensor]:
    """The random state a MAP fit's draws (negative samples, sampled graphs) come from: the
    fit's generator (:func:`probdr._compute.isolation.fit_generator`), else torch's global one;
    ``[CPU state]``, or ``[CPU state, device state]`` on CUDA."""
    gen = fit_generator()
    if gen is not None:
        state = gen.get_state()
        return [state] if gen.device.type == "cpu" else [torch.get_rng_state(), state]
    state = [torch.get_rng_state()]
    if torch.device(device).type == "cuda":
        state.append(torch.cuda.get_rng_state(device))
    return state


def set_random_stream(state: list, device) -> None:
    """Set the random state that :func:`random_stream` read (the fit's generator, else torch's
    global one)."""
    gen = fit_generator()
    on_cuda = (gen.device if gen is not None else torch.device(device)).type == "cuda"
    if gen is not None:
        if gen.device.type == "cpu" or len(state) > 1:
            gen.set_state(torch.as_tensor(state[-1 if on_cuda else 0], dtype=torch.uint8).cpu())
        return
    torch.set_rng_state(torch.as_tensor(state[0], dtype=torch.uint8).cpu())
    if len(state) > 1 and on_cuda:
        torch.cuda.set_rng_state(torch.as_tensor(state[1], dtype=torch.uint8).cpu(), device)


@dataclass
class MAPResult:
    #: the MAP value of the site ``"Z"`` (``None`` for models without one: see ``values``)
    Z: torch.Tensor | None
    #: the loss of every recorded step (every step unless ``loss_every`` thinned the record;
    #: shorter than the phases' total when a stopping rule stopped)
    loss_history: np.ndarray
    n_iter: int
    #: how many times a collapsed column of Z was re-centred and rescaled
    n_rescued: int = 0
    #: the MAP value of every initialised latent site, ``{site: tensor}``
    values: dict[str, torch.Tensor] = field(default_factory=dict)
    #: the optimiser's state at the end (:meth:`MAPFit.export_state`), to continue the fit
    optimizer_state: list | None = None
    #: whether a callback stopped the fit
    stopped: bool = False
    #: the step (from 1) of each entry of ``loss_history``
    loss_steps: np.ndarray | None = None
    #: torch's random state after the last step (:func:`random_stream`), to continue the fit
    stream: list | None = None
    #: how many steps the model's fused step ran (explicit gradients, no Pyro trace:
    #: :meth:`probdr.infer.map.MAPFit._fused_form`); the others ran the Pyro program
    fused_steps: int = 0


#: a column of Z whose spread (RMS about its mean) falls below this has collapsed (see
#: :func:`rescue_collapsed_columns`); it is re-centred and scaled back to ``_RESCUE_SPREAD``
COLLAPSE_FLOOR = 1e-8
_RESCUE_SPREAD = 1e-4


class LossQueue:
    """The losses of a MAP fit's steps, queued as tensors where they were computed and read on
    the host together (one transfer) when :meth:`read` is called: every step on a CPU, every
    ``probdr.config.SYNC_EVERY`` steps in the sync-free mode of accelerators. ``history`` and
    ``steps`` hold the recorded losses and their step numbers (from 1)."""

    def __init__(self, desc: str = "MAP"):
        self.desc = desc
        self.history: list[float] = []
        self.steps: list[int] = []
        self._pending: list = []

    def put(self, step: int, record: bool, loss: torch.Tensor) -> None:
        self._pending.append((step, record, loss))

    def read(self) -> float:
        """Record the queued losses marked for recording and raise at the first non-finite
        one, naming its step; returns the last value."""
        values = torch.stack([p[2] for p in self._pending]).tolist()
        for (step, record, _), value in zip(self._pending, values, strict=True):
            if record:
                self.history.append(value)
                self.steps.append(step)
            if not math.isfinite(value):
                raise FloatingPointError(
                    f"{self.desc}: the loss became non-finite at step {step - 1}; lower the "
                    "learning rate or use dtype='float64'.")
        self._pending.clear()
        return values[-1]


class SyncFreeELBO(Trace_ELBO):
    """``Trace_ELBO`` whose differentiable loss never reads a value on the host.

    ``Trace_ELBO.differentiable_loss`` returns ``loss + (surrogate - surrogate.item())``, with
    ``loss`` summed from ``.item()`` of every site and a NaN check (``bool``): several host
    synchronisations per step. With reparametrised guides (every guide of the MAP driver) the
    surrogate *is* the loss: this returns it, the same autograd graph and, to the last bit of
    float32 rounding, the same value."""

    def differentiable_loss(self, model, guide, *args, **kwargs):
        loss = 0.0
        for model_trace, guide_trace in self._get_traces(model, guide, args, kwargs):
            elbo = 0.0
            for site in model_trace.nodes.values():
                if site["type"] == "sample":
                    elbo = elbo + site["log_prob_sum"]
            for site in guide_trace.nodes.values():
                if site["type"] != "sample":
                    continue
                _, score, entropy = site["score_parts"]
                if not is_identically_zero(score):
                    raise ValueError("the sync-free MAP loss needs reparametrised guide sites.")
                if not is_identically_zero(entropy):
                    elbo = elbo - entropy.sum()
            loss = loss - elbo / self.num_particles
        return loss


def point_mass_loss(model: Callable, guide: Callable, *args, **kwargs) -> torch.Tensor:
    r""":math:`-\log p(x, z)` at the values of a point-mass guide (``AutoDelta``, a change of
    variables' Delta): the loss ``Trace_ELBO`` differentiates for such a guide, with the same
    gradient and the value of :class:`SyncFreeELBO`, without scoring the guide (a Delta's
    log-density at its own value is 0, with no gradient: a pass over Z and its comparison at
    every step) nor reading any value on the host. The model runs against the guide's trace
    with its subsampled sites pruned and its log-densities summed in site order, as in
    ``get_importance_trace``; under validation the model and the guide are checked to match."""
    from pyro import poutine
    from pyro.infer.enum import check_model_guide_match
    from pyro.infer.util import is_validation_enabled
    from pyro.poutine.util import prune_subsample_sites

    guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
    model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args,
                                                                                   **kwargs)
    if is_validation_enabled():
        check_model_guide_match(model_trace, guide_trace)
    model_trace = prune_subsample_sites(model_trace)
    model_trace.compute_log_prob()
    elbo = 0.0
    for site in model_trace.nodes.values():
        if site["type"] == "sample":
            elbo = elbo + site["log_prob_sum"]
    return 0.0 - elbo


class _LatentScale(Messenger):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def _process_message(self, msg):
        if msg["type"] == "sample" and not msg["is_observed"]:
            msg["scale"] = self.scale * msg["scale"]


def latent_share(model: Callable, share: float) -> Callable:
    """``model`` with the log-densities of its latent sample sites (those not observed: the
    prior of Z) scaled by ``share``. In a data-parallel fit every rank holds the whole latent
    sites, and a data-parallel model evaluates the rank's share of the rest
    (:mod:`probdr._compute.distributed`): each rank carries ``share = 1 / world size`` of the
    priors, so that the ranks' shares sum to the log joint."""
    return _LatentScale(share)(model)


class OptimiserHooks(Messenger):
    """The optimiser's heuristics, applied to a model by Pyro's effects: the model states the
    model only, and asks the effects that these answer (by default: no clip, one step an epoch,
    an independent draw).

    * ``pair_grad_clip``: umap-learn's clamp of each pair's gradient contribution to ``[-c,
      c]`` per coordinate (not the objective's), in the latent weights' edge sums
      (:data:`probdr._compute.edges.optimiser_pair_grad_clip`);
    * ``epoch_steps``, ``whole_epoch``: negative sampling's epoch cut into optimiser steps, each
      using its share of the edges, weighted as its share or (``whole_epoch``: posterior
      inference, which needs the likelihood's weight against the prior) as the whole epoch
      (:data:`probdr._compute.edges.epoch_edges`);
    * ``step``: the number of the step being run in the whole fit, from 0, which the MAP driver
      sets around each step (:class:`probdr.infer.map.MAPFit`; ``None`` outside its steps): the
      epoch schedule takes that step's edges.

    A setting left ``None`` leaves the effect to the handlers outside (or to its default)."""

    def __init__(self, pair_grad_clip: float | None = None, epoch_steps: int | None = None,
                 whole_epoch: bool | None = None, step: int | None = None):
        super().__init__()
        self.pair_grad_clip, self.epoch_steps = pair_grad_clip, epoch_steps
        self.whole_epoch, self.step = whole_epoch, step

    def _pyro_pair_grad_clip(self, msg) -> None:
        if msg["value"] is None and self.pair_grad_clip is not None:
            msg["value"] = self.pair_grad_clip

    def _pyro_epoch_edges(self, msg) -> None:
        settings = {"steps": self.epoch_steps, "whole_epoch": self.whole_epoch,
                    "index": self.step}
        msg["kwargs"].update({k: v for k, v in settings.items() if v is not None})


class HookedModel:
    """``model`` run under :class:`OptimiserHooks` (:func:`with_hooks`); the model's
    declarations (``data_parallel``, ``point_precisions``) read through."""

    def __init__(self, model: Callable, hooks: OptimiserHooks):
        self.model, self.hooks = model, hooks

    def __call__(self, *args, **kwargs):
        with self.hooks:
            return self.model(*args, **kwargs)

    def copy(self) -> HookedModel:
        """The same model under a copy of its hooks: a Pyro handler is entered once at a time,
        so each thread running the model (the sampler's chains) needs its own."""
        return HookedModel(self.model, copy.copy(self.hooks))

    def fused_step(self, *args, **kwargs):
        """The model's fused step (``model.fused_step``, e.g.
        :func:`probdr.models.coupling_fused.coupling_fused_step`) made and run under the hooks,
        whose effects it reads as the model does; ``None`` where the model has none."""
        make = getattr(self.model, "fused_step", None)
        if make is None:
            return None
        with self.hooks:
            step = make(*args, **kwargs)
        if step is None:
            return None

        def hooked(*a, **k):
            with self.hooks:
                return step(*a, **k)
        return hooked

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("model", "hooks"):
            raise AttributeError(name)
        return getattr(self.model, name)


def with_hooks(model: Callable, **settings) -> Callable:
    """``model`` with the optimiser's heuristics ``settings`` (:class:`OptimiserHooks`:
    ``pair_grad_clip``, ``epoch_steps``, ``whole_epoch``) applied to its sites; ``model`` itself
    when every setting is ``None``."""
    if all(v is None for v in settings.values()):
        return model
    return HookedModel(model, OptimiserHooks(**settings))


def column_spread(Z: torch.Tensor) -> torch.Tensor:
    """RMS of each column of Z about its mean."""
    return (Z - Z.mean(0)).square().mean(0).sqrt()


def _spread_above(Z: torch.Tensor, level: float) -> bool:
    """Whether every column's spread (:func:`column_spread`) is above ``level``, by one fused
    pass (``var_mean``; five passes and two temporaries for :func:`column_spread`, which at
    70,000 points was about 4 % of a UMAP step). Its rounding differs from :func:`column_spread`'s
    by far less than the factor 2 the rescue's check leaves, which then takes the exact spread."""
    var = torch.var_mean(Z, dim=0, correction=0)[0]
    return bool((var > level * level).all())


@torch.no_grad()
def rescue_collapsed_columns(Z: torch.Tensor, opt, floor: float, sync_free: bool = False):
    """Re-centre and scale up every column of ``Z`` whose spread fell below ``floor``, and scale
    the optimiser's velocity with it; returns the number of columns rescued (``sync_free``: as a
    tensor, and without the host's early exit -- the unselected columns are written back
    unchanged and their velocity multiplied by 1, the same numbers).

    Why: with early exaggeration and a broad input affinity (high perplexity: attraction beats
    repulsion at every scale) gradient descent contracts the embedding geometrically, about
    0.75x per step on the digits at perplexity 300, from the 1e-4 initial scale towards 0.
    float32 then rounds the points of a column onto a few values (its mean, drifting under the
    per-coordinate gains, dominates its spread) and coincident points feel no force, so the fit
    returns a collapsed embedding. openTSNE survives this regime only thanks to float64.

    Why it is exact: while a column's spread is far below the kernel's unit scale, the squared
    distances it contributes are negligible and the gradient is linear in that column (the
    weights w_ij = k(d_ij^2) depend on the others), and every model term in it is invariant to
    translation (pairwise differences). Scaling the column by c > 0 and its velocity by c (the
    gains and momentum updates are then scaled by c too) maps the trajectory onto the scaled
    trajectory, up to O(spread^2) relative terms (1e-8 at the rescued scale 1e-4). A Gaussian
    prior on Z is linear too but not translation invariant; its pull on the mean is negligible
    at these scales.
    """
    if not sync_free and _spread_above(Z, 2.0 * floor):
        return 0
    spread = column_spread(Z)
    low = (spread < floor) & (spread > 0)
    if not sync_free and not bool(low.any()):
        return 0
    factor = torch.where(low, _RESCUE_SPREAD / spread.clamp_min(1e-300), torch.ones_like(spread))
    Z.copy_(torch.where(low, (Z - Z.mean(0)) * factor, Z))
    opt.scale_state_(Z, factor)
    return low.sum() if sync_free else int(low.sum())


def make_optimizer(name: str, params, phase: Phase):
    """A new optimiser ``name`` (:data:`OPTIMIZERS`) of the parameters at the phase's settings."""
    if name == "gains":
        return GainsMomentum(params, lr=phase.learning_rate, momentum=phase.momentum)
    if name == "sgd":
        return SGD(params, lr=phase.learning_rate, momentum=phase.momentum)
    if name == "adam":
        return Adam(params, lr=phase.learning_rate)
    if name == "lbfgs":
        return torch.optim.LBFGS(params, lr=phase.learning_rate, max_iter=20, history_size=20,
                                 tolerance_grad=1e-300, tolerance_change=1e-300,
                                 line_search_fn="strong_wolfe")
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}.")


def carry_optimizer(opt, phase):
    """Keep the optimiser's state (gains, velocity, moments); set the phase's lr and momentum."""
    for g in opt.param_groups:
        g["lr"] = phase.learning_rate
        g["momentum"] = phase.momentum


def reparam_guide(init_values, reparam):
    """The point-mass guide of a change of variables: ``reparam[site] = (to, from)``, the site
    ``to(raw)`` with the parameter ``raw`` started at ``from(init)``."""
    import pyro.distributions as dist

    raw0 = {k: reparam[k][1](v.detach()).clone() for k, v in init_values.items()}

    def guide(*args, **kwargs):
        for k, v0 in raw0.items():
            raw = pyro.param(k + "_raw", v0)
            pyro.sample(k, dist.Delta(reparam[k][0](raw), event_dim=v0.ndim))

    return guide
