r"""What a graph-coupling fit resolved, once: :class:`Configuration` (what the parameters make of
the data, before any work), :class:`FittedCoupling` (what the fit keeps), and the rules that
resolve the parameters' "auto" for it (:func:`auto_repulsion`, :func:`optimiser_steps` with
UMAP's :data:`UMAP_SCHEDULE`, :func:`early_exaggeration_steps`, :func:`map_phases`).

``GraphCoupling.fit`` turns the estimator's parameters into one configuration -- the latent law's
prior, the kernel with its learned numbers, the repulsion ("auto" resolved), the optimiser's
schedule with its loss scale and clip, the optimiser's heuristics -- and keeps it as this object. The verbs that come after
the fit (``loss``, ``latent_law``, ``optimize``, ``transform``, ``sample_transform``) read it,
not the parameters again, as openTSNE's ``TSNEEmbedding`` carries what its ``optimize`` needs. The
input side is the fit's :class:`~probdr.input.InputGraph` (``input_``), kept beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from numbers import Real
from typing import NamedTuple

import torch
from sklearn.utils import check_scalar

from ..infer.schedule import Phase, continue_schedule, with_hooks
from ..input.graph import prior_kind
from ..kernels import Kernel
from ..laws.graph import GraphLaw, GraphPrior
from ..laws.weights import KernelWeights
from ..models.coupling import graph_coupling_model

__all__ = ["Configuration", "FittedCoupling", "KERNEL_LEARNING_RATE", "KERNEL_STEP_EVERY",
           "auto_repulsion", "map_phases", "optimiser_steps", "umap_schedule", "UMAP_SCHEDULE",
           "early_exaggeration_steps", "EARLY_EXAGGERATION_ITER", "EXACT_REPULSION_MAX_N",
           "FFT_REPULSION_MIN_N"]

#: with repulsion="auto", the exact O(n^2) normaliser is used up to this many points
EXACT_REPULSION_MAX_N = 4000
#: with repulsion="auto", 2-D t-SNE switches to the FFT normaliser above this many points
FFT_REPULSION_MIN_N = 1000

#: Adam's learning rate for a kernel's learned numbers, in log space (a step changes the number
#: by about this fraction); they take a step every KERNEL_STEP_EVERY steps (block-coordinate
#: ascent: in between they cost what a fixed number does) and are held in early exaggeration
KERNEL_LEARNING_RATE = 0.05
KERNEL_STEP_EVERY = 5


#: UMAP's default schedule: ``(most points, epochs, optimiser steps per epoch)``, the first row
#: whose size the data fit. Fewer epochs than umap-learn's (500 up to 10,000 points, 200 above)
#: of more (smaller) steps: a step per part of an epoch is closer to umap-learn's sequential
#: updates, so each epoch does more. On large data the time goes with the epochs (the pairs
#: updated); on small data with the steps (each has a fixed cost of some thirty operations), so
#: there fewer steps matter too. On deformed MNIST against umap-learn's 200 epochs
#: (docs/benchmarks.md, benchmarks/umap_epoch_steps.py): 60 epochs of 12 steps match its
#: trustworthiness@15 and 5-NN accuracy at 70,000 points in half its time; at 200,000 and
#: 1,000,000 points they trail by up to 0.005, and 100 epochs of 8 steps hold the match (within
#: 0.003). From 569 to 5,000 points (benchmarks/small_schedule.py, three seeds), 100 epochs of 3
#: steps match umap-learn's 500 epochs (trustworthiness@15 and 5-NN accuracy within 0.002, or
#: better) in 0.2 to 0.6 of its time, where 500 epochs of one step took 0.9 to 1.1 of it.
UMAP_SCHEDULE = ((10_000, 100, 3), (100_000, 60, 12), (None, 100, 8))


def umap_schedule(n: int) -> tuple[int, int]:
    """UMAP's default ``(epochs, steps per epoch)`` for ``n`` points (:data:`UMAP_SCHEDULE`)."""
    for most, epochs, steps in UMAP_SCHEDULE:
        if most is None or n <= most:
            return epochs, steps
    raise AssertionError("the schedule's last row takes every size")  # pragma: no cover


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


def optimiser_steps(n: int, n_iter: int | None = None, n_epochs: int | None = None,
                    epoch_steps: int | str = 1) -> tuple[int, int]:
    """The optimiser's steps in all and per negative-sampling epoch for ``n`` points: ``n_iter``
    steps of one epoch each where it is given (GraphCoupling, TSNE, LargeVis); else counted in
    epochs as UMAP does, ``n_epochs`` of ``epoch_steps`` steps, either ``None``/``"auto"`` taken
    from :func:`umap_schedule`."""
    if n_iter is not None:
        return int(n_iter), 1
    epochs, steps = umap_schedule(n)
    steps = steps if epoch_steps == "auto" else int(epoch_steps)
    return (epochs if n_epochs is None else int(n_epochs)) * steps, steps


