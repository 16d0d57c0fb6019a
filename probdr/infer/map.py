"""MAP inference for probdr's Pyro models: AutoDelta guide, Trace_ELBO, scheduled optimisers.

A fit is a list of :class:`Phase` objects (e.g. early exaggeration then the main phase); each
phase sets the number of steps, the model keyword arguments that change (``exaggeration``), the
learning rate (constant or linearly decaying) and the momentum.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyro
import torch
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoDelta
from pyro.infer.autoguide.initialization import init_to_value
from tqdm.auto import tqdm

from .._alloc import heap_reuse
from ..optim import SGD, Adam, GainsMomentum

__all__ = ["Phase", "MAPResult", "run_map", "map_estimate"]


@dataclass
class Phase:
    """One stage of a MAP fit."""

    n_iter: int
    learning_rate: float
    momentum: float = 0.0
    #: learning rate at the end of the phase (linear decay); ``None`` keeps it constant
    final_learning_rate: float | None = None
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    name: str = "optimise"
    #: stop the phase early once the relative loss variation
    #: ``|l_t - l_{t-1}| / |l_{t-1} + tol_offset|`` falls below ``tol`` (the SNEkhorn thesis'
    #: rule, there with tol 1e-5 on the KL); ``None`` runs all ``n_iter`` steps
    tol: float | None = None
    #: added to the recorded loss in that rule's denominator, e.g. to turn the model's negative
    #: log-likelihood into the KL divergence whose relative variation is meant
    tol_offset: float = 0.0


@dataclass
class MAPResult:
    Z: torch.Tensor
    #: the loss of every step run (shorter than the phases' total when a ``tol`` rule stopped)
    loss_history: np.ndarray
    n_iter: int
    #: how many times a collapsed column of Z was re-centred and rescaled
    n_rescued: int = 0


#: a column of Z whose spread (RMS about its mean) falls below this has collapsed (see
#: :func:`_rescue_collapsed_columns`); it is re-centred and scaled back to ``_RESCUE_SPREAD``
COLLAPSE_FLOOR = 1e-8
_RESCUE_SPREAD = 1e-4


def _column_spread(Z: torch.Tensor) -> torch.Tensor:
    """RMS of each column of Z about its mean."""
    return (Z - Z.mean(0)).square().mean(0).sqrt()


@torch.no_grad()
def _rescue_collapsed_columns(Z: torch.Tensor, opt, floor: float) -> int:
    """Re-centre and scale up every column of ``Z`` whose spread fell below ``floor``, and scale
    the optimiser's velocity with it; returns the number of columns rescued.

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
    spread = _column_spread(Z)
    low = (spread < floor) & (spread > 0)
    if not bool(low.any()):
        return 0
    factor = torch.where(low, _RESCUE_SPREAD / spread.clamp_min(1e-300), torch.ones_like(spread))
    Z.copy_(torch.where(low, (Z - Z.mean(0)) * factor, Z))
    opt.scale_state_(Z, factor)
    return int(low.sum())


def _make_optimizer(name: str, params, phase: Phase):
    if name == "gains":
        return GainsMomentum(params, lr=phase.learning_rate, momentum=phase.momentum)
    if name == "sgd":
        return SGD(params, lr=phase.learning_rate, momentum=phase.momentum)
    if name == "adam":
        return Adam(params, lr=phase.learning_rate)
    raise ValueError(f"optimizer must be 'gains', 'sgd' or 'adam', got {name!r}.")


