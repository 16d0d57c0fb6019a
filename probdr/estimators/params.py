"""What each estimator parameter may be, declared once by name (scikit-learn's
``_parameter_constraints``), checked by scikit-learn's validator when ``fit`` starts
(``sklearn.base._fit_context``), before any work.

A parameter means the same thing in every estimator that has it, so its constraint lives in one
table, :data:`PARAMETERS`; a class whose parameter differs declares an override in
``_constraint_overrides`` (merged along its bases). :class:`~probdr.estimators.base.DREstimator`
builds each class's ``_parameter_constraints`` from its ``__init__`` signature when the class
is defined. Three places, in the order ``fit`` runs them:

* the table: each parameter alone (its type, its choices, its range);
* ``_check_params_together()``: what the table cannot state and needs no data -- relations
  between parameters (``solver="closed_form"`` needs ``alpha=0``) and the contents of array
  parameters (:func:`check_init`); it raises ``InvalidParameterError`` too;
* ``_check_params_vs_input(n, p)``: the rules that need the data (``perplexity < n - 1``,
  ``n_components <= p``, an ``init`` array of n rows).

Numbers: integers refuse booleans, reals refuse booleans, NaN and infinities; numpy scalars are
numbers. A wrong value raises scikit-learn's ``InvalidParameterError`` (a ``ValueError`` and a
``TypeError``) naming the parameter, the estimator and what it may be.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, InvalidParameterError, StrOptions

__all__ = ["Int", "Num", "PARAMETERS", "constraints_for", "check_init", "POSITIVE", "StrOptions",
           "InvalidParameterError", "NEIGHBORS", "MAX_SEED", "EARLY_EXAGGERATION_ITER",
           "early_exaggeration_steps"]


class Int(Interval):
    """An integer in ``[left, right]`` (``None``: unbounded); booleans are refused."""

    def __init__(self, left=None, right=None, *, closed="both"):
        if closed == "both" and right is None:
            closed = "left" if left is not None else "neither"
        super().__init__(Integral, left, right, closed=closed)

    def is_satisfied_by(self, val):
        return not isinstance(val, (bool, np.bool_)) and super().is_satisfied_by(val)


class Num(Interval):
    """A finite real number in the interval; booleans, NaN and infinities are refused."""

    def __init__(self, left=None, right=None, *, closed="both"):
        if right is None and closed in ("both", "right"):
            closed = "left" if closed == "both" else "neither"
        super().__init__(Real, left, right, closed=closed)

    def is_satisfied_by(self, val):
        return (not isinstance(val, (bool, np.bool_)) and isinstance(val, Real)
                and bool(np.isfinite(val)) and super().is_satisfied_by(val))

    def __str__(self):
        return "a finite " + super().__str__().removeprefix("a ")


POSITIVE = Num(0, None, closed="neither")
NONNEGATIVE = Num(0, None, closed="left")
FRACTION = Num(0, 1, closed="left")  # momentum: [0, 1)
#: random_state integers accepted (numpy's legacy seeding takes 32-bit seeds)
MAX_SEED = 2**32 - 1
#: the neighbour searches of :func:`probdr.input.neighbors.knn`
NEIGHBORS = StrOptions({"auto", "exact", "approximate", "pynndescent"})

#: the early-exaggeration steps of ``early_exaggeration_iter="auto"`` in a long fit
#: (openTSNE's and scikit-learn's 250)
EARLY_EXAGGERATION_ITER = 250


def early_exaggeration_steps(early_exaggeration_iter, n_iter: int) -> int:
    """The early-exaggeration steps of a fit of ``n_iter`` steps in all: the number given, or
    for ``"auto"`` min(250, n_iter // 3) (250 of the default 750; a third of a shorter fit,
    as the command line does with ``--n-iter``)."""
    if isinstance(early_exaggeration_iter, str):
        return min(EARLY_EXAGGERATION_ITER, int(n_iter) // 3)
    return int(early_exaggeration_iter)


def check_early_exaggeration(early_exaggeration_iter, n_iter: int) -> None:
    """An ``early_exaggeration_iter`` given as a number fits in ``n_iter``; the message says
    what to set. Raises ``InvalidParameterError``."""
    if isinstance(early_exaggeration_iter, str) or early_exaggeration_iter <= n_iter:
        return
    raise InvalidParameterError(
        f"early_exaggeration_iter={early_exaggeration_iter} exceeds n_iter={n_iter}: set "
        f"early_exaggeration_iter='auto' (min(250, n_iter // 3) = "
        f"{early_exaggeration_steps('auto', n_iter)} here) or a number up to {n_iter}, or a "
        "larger n_iter.")


#: the constraint of each parameter name, shared by every estimator that has it
PARAMETERS: dict[str, list] = {
    "n_components": [Int(1)],
    "perplexity": [POSITIVE],  # >= 1 (or > 1) where the affinity needs it: class overrides
    "n_neighbors": [Int(1), None],
    "n_iter": [Int(1)],
    "n_epochs": [Int(1), None],
    "epoch_steps": [Int(1), StrOptions({"auto"})],
    "learning_rate": [POSITIVE],
    "momentum": [FRACTION],
    "early_momentum": [FRACTION],
    "early_exaggeration": [POSITIVE],
    "early_exaggeration_iter": [Int(0), StrOptions({"auto"})],
    "negative_samples": [Int(1)],
    "negative_weight": [POSITIVE],
    "target_weight": [Num(0, 1)],
    "grad_clip": [POSITIVE, None],
    "init_scale": [POSITIVE, StrOptions({"umap"})],
    "coupling_weight": [POSITIVE],
    "callbacks_every": [Int(1)],
    "verbose": ["verbose"],
    "learning_rate_decay": ["boolean"],
    "center": ["boolean"],
    "align": ["boolean"],
    "geodesic": ["boolean"],
    "dof": [POSITIVE, StrOptions({"learn"})],
    "min_dist": [NONNEGATIVE],
    "spread": [POSITIVE],
    "tol": [POSITIVE],
    "sea_tol": [POSITIVE],
    "sinkhorn_tol": [POSITIVE],
    "sinkhorn_max_iter": [Int(1)],
    "srgw_max_iter": [Int(1)],
    "gw_max_iter": [Int(1)],
    "n_prototypes": [Int(2)],
    "n_outer": [Int(1)],
    "z_steps": [Int(1)],
    "md_epsilon": [POSITIVE],
    "n_samples": [Int(1)],
    "n_neg": [Int(1)],
    "max_n": [Int(1)],
    "beta": [POSITIVE],
    "ridge": [NONNEGATIVE, None],
    "alpha": [NONNEGATIVE],
    "gamma": [POSITIVE, None],
    "nu": [POSITIVE, None],
    "nu_x": [POSITIVE, None],
    "nu_z": [POSITIVE, None],
    "eps_tilde": [POSITIVE, None],
    "precision_scale": [POSITIVE],
    "inference": [StrOptions({"map", "svi", "laplace", "mcmc"})],
    "inference_params": [dict, None],
    "z_prior": [POSITIVE, torch.distributions.Distribution, None],  # its event shape: the data
    "observe": [StrOptions({"mean", "sample"})],
    "neighbors": [NEIGHBORS],
    "kernel_params": [dict, None],
    "init": [str, "array-like"],  # an array: finite (check_init), its rows: the data
    "callbacks": [callable, list, tuple, None],  # a list's items: callables (fit checks them)
    "random_state": [Int(0, MAX_SEED), np.random.RandomState, np.random.Generator, None],
    "n_jobs": [Int(1), Int(None, -1, closed="right"), None],  # -1: every core, -2: all but one
    "dtype": [StrOptions({"float32", "float64"}), torch.dtype],
    "device": [str, torch.device, None],  # the name and the device's presence: resolve_device
}


def constraints_for(cls) -> dict[str, list]:
    """``cls``'s ``_parameter_constraints``: the shared constraint of each ``__init__``
    parameter, then the ``_constraint_overrides`` of its bases and its own (the most derived
    wins)."""
    names = cls._get_param_names()
    out = {k: PARAMETERS[k] for k in names if k in PARAMETERS}
    for klass in reversed(cls.__mro__):
        out.update({k: v for k, v in vars(klass).get("_constraint_overrides", {}).items()
                    if k in names})
    return out


def check_init(init) -> None:
    """An ``init`` array (an initial embedding) holds finite numbers, 2-D; its shape against
    the data is the estimator's rule. Strings name a method and pass (the table checks the
    name). Raises ``InvalidParameterError``."""
    if init is None or isinstance(init, str):
        return
    a = np.asarray(init.detach().cpu() if hasattr(init, "detach") else init)
    if a.ndim != 2 or not np.issubdtype(a.dtype, np.number) or not np.isfinite(a).all():
        raise InvalidParameterError(f"init must name a method or be a 2-D array of finite numbers, got "
                         f"an array of shape {a.shape} and dtype {a.dtype}"
                         f"{' with NaN or inf' if a.dtype.kind in 'fc' else ''}.")
