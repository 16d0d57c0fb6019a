"""What each estimator parameter may be, declared once by name (scikit-learn's
``_parameter_constraints``), checked by scikit-learn's validator when ``fit`` starts
(``sklearn.base._fit_context``), before any work.

A parameter means the same thing in every estimator that has it, so its constraint lives in one
table, :data:`TABLE`, beside its description (the docstring entry that
:func:`probdr.estimators.docs.reference` writes); a class whose parameter differs declares an override in
``_constraint_overrides`` (merged along its bases). :class:`~probdr.estimators.base.DREstimator`
builds each class's ``_parameter_constraints`` from its ``__init__`` signature when the class
is defined. Three places, in the order ``fit`` runs them:

* the table: each parameter alone (its type, its choices, its range);
* ``_check_params_together()``: what the table cannot state and needs no data -- relations
  between parameters (``solver="closed_form"`` needs ``alpha=0``) and the contents of array
  parameters (``DREstimator._check_params_together``); it raises ``InvalidParameterError`` too;
* ``_check_params_vs_input(n, p)``: the rules that need the data (``perplexity < n - 1``,
  ``n_components <= p``, an ``init`` array of n rows); a graph coupling checks them where its
  ``_fit`` resolves the configuration for the data (``GraphCoupling._configure``), before any
  work.

Numbers: integers refuse booleans, reals refuse booleans, NaN and infinities; numpy scalars are
numbers. A wrong value raises scikit-learn's ``InvalidParameterError`` (a ``ValueError`` and a
``TypeError``) naming the parameter, the estimator and what it may be.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import NamedTuple

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, InvalidParameterError, StrOptions

__all__ = ["Int", "Num", "TABLE", "Row", "PARAMETERS", "DESCRIPTIONS", "constraints_for", "POSITIVE", "StrOptions",
           "InvalidParameterError", "NEIGHBORS", "MAX_SEED"]


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

class Row(NamedTuple):
    """A parameter's row of :data:`TABLE`: its constraint (scikit-learn's list; ``None``: no
    shared one) and its numpydoc entry, ``"type\n    description"`` (``None``: each class that
    has the parameter describes it in its docstring)."""

    constraint: list | None
    doc: str | None = None


def _row(constraint, doc=None) -> Row:
    return Row(constraint, doc)


#: Every parameter, one row by name, shared by every estimator that has it: its constraint and
#: its docstring entry. Adding a parameter is its ``__init__`` entry and this row
#: (:func:`probdr.estimators.docs.reference` writes the entry into the class's docstring); one
#: of GraphCoupling's reaches the presets too, whose ``__init__`` is declared from
#: GraphCoupling's (:func:`probdr.estimators.presets.declare`).
TABLE: dict[str, Row] = {
    "n_components": _row([Int(1)], """int
        Dimension q of the embedding.
    """),
    "perplexity": _row([POSITIVE], """float
        Perplexity of the entropic input affinities, in [1, n - 1): each point's Gaussian bandwidth
        is set so that its row of affinities over its 3 × perplexity nearest neighbours has this
        perplexity (an effective number of neighbours). Larger values give weight to more distant
        points.
    """),  # >= 1 (or > 1) where the affinity needs it: class overrides
    "n_neighbors": _row([Int(1), None], """int
        Neighbours per point of the kNN graph (the point itself excluded), symmetrised by union.
    """),
    "n_iter": _row([Int(1)], """int
        Optimiser steps in all, early exaggeration included.
    """),
    "n_epochs": _row([Int(1), None]),
    "epoch_steps": _row([Int(1), StrOptions({"auto"})]),
    "learning_rate": _row([POSITIVE], """float or "auto"
        Step size. "auto": for the gains optimiser max(50, n / (4 α)) in each phase, α its
        exaggeration (openTSNE's max(200, n / α) in this gradient's scale, which keeps t-SNE's
        factor 4; scikit-learn's rule), 16 times smaller with ``repulsion="sampled"``; 1 for
        "sgd" and "adam".
    """),
    "momentum": _row([FRACTION], """float
        Momentum of the main phase ("gains" and "sgd").
    """),
    "early_momentum": _row([FRACTION], """float
        Momentum of the early-exaggeration phase ("gains" and "sgd").
    """),
    "early_exaggeration": _row([POSITIVE], """float
        Multiplier of the attraction during the first ``early_exaggeration_iter`` steps.
    """),
    "early_exaggeration_iter": _row([Int(0), StrOptions({"auto"})], """int or "auto"
        Steps of early exaggeration (at most ``n_iter``); "auto": min(250, n_iter // 3).
    """),
    "negative_samples": _row([Int(1)], """int
        Negatives per edge ("negative_sampling") or per node ("sampled").
    """),
    "negative_weight": _row([POSITIVE], """float
        Weight γ of the negatives ("negative_sampling" only).
    """),
    "target_weight": _row([Num(0, 1)], """float
        Weight α in [0, 1] of the labels in ``fit(X, y)`` (probdr.input.labels): a labelled
        point's observed row is (1 - α) P_X + α P_Y, the label graph W_Y linking it to points of
        its own label; 0 ignores the labels, 1 follows only them; y = -1 marks an unknown label.
    """),
    "grad_clip": _row([POSITIVE, None], """float or None
        Clip every gradient coordinate, and every pair's force inside the model, to
        [-grad_clip, grad_clip] (umap-learn clips at 4).
    """),
    "init_scale": _row([POSITIVE, StrOptions({"umap"})], """float or "umap"
        A named initialisation is centred and scaled so that its first coordinate has this
        standard deviation (openTSNE's 1e-4); "umap" maps it to the box [0, 10] with 1e-4
        noise, as umap-learn does.
    """),
    "coupling_weight": _row([POSITIVE], """float
        Weight ω of the likelihood, an inverse temperature: the posterior concentrates on the MAP
        as it grows (spread about ω^(-1/2)); the flat-prior MAP does not depend on it.
    """),
    "callbacks_every": _row([Int(1)], """int
        Optimiser steps between two calls of the callbacks.
    """),
    "verbose": _row(["verbose"], """bool
        Show progress bars and messages during the fit.
    """),
    "learning_rate_decay": _row(["boolean"], """bool
        Decay the learning rate linearly to 0 over the main phase (umap-learn's schedule).
    """),
    "center": _row(["boolean"]),
    "align": _row(["boolean"]),
    "geodesic": _row(["boolean"]),
    "dof": _row([POSITIVE, StrOptions({"learn"})]),
    "min_dist": _row([NONNEGATIVE]),
    "spread": _row([POSITIVE]),
    "tol": _row([POSITIVE]),
    "sea_tol": _row([POSITIVE]),
    "sinkhorn_tol": _row([POSITIVE]),
    "sinkhorn_max_iter": _row([Int(1)]),
    "srgw_max_iter": _row([Int(1)]),
    "gw_max_iter": _row([Int(1)]),
    "n_prototypes": _row([Int(2)]),
    "n_outer": _row([Int(1)]),
    "z_steps": _row([Int(1)]),
    "md_epsilon": _row([POSITIVE]),
    "n_samples": _row([Int(1)]),
    "n_neg": _row([Int(1)]),
    "max_n": _row([Int(1)]),
    "beta": _row([POSITIVE]),
    "ridge": _row([NONNEGATIVE, None]),
    "alpha": _row([NONNEGATIVE]),
    "gamma": _row([POSITIVE, None]),
    "nu": _row([POSITIVE, None]),
    "nu_x": _row([POSITIVE, None]),
    "nu_z": _row([POSITIVE, None]),
    "eps_tilde": _row([POSITIVE, None]),
    "precision_scale": _row([POSITIVE]),
    "inference": _row([StrOptions({"map", "svi", "laplace", "hmc", "mcmc"})], """{"map", "svi", "laplace", "hmc", "mcmc"}
        "map": the method's point estimate (the classical embedding). "svi", "laplace", "hmc" or "mcmc":
        then a posterior over Z, p(Z | data) ∝ p(Z) p(data | Z)^ω with ω = ``coupling_weight``,
        started at the MAP embedding, and for Laplace at the mode of the posterior's density (the
        MAP continued until converged, ``mode_embedding_``; probdr.infer.mode): SVI (a Gaussian
        per point, each step the cost of a MAP step), the per-point Laplace approximation (the
        cheap option; graph couplings only), HMC preconditioned by each point's curvature (a
        sampler on the MAP's engine that scales; needs no variance factor; probdr.infer.hmc) or
        NUTS (small n). ``embedding_`` stays the MAP (bit for bit the plain fit's at the same
        seed) and ``posterior_mean_`` is the mean of the draws, aligned to ``mode_embedding_``;
        ``posterior_sd_``, ``reliability_`` and ``stability_`` score each point.
    """),
    "inference_params": _row([dict, None], """dict or None
        Options of the posterior inference (probdr.infer.posterior.SVI_OPTIONS, LAPLACE_OPTIONS
        and MCMC_OPTIONS: guide, steps, draws, chains, variance inflation, ...), and
        ``"converge"`` (the mode search: default True for Laplace, False for SVI and NUTS).
    """),
    "z_prior": _row([POSITIVE, torch.distributions.Distribution, None], """None, float or torch.distributions.Distribution
        Prior on Z. None: flat in the MAP fit; a posterior then uses the isotropic Gaussian of
        scale 10 × the RMS of the MAP embedding (``z_prior_scale_``). A float: the isotropic
        Gaussian of that scale, in the MAP fit too. A distribution: of event shape (n, q).
    """),  # its event shape: the data
    "observe": _row([StrOptions({"mean", "sample"})], """{"mean", "sample"}
        Couple with the posterior mean E[W_X] (the exact cross-entropy) or with a fresh draw of
        W_X at every step (Monte Carlo coupling).
    """),
    "neighbors": _row([NEIGHBORS], """{"auto", "exact", "approximate", "pynndescent"}
        The neighbour search (probdr.input.neighbors.knn): "auto" is exact up to 20,000 points
        (brute force, then a pruned cell search), the torch approximate search beyond;
        "pynndescent" needs the optional pynndescent package.
    """),
    "kernel_params": _row([dict, None], """dict or None
        Keyword arguments of the latent kernel, e.g. {"dof": 0.5} or {"a": 1.6, "b": 0.9}; a
        number given as "learn" ({"dof": "learn"}) is fitted by MAP with the embedding.
    """),
    "init": _row([str, "array-like"], """{"pca", "random", "spectral", "ccpca"} or array of shape (n_samples, n_components)
        Initial embedding: PCA scores, Gaussian noise, the spectral embedding of the input
        graph, ccPCA (probdr.ccPCA), or an array; a named one is rescaled by ``init_scale``.
    """),  # an array: finite (_check_params_together), its rows: the data
    "callbacks": _row([callable, list, tuple, None], """callable, list of callables or None
        Called as ``callback(step, embedding, loss)`` every ``callbacks_every`` steps of the
        optimiser; the fit stops when one returns True (``stopped_by_callback_``).
    """),  # a list's items: callables (fit checks them)
    "random_state": _row([Int(0, MAX_SEED), np.random.RandomState, np.random.Generator, None], """int, RandomState, Generator or None
        Seed of every random choice of ``fit`` (neighbour search, initialisation, sampling, as the
        method has them): torch's, numpy's and Python's random streams are seeded from it during
        ``fit`` and restored afterwards. An int in [0, 2**32 - 1] is used as it is, a numpy RandomState or Generator
        gives one draw, None takes fresh entropy from the system; the seed used is
        ``random_state_``.
    """),
    "n_jobs": _row([Int(1), Int(None, -1, closed="right"), None], """int or None
        Threads of ``fit`` and ``transform``: None keeps the process's setting, a positive int is
        that many, -1 every core, -2 all but one, ... (scikit-learn's convention). Resolved once in
        ``fit`` (``n_threads_``); the process's setting is restored afterwards.
    """),  # -1: every core, -2: all but one
    "dtype": _row([StrOptions({"float32", "float64"}), torch.dtype], """{"float32", "float64"} or torch.dtype
        Precision of the optimisation; the embedding is returned in float64 whatever it is.
    """),
    "device": _row([str, torch.device, None], """str, torch.device or None
        Where ``fit`` and ``transform`` compute: "auto" (or None) is CUDA if available, else the
        CPU; "cpu", "cuda", "cuda:1", "mps" or a torch.device are taken as they are. Resolved once
        in ``fit`` (``device_``). See the page "Devices and threads".
    """),  # the name and the device's presence: resolve_device
    "metric": _row(None, """str or callable
        Dissimilarity of the rows of X (probdr.input.distances): "euclidean", "sqeuclidean",
        "cosine", "correlation", "manhattan", "chebyshev", "minkowski", "hamming", "jaccard",
        "haversine", a callable f(x, y) -> float, or "precomputed": X is then a square matrix of
        distances, and ``transform`` takes the new points' distances to the training points.
    """),
    "metric_params": _row(None, """dict or None
        Parameters of the metric ({"p": 3} for minkowski).
    """),
    # the graph-coupling family's (their constraints: GraphCoupling._constraint_overrides)
    "prior_x": _row(None, """{"D", "B", "B~", "E"} or GraphPrior
        Prior of the input graph W_X.
    """),
    "prior_z": _row(None, """{"D", "B", "E"} or GraphPrior
        Prior of the latent graph W_Z. The pair must have a defined cross-entropy (Van Assel et
        al. 2022, Table 1); otherwise a ValueError lists the defined pairs.
    """),
    "kernel_z": _row(None, """{"gaussian", "student", "umap", "umap_odds"} or Kernel
        Latent kernel k of the squared distances d²: "gaussian" exp(-d²), "student"
        (1 + d²/ν)^(-(ν+1)/2) (ν = 1: Cauchy 1/(1 + d²)), "umap" UMAP's curve
        1/(1 + a d^(2b)), "umap_odds" its odds 1/(a d^(2b)), whose B-prior edge probability is
        UMAP's curve; or a probdr.kernels.Kernel.
    """),
    "affinity": _row(None, """{"auto", "entropic", "umap", "binary", "precomputed"}
        Calibration of the input affinities K_X: "entropic" (per-point Gaussian bandwidths set
        by the perplexity), "umap" (UMAP's fuzzy kNN weights), "binary" (the kNN graph);
        "auto" is "umap" under the B and B~ input priors, else "entropic"; "precomputed": X is
        the affinity matrix itself.
    """),
    "edge_prior": _row(None, """array of shape (n_samples, n_samples), sparse matrix, edge-prior object or None
        Edge prior π of the input graph: its posterior weights are π ⊙ K_X (Proposition 1). One
        built from an observed network (probdr.laws.edge_priors.from_graph) also adds the
        network's pairs to the neighbour lists.
    """),
    "repulsion": _row(None, """{"auto", "exact", "fft", "sampled", "negative_sampling"}
        How the all-pairs (repulsive) part of the objective is computed: "exact" (O(n²) per
        step), "fft" (grid interpolation, 2-D, O(n): the E law with a Student kernel, or the B law
        with any fixed kernel, its nearest pairs summed exactly), "sampled" (Monte Carlo over
        ``negative_samples`` partners per node, any prior) or "negative_sampling" (umap-learn's
        scheme: down-weighted non-edges, B latent prior). "auto": FFT for 2-D fits with the E
        latent prior above 1,000 points, otherwise exact up to 4,000 points, then sampled.
    """),
    "optimizer": _row(None, """{"gains", "sgd", "adam"}
        "gains": t-SNE's delta-bar-delta gains with momentum, on the loss divided by n (the
        scale of t-SNE's gradient, which the automatic learning rate assumes); "sgd" and
        "adam": on the loss itself.
    """),
    "latent_edge_prior": _row(None, """array, sparse matrix, edge-prior object or None
        Edge prior π on the latent graph W_Z.
    """),
    "precomputed_knn": _row(None, """tuple (indices, distances) or None
        Neighbour lists of shape (n_samples, k) computed elsewhere, used instead of the search
        (umap-learn's layout, the point itself in column 0, is accepted).
    """),
}
#: the constraint of each parameter name (:data:`TABLE`'s)
PARAMETERS: dict[str, list] = {k: r.constraint for k, r in TABLE.items() if r.constraint is not None}
#: the numpydoc entry of each parameter name that the table describes (:data:`TABLE`'s)
DESCRIPTIONS: dict[str, str] = {k: r.doc for k, r in TABLE.items() if r.doc is not None}


def constraints_for(cls) -> dict[str, list]:
    """``cls``'s ``_parameter_constraints``: the shared constraint of each ``__init__``
    parameter, then the ``_constraint_overrides`` of its bases and its own (the most derived
    wins)."""
    names = cls._get_param_names()
    out = {k: TABLE[k].constraint for k in names
           if k in TABLE and TABLE[k].constraint is not None}
    for klass in reversed(cls.__mro__):
        out.update({k: v for k, v in vars(klass).get("_constraint_overrides", {}).items()
                    if k in names})
    return out