def run_map(
    model: Callable,
    model_kwargs: dict[str, Any],
    Z0: torch.Tensor,
    phases: list[Phase],
    *,
    optimizer: str = "gains",
    loss_scale: float = 1.0,
    grad_clip: float | None = None,
    observe: Callable[[], torch.Tensor] | None = None,
    collapse_floor: float | None = COLLAPSE_FLOOR,
    verbose: bool = False,
    desc: str = "MAP",
) -> MAPResult:
    """Maximise the model's log joint over its latent site ``Z`` by SVI with a Delta guide.

    Parameters
    ----------
    model : callable
        Pyro model with a sample site ``"Z"``.
    model_kwargs : dict
        Keyword arguments passed to the model at every step (a phase may override some).
    Z0 : tensor (n, q)
        Initial value of Z.
    phases : list of Phase
    optimizer : {"gains", "sgd", "adam"}
    loss_scale : float
        The optimiser sees ``loss_scale * loss`` (e.g. ``1/n`` gives t-SNE's KL gradient scale).
    grad_clip : float, optional
        Clamp every gradient coordinate to ``[-grad_clip, grad_clip]`` (UMAP clips at 4).
    observe : callable, optional
        Returns the observed graph for each step (Monte Carlo coupling over W_X); it is passed to
        the model as its first argument ``W_X``.
    collapse_floor : float or None
        With the "gains" and "sgd" optimisers, a column of Z whose spread falls below this
        value is re-centred and scaled back to 1e-4 together with its velocity, an exact
        symmetry of the dynamics at such scales (see :func:`_rescue_collapsed_columns`; it
        happens under early exaggeration with broad input affinities). ``None`` disables it.
        A column whose spread is below the floor at the end (possible with Adam or without
        the rescue) raises a ``RuntimeWarning``.
    """
    pyro.clear_param_store()
    guide = AutoDelta(model, init_loc_fn=init_to_value(values={"Z": Z0.detach().clone()}))
    elbo = Trace_ELBO()
    base_kwargs = dict(model_kwargs)
    if observe is not None:
        base_kwargs["W_X"] = observe()
    guide(**base_kwargs)  # create the parameters
    params = [p for p in guide.parameters()]
    Z_param = next((p for p in params if p.shape == Z0.shape), None)
    rescue = (collapse_floor is not None and optimizer in ("gains", "sgd")
              and Z_param is not None and Z0.ndim == 2)
    n_rescued = 0
    history = np.empty(sum(ph.n_iter for ph in phases))
    total = len(history)
    step = 0
    opt = None
    with tqdm(total=total, desc=desc, disable=not verbose, leave=False) as bar, \
            pyro.validation_enabled(False), heap_reuse():
        for phase in phases:
            if opt is None or optimizer != "gains":
                opt = _make_optimizer(optimizer, params, phase)
            else:  # keep gains and velocity across phases
                _carry_optimizer(opt, phase)
            kwargs = {**base_kwargs, **phase.model_kwargs}
            for t in range(phase.n_iter):
                if phase.final_learning_rate is not None:
                    frac = t / max(phase.n_iter, 1)
                    lr = phase.learning_rate + frac * (phase.final_learning_rate - phase.learning_rate)
                    for g in opt.param_groups:
                        g["lr"] = lr
                if observe is not None:
                    kwargs["W_X"] = observe()
                opt.zero_grad(set_to_none=True)
                loss = elbo.differentiable_loss(model, guide, **kwargs)
                (loss * loss_scale).backward()
                if grad_clip is not None:
                    for p in params:
                        p.grad.clamp_(-grad_clip, grad_clip)
                opt.step()
                if rescue:
                    n_rescued += _rescue_collapsed_columns(Z_param, opt, collapse_floor)
                history[step] = loss.item()
                if not np.isfinite(history[step]):
                    raise FloatingPointError(
                        f"{desc}: the loss became non-finite at step {step}; lower the learning "
                        "rate or use dtype='float64'.")
                step += 1
                if verbose and (step % 50 == 0 or step == total):
                    bar.set_postfix(loss=f"{history[step - 1]:.4g}", phase=phase.name)
                    bar.update(50 if step % 50 == 0 else total % 50)
                if phase.tol is not None and t >= 1:
                    prev = history[step - 2]
                    if abs(history[step - 1] - prev) < phase.tol * abs(prev + phase.tol_offset):
                        break
    with torch.no_grad():
        Z = guide.median(**base_kwargs)["Z"].detach()
    if Z.ndim == 2 and Z.shape[0] > 1:
        flat = (Z.amax(0) == Z.amin(0)) | (_column_spread(Z) < (collapse_floor or COLLAPSE_FLOOR))
        if bool(flat.any()):
            warnings.warn(f"{desc}: the embedding collapsed: column(s) "
                          f"{flat.nonzero().flatten().tolist()} have a spread below "
                          f"{collapse_floor or COLLAPSE_FLOOR:g} (points nearly or exactly "
                          "equal). Lower the early exaggeration or the perplexity, or change the "
                          "initialisation.", RuntimeWarning, stacklevel=2)
    return MAPResult(Z=Z, loss_history=history[:step], n_iter=step, n_rescued=n_rescued)


