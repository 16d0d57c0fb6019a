"""MAP inference for probdr's Pyro models: AutoDelta guide, Trace_ELBO, scheduled optimisers.

A fit is a list of :class:`Phase` objects (e.g. early exaggeration then the main phase); each
phase sets the number of steps, the model keyword arguments that change (``exaggeration``), the
learning rate (constant or linearly decaying) and the momentum.
"""

from __future__ import annotations

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
from .optim import SGD, Adam, GainsMomentum

__all__ = ["Phase", "MAPResult", "run_map"]


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
    """
    pyro.clear_param_store()
    guide = AutoDelta(model, init_loc_fn=init_to_value(values={"Z": Z0.detach().clone()}))
    elbo = Trace_ELBO()
    base_kwargs = dict(model_kwargs)
    if observe is not None:
        base_kwargs["W_X"] = observe()
    guide(**base_kwargs)  # create the parameters
    params = [p for p in guide.parameters()]
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
    return MAPResult(Z=Z, loss_history=history[:step], n_iter=step)


def _carry_optimizer(opt, phase):
    """Keep the optimiser's state (gains, velocity) across phases; change lr and momentum."""
    for g in opt.param_groups:
        g["lr"] = phase.learning_rate
        g["momentum"] = phase.momentum
    return opt