class Configuration(NamedTuple):
    """What a coupling's parameters make of a fit of ``n`` points, resolved once before any work
    (``GraphCoupling._configure``): the input side checked against the data, the latent kernel
    (a learned number at its start), the repulsion ("auto" resolved) and the MAP's prior on Z
    (``None``: flat)."""

    input: object
    kernel: Kernel
    repulsion: str
    z_prior: object


def auto_repulsion(n: int, latent_kind: str, n_components: int, kernel: Kernel,
                   latent_edge_prior=None) -> str:
    """What ``repulsion="auto"`` is for ``n`` points: the FFT normaliser for 2-D fits of the E
    latent law (``latent_kind``) with a kernel it serves (the Student kernels) and no latent
    edge prior above :data:`FFT_REPULSION_MIN_N` points, otherwise the exact normaliser up to
    :data:`EXACT_REPULSION_MAX_N` points, then sampled."""
    if (n > FFT_REPULSION_MIN_N and latent_kind == "E" and n_components == 2
            and kernel.has_fft and latent_edge_prior is None):
        return "fft"
    return "exact" if n <= EXACT_REPULSION_MAX_N else "sampled"


def map_phases(n: int, n_iter: int, *, optimizer: str, learning_rate, early_exaggeration,
               early_exaggeration_iter, momentum, early_momentum, learning_rate_decay: bool,
               lr_shrink: float = 1.0) -> tuple[list[Phase], float]:
    """The MAP fit's phases for ``n`` points, ``n_iter`` steps in all, and the loss's scale
    (before the coupling weight): early exaggeration for its steps
    (:func:`early_exaggeration_steps`; none at exaggeration 1), then
    the main phase, its rate decaying linearly to 0 with ``learning_rate_decay``.

    ``optimizer="gains"`` (t-SNE's, on the loss divided by n): the automatic rate in each phase
    is openTSNE's rule max(200, n / exaggeration) in openTSNE's gradient scale, which leaves out
    t-SNE's factor 4 (dC/dz_i = 4 sum_j (p_ij - q_ij) q_ij Z (z_i - z_j)); this gradient keeps it
    (one step at learning rate 1 is exactly 4x openTSNE's, same direction:
    tests/estimators/test_quality.py), so the rule is divided by 4, which is also
    scikit-learn's max(n / exaggeration / 4, 50); then by ``lr_shrink``. "sgd" and "adam": the
    rate 1, on the loss itself, momentum for "sgd" only."""
    ee = float(early_exaggeration)
    n_ee = early_exaggeration_steps(early_exaggeration_iter, n_iter) if ee != 1.0 else 0
    n_main = int(n_iter) - n_ee
    decay = 0.0 if learning_rate_decay else None
    if optimizer == "gains":
        def lr(alpha):
            if learning_rate != "auto":
                return learning_rate
            return max(200.0, n / alpha) / 4.0 / lr_shrink
        phases = []
        if n_ee:
            phases.append(Phase(n_ee, lr(ee), early_momentum, model_kwargs={"exaggeration": ee},
                                name="exaggeration", learn_sites=False))
        phases.append(Phase(n_main, lr(1.0), momentum, name="main", final_learning_rate=decay))
        return phases, 1.0 / n
    lr0 = 1.0 if learning_rate == "auto" else float(learning_rate)
    mom = momentum if optimizer == "sgd" else 0.0
    early_mom = early_momentum if optimizer == "sgd" else 0.0
    phases = []
    if n_ee:
        phases.append(Phase(n_ee, lr0, early_mom, model_kwargs={"exaggeration": ee},
                            name="exaggeration", learn_sites=False))
    phases.append(Phase(n_main, lr0, mom, name="main", final_learning_rate=decay))
    return phases, 1.0