def _carry_optimizer(opt, phase):
    """Keep the optimiser's state (gains, velocity) across phases; change lr and momentum."""
    for g in opt.param_groups:
        g["lr"] = phase.learning_rate
        g["momentum"] = phase.momentum
    return opt


# --------------------------------------------------------------------------------------------
# MAP driver for the Wishart models (AutoDelta + L-BFGS or Adam)
# --------------------------------------------------------------------------------------------
def map_estimate(
    model,
    model_kwargs: dict,
    init_values: dict[str, torch.Tensor],
    *,
    optimizer: str = "lbfgs",
    n_iter: int = 500,
    lr: float = 1.0,
    tol: float = 1e-12,
    return_history: bool = False,
    reparam: dict | None = None,
):
    r"""MAP of a Pyro model with flat-prior latent sites: an ``AutoDelta`` guide started at
    ``init_values`` and the negative log joint ``Trace_ELBO().differentiable_loss`` minimised by

    * ``"lbfgs"``: ``torch.optim.LBFGS`` (strong-Wolfe line search) for ``n_iter`` iterations,
      stopping when the loss changes by less than ``tol`` (relative) -- the precise solver used
      for the closed-form oracles;
    * ``"adam"``: ``pyro.infer.SVI`` with ``pyro.optim.Adam(lr)`` for ``n_iter`` steps.

    ``reparam`` maps a site name to ``(to_site, from_site)``, two mutually inverse maps: the
    optimiser then works on ``pyro.param(name + "_raw") = from_site(init)`` and the guide puts a
    point mass at ``to_site(raw)`` -- a change of variables that preconditions badly scaled MAP
    problems without changing the maximiser (flat priors, Delta guide).

    The fit runs in a private Pyro parameter-store scope, so it never touches the caller's
    parameters. Returns ``{site: value}`` (and the loss history if ``return_history``).
    """
    import pyro
    from pyro.infer import SVI, Trace_ELBO
    from pyro.infer.autoguide import AutoDelta
    from pyro.infer.autoguide.initialization import init_to_value

    history: list[float] = []
    with pyro.get_param_store().scope():
        if reparam:
            guide = _reparam_guide(init_values, reparam)
        else:
            guide = AutoDelta(model, init_loc_fn=init_to_value(
                values={k: v.detach().clone() for k, v in init_values.items()}))
        elbo = Trace_ELBO()
        if optimizer == "adam":
            svi = SVI(model, guide, pyro.optim.Adam({"lr": lr}), elbo)
            for _ in range(n_iter):
                history.append(svi.step(**model_kwargs))
                if not math.isfinite(history[-1]):
                    raise FloatingPointError("MAP: the loss became non-finite; lower lr.")
        elif optimizer == "lbfgs":
            guide(**model_kwargs)
            store = pyro.get_param_store()
            params = [store[name].unconstrained() for name in store.get_all_param_names()]
            opt = torch.optim.LBFGS(params, lr=lr, max_iter=20, history_size=20,
                                    tolerance_grad=1e-300, tolerance_change=1e-300,
                                    line_search_fn="strong_wolfe")

            def closure():
                opt.zero_grad(set_to_none=True)
                loss = elbo.differentiable_loss(model, guide, **model_kwargs)
                loss.backward()
                return loss

            prev = None
            for _ in range(max(1, n_iter // 20)):
                loss = float(opt.step(closure).detach())
                history.append(loss)
                if not math.isfinite(loss):
                    raise FloatingPointError("MAP: the loss became non-finite.")
                if prev is not None and abs(prev - loss) <= tol * max(1.0, abs(loss)):
                    break
                prev = loss
        else:
            raise ValueError(f"optimizer must be 'lbfgs' or 'adam', got {optimizer!r}.")
        with torch.no_grad():
            if reparam:
                values = {k: reparam[k][0](pyro.param(k + "_raw")).detach().clone()
                          for k in init_values}
            else:
                values = {k: v.detach().clone() for k, v in guide.median(**model_kwargs).items()}
    if return_history:
        return values, np.asarray(history)
    return values


def _reparam_guide(init_values, reparam):
    import pyro
    import pyro.distributions as dist

    raw0 = {k: reparam[k][1](v.detach()).clone() for k, v in init_values.items()}

    def guide(*args, **kwargs):
        for k, v0 in raw0.items():
            raw = pyro.param(k + "_raw", v0)
            pyro.sample(k, dist.Delta(reparam[k][0](raw), event_dim=v0.ndim))

    return guide
