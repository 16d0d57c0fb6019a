r"""The mode a posterior starts from: a MAP fit continued until a convergence rule holds.

An estimator's MAP runs a fixed schedule (t-SNE's early exaggeration, then a fixed number of
steps) tuned for the picture, not for the optimum, and at the posterior's prior and temperature
the optimum moves. A posterior approximated around where the schedule stopped is centred off
the mode. :func:`converge_mode` continues from there, on the posterior's own density (its prior,
its coupling weight, no exaggeration), until a rule says the mode is reached or a cap is hit:

* a **deterministic** log density (exact or FFT repulsion, the Wishart models): L-BFGS, until
  the negative log density changes by less than ``tol`` relative to its size between two
  calls of 20 iterations (:class:`~probdr.infer.schedule.RelativeChange`);
* a **stochastic** one (negative sampling, sampled normalisers; two evaluations at one point
  differ): Adam in windows of :data:`WINDOW` steps, its learning rate halved after each window,
  until the mean loss of a window differs from the last one's by less than twice their
  standard error, the noise of the objective.

:class:`Mode` records the rule's verdict, the steps taken and the gradient's size at the end.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyro.poutine as poutine
import torch

from .._compute.isolation import validation_off
from .map import run_map
from .schedule import Phase, RelativeChange, windows_agree

__all__ = ["Mode", "converge_mode", "log_density", "MODE_TOL", "MODE_MAX_CALLS", "WINDOW",
           "MAX_WINDOWS", "DENSITY_EVALUATIONS"]

#: the relative change of the negative log density between two L-BFGS calls that ends the search
MODE_TOL = 1e-9
#: L-BFGS calls (of 20 iterations) at most
MODE_MAX_CALLS = 50
#: Adam steps per window of the stochastic rule, and windows at most
WINDOW = 100
MAX_WINDOWS = 12
#: Adam's first learning rate, relative to the embedding's RMS radius (1 if all points coincide)
ADAM_RATE = 0.02
#: evaluations averaged by :func:`log_density` where the density is a random estimate
DENSITY_EVALUATIONS = 8


@dataclass
class Mode:
    #: the mode (``(n, q)``, the start's dtype and device)
    Z: torch.Tensor
    #: whether the rule held before the cap
    converged: bool
    #: optimiser steps taken (L-BFGS calls, or Adam steps)
    steps: int
    #: the RMS over coordinates of the negative log density's gradient at ``Z``, divided by its
    #: RMS at the start (a deterministic density; ``nan`` for a stochastic one, whose gradient
    #: is noise at the mode)
    grad_ratio: float
    #: ``"lbfgs"`` or ``"adam"``
    rule: str


def _neg_log_joint(model: Callable, kwargs: dict[str, Any], Z: torch.Tensor) -> torch.Tensor:
    with validation_off():
        tr = poutine.trace(poutine.condition(model, data={"Z": Z})).get_trace(**kwargs)
        return -tr.log_prob_sum()


def _grad_rms(model, kwargs, Z) -> float:
    Z = Z.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(_neg_log_joint(model, kwargs, Z), Z)
    return float(g.square().mean().sqrt())


def log_density(model: Callable, kwargs: dict[str, Any], Z: torch.Tensor,
                evaluations: int = DENSITY_EVALUATIONS) -> float:
    """The model's log density at ``Z`` (prior and weighted likelihood, up to a constant): one
    evaluation of a deterministic density, the mean of ``evaluations`` of a stochastic one
    (negative sampling), so that two modes can be compared."""
    with torch.no_grad():
        first = _neg_log_joint(model, kwargs, Z)
        if evaluations <= 1 or not is_stochastic(model, kwargs, Z):
            return -float(first)
        rest = [_neg_log_joint(model, kwargs, Z) for _ in range(evaluations - 1)]
    return -float(torch.stack([first, *rest]).mean())


def is_stochastic(model: Callable, kwargs: dict[str, Any], Z: torch.Tensor) -> bool:
    """Whether two evaluations of the negative log density at ``Z`` differ."""
    with torch.no_grad():
        a, b = _neg_log_joint(model, kwargs, Z), _neg_log_joint(model, kwargs, Z)
    return not bool(torch.equal(a, b))


def converge_mode(model: Callable, model_kwargs: dict[str, Any], Z0: torch.Tensor, *,
                  reparam: dict | None = None, tol: float = MODE_TOL,
                  max_calls: int = MODE_MAX_CALLS, max_windows: int = MAX_WINDOWS,
                  desc: str = "mode", warn: bool = True) -> Mode:
    """The mode of ``model``'s log density from ``Z0`` by the rule of the module's docstring;
    warns (``warn``) when the cap was hit first."""
    Z0 = Z0.detach()
    if is_stochastic(model, model_kwargs, Z0):
        mode = _adam_windows(model, model_kwargs, Z0, reparam, max_windows)
    else:
        start = _grad_rms(model, model_kwargs, Z0)
        res = run_map(model, model_kwargs, {"Z": Z0.clone()},
                      [Phase(max_calls, 1.0, converged=RelativeChange(tol), name="mode")],
                      optimizer="lbfgs", reparam=reparam, collapse_floor=None,
                      warn_collapse=False, desc=desc)
        Z = res.Z.detach().to(Z0.dtype)
        end = _grad_rms(model, model_kwargs, Z)
        mode = Mode(Z, res.n_iter < max_calls, res.n_iter, end / start if start > 0 else 0.0,
                    "lbfgs")
    if warn and not mode.converged:
        warnings.warn(f"{desc}: the posterior's mode search hit its cap ({mode.steps} "
                      f"{'L-BFGS calls' if mode.rule == 'lbfgs' else 'Adam steps'}) before "
                      "its convergence rule held; the posterior is centred where it stopped.",
                      RuntimeWarning, stacklevel=3)
    return mode


def _adam_windows(model, kwargs, Z0, reparam, max_windows: int) -> Mode:
    """Adam in windows of :data:`WINDOW` steps, the rate halved after each, until two windows'
    mean losses agree within twice their standard error."""
    spread = float((Z0 - Z0.mean(0)).square().sum(1).mean().sqrt())
    rate, Z, previous = ADAM_RATE * (spread if spread > 0 else 1.0), Z0.clone(), None
    for w in range(1, max_windows + 1):
        res = run_map(model, kwargs, {"Z": Z}, [Phase(WINDOW, rate, name="mode")],
                      optimizer="adam", reparam=reparam, collapse_floor=None,
                      warn_collapse=False, desc="mode")
        Z, losses = res.Z.detach().to(Z0.dtype), np.asarray(res.loss_history, dtype=np.float64)
        if previous is not None and windows_agree(previous, losses)[0]:
            return Mode(Z, True, w * WINDOW, float("nan"), "adam")
        previous, rate = losses, rate / 2
    return Mode(Z, False, max_windows * WINDOW, float("nan"), "adam")