@dataclass(frozen=True)
class FittedCoupling:
    """The resolved configuration of a graph-coupling fit (module docstring).

    Attributes
    ----------
    prior_z : GraphPrior
        The latent graph's prior (its edge prior included).
    kernel : Kernel
        The latent kernel, learned numbers at their MAP (``kernel_``).
    repulsion : str
        How the all-pairs part was computed: "exact", "fft", "sampled" or "negative_sampling".
    negative_samples, negative_weight : int, float
        The Monte Carlo / negative-sampling settings of the fit.
    schedule : list of Phase
        The MAP fit's phases, which ``optimize`` continues.
    loss_scale : float
        The factor of the optimised loss (1/n for t-SNE's gains optimiser), over the coupling
        weight of the MAP fit.
    grad_clip : float or None
        The optimiser's clip of every gradient coordinate, and of every pair's contribution
        (umap-learn's heuristic, :class:`~probdr.infer.schedule.OptimiserHooks`).
    epoch_steps : int
        Negative sampling: the optimiser steps an epoch is cut into.
    model_kernel : Kernel or None
        The model's kernel, its numbers given as "learn" still latent sites (``None``: the
        kernel, as in couplings kept before it was).
    """

    prior_z: GraphPrior
    kernel: Kernel
    repulsion: str
    negative_samples: int
    negative_weight: float
    schedule: list[Phase]
    loss_scale: float
    grad_clip: float | None
    epoch_steps: int = 1
    model_kernel: Kernel | None = None

    def model(self, whole_epoch: bool = False, epoch_steps: int | None = None):
        """The graph-coupling model under the fit's optimiser heuristics
        (:func:`~probdr.infer.schedule.with_hooks`): the pair clip and the epoch's steps
        (``epoch_steps`` in place of the fit's), each step's share weighed as the whole epoch
        with ``whole_epoch`` (posterior inference)."""
        steps = self.epoch_steps if epoch_steps is None else epoch_steps
        return with_hooks(graph_coupling_model, pair_grad_clip=self.grad_clip,
                          epoch_steps=steps, whole_epoch=whole_epoch)

    def latent_law(self, Z: torch.Tensor) -> GraphLaw:
        """The posterior law of the latent graph W_Z given Z under the fit's prior and kernel."""
        return self.prior_z.posterior(KernelWeights(Z, self.kernel))

    def row_model(self, n: int) -> tuple[str, float | None]:
        """How a new node's row is scored against ``n`` training nodes: ``(row_law, nonedge
        factor)``, the factor (of :math:`p_{i+}`) for a fit by negative sampling."""
        kind = prior_kind(self.prior_z)
        if kind in ("D", "E", "DS"):  # DS: the row given its degree, duals not carried over
            return "categorical", None
        if self.repulsion == "negative_sampling":
            return "bernoulli", self.negative_weight * self.negative_samples / n
        return "bernoulli", None

    def continuation(self, n_done: int, n_iter: int, learning_rate=None, momentum=None,
                     exaggeration=None) -> list[Phase]:
        """The phases of ``optimize``: the schedule continued after ``n_done`` steps for
        ``n_iter`` more (:func:`~probdr.infer.schedule.continue_schedule`), with the given
        values in place of the schedule's."""
        phases = continue_schedule(self.schedule, n_done, n_iter)
        for ph in phases:
            ph.name = f"optimize ({ph.name})"
            if learning_rate is not None:
                ph.learning_rate, ph.final_learning_rate = learning_rate, None
            if momentum is not None:
                ph.momentum = momentum
            if exaggeration is not None:
                ph.model_kwargs = {} if exaggeration == 1.0 else {"exaggeration": exaggeration}
            check_scalar(ph.learning_rate, "learning_rate", Real, min_val=0,
                         include_boundaries="neither")
            check_scalar(ph.momentum, "momentum", Real, min_val=0, max_val=1,
                         include_boundaries="left")
        return phases

    def start(self, Z0: torch.Tensor, values: dict | None = None) -> tuple[dict, dict]:
        """The MAP fit's start ``{site: value}`` -- Z0, and the kernel's learned numbers at
        ``values`` (a fit's, which ``optimize`` continues) or their initial values -- and the
        driver's options for those numbers (their learning rates and step interval; none when
        the kernel learns none)."""
        sites = self._sites()
        values = values or {}
        init = {"Z": Z0, **{k: torch.tensor(float(values.get(k, s.init)), dtype=Z0.dtype)
                            for k, s in sites.items()}}
        if not sites:
            return init, {}
        return init, dict(site_lr={k: KERNEL_LEARNING_RATE for k in sites},
                          site_every=KERNEL_STEP_EVERY)

    def learned(self, values: dict) -> tuple[FittedCoupling, dict]:
        """The configuration with the kernel's learned numbers at ``values`` (a MAP fit's: the
        kernel that new points and the posterior use), and those numbers ``{site: value}``
        (empty when none is learned)."""
        model_kernel = self.kernel if self.model_kernel is None else self.model_kernel
        numbers = {k: float(values[k]) for k in self._sites()}
        return replace(self, kernel=model_kernel.fixed(numbers), model_kernel=model_kernel), \
            numbers

    def _sites(self) -> dict:
        return (self.kernel if self.model_kernel is None else self.model_kernel).sites()
