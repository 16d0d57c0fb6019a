"""sklearn-style estimators for the graph-coupling family: :class:`GraphCoupling` and the presets
:class:`SNE`, :class:`TSNE`, :class:`LargeVis`, :class:`UMAP`.

A method is a choice of (input prior, latent prior, latent kernel, input affinity) -- one model
(:func:`probdr.models.coupling.graph_coupling_model`) and one MAP driver serve them all. The
presets (:mod:`probdr.estimators.presets`) fix these choices for SNE, t-SNE, LargeVis and UMAP.

The exact objective (``repulsion="exact"``) is available for every preset; ``loss(Z)`` always
returns the exact cross-entropy (Van Assel et al. 2022, §3.1), whatever the optimiser used.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from numbers import Integral, Real
from typing import Any

import numpy as np
import torch
from sklearn.utils import check_scalar
from sklearn.utils.metadata_routing import UNUSED

from .._utils import generator
from ..infer import Phase, run_map
from ..infer.calibrate import Simulation
from ..init import INITS, initial_embedding, initialize
from ..input.calibration import InputGraph
from ..input.graph import AFFINITIES, prior_kind
from ..kernels import Kernel, UMAPKernel, get_kernel
from ..laws.edge_lists import graph_total
from ..laws.edge_priors import check_support
from ..laws.graph import GraphLaw, GraphPrior, check_coupling, get_prior
from ..laws.simulate import SIMULATED_PRIORS, simulate_observed_graph
from ..laws.weights import sparse_to
from ..models.coupling import graph_coupling_model
from .base import DREstimator, in_fit_environment
from .coupling_new_points import (
    NewPoints,
    attraction_mass,
    auto_coupling_weight,
    check_n_iter,
    check_sampling_options,
)
from .docs import reference
from .fitted import (
    Configuration,
    FittedCoupling,
    auto_repulsion,
    early_exaggeration_steps,
    map_phases,
    optimiser_steps,
)
from .inference import PosteriorInference
from .params import (
    POSITIVE,
    Int,
    InvalidParameterError,
    StrOptions,
)
from .starts import geodesic_starts

__all__ = ["GraphCoupling", "auto_coupling_weight", "CALIBRATED_INFLATION"]

REPULSIONS = ("auto", "exact", "fft", "sampled", "negative_sampling")
#: a documented shortcut for the four settings of the Gaussian-blob study
#: (``benchmarks/calibration.py``: true positions N(0, 3^2), 200 and 10,000 points, four graphs,
#: the fit started at the truth): (inference, latent law, kernel) -> the variance factor that
#: brought its 50 % and 90 % regions into 42-58 % and 85-95 %. A fit of one of these settings
#: to features (the presets) applies it unless ``inference_params`` asks for
#: ``calibrate=True``; a fit to a given graph measures its own factor by simulation
#: (:mod:`probdr.infer.calibrate`): on graphs drawn at other temperatures and prior scales
#: these factors left the 90 % regions holding 23 to 98 % (docs "Are the regions
#: calibrated?"); other settings fitted to features get none and a warning.
#: On real affinities the simulation answers another question -- the spread the model's own
#: sparse draws would leave -- and gives far larger factors (t-SNE on 400 digits at its automatic
#: temperature: about 230), see docs "Are the regions calibrated?".
CALIBRATED_INFLATION = {("svi", "E", "cauchy"): 2.2, ("laplace", "E", "cauchy"): 7.0,
                        ("svi", "B", "umap"): 2.0, ("laplace", "B", "umap"): 2.2}

#: the most optimiser steps a negative-sampling epoch is cut into for SVI, whatever the MAP fit's
#: ``epoch_steps``: each SVI step weighs its share of the epoch as the whole epoch, so its
#: gradient's noise grows with the steps, and the guide's spreads with it. On 70,000 deformed
#: MNIST digits (UMAP), SVI's median spread was 2.8 times Laplace's with 12 steps an epoch, 1.26
#: times with 4.
POSTERIOR_EPOCH_STEPS = 4
#: the posterior cuts a negative-sampling epoch into steps only above this many points (UMAP's
#: schedule cuts it from there on for the pairs a step updates); below, the MAP's cut saves each
#: step's fixed cost, and the posterior keeps whole epochs, whose gradients are less noisy
POSTERIOR_SPLIT_MIN_POINTS = 10_000

#: SVI's default number of steps where a negative-sampling epoch is cut into several steps (UMAP
#: above 10,000 points): 500 quarter epochs instead of the 1000 steps of :data:`SVI_OPTIONS`.
#: On 70,000 deformed MNIST digits, 500, 1000 and 2000 steps gave median spreads 0.341, 0.339
#: and 0.337, and per-point spreads with Spearman 0.93 and 0.94 to 2000 steps' (the guide's
#: jitter), at 17, 41 and 85 s.
SPLIT_EPOCH_SVI_STEPS = 500


def _kernel_family(kernel) -> str | None:
    """``"cauchy"`` (t-SNE's kernel), ``"umap"`` (UMAP's curve as odds, its default a, b) or
    ``None``: the kernels the Gaussian-blob study covers."""
    if getattr(kernel, "is_cauchy", False):
        return "cauchy"
    if (isinstance(kernel, UMAPKernel) and kernel.odds and isinstance(kernel.a, float)
            and isinstance(kernel.b, float) and abs(kernel.a / 1.577 - 1) < 0.01
            and abs(kernel.b / 0.8951 - 1) < 0.01):
        return "umap"
    return None


#: the estimator parameters that set the input side (:class:`~probdr.input.InputGraph`)
INPUT_PARAMETERS = ("perplexity", "n_neighbors", "metric", "metric_params", "edge_prior",
                    "neighbors", "precomputed_knn")
#: model arguments of files saved before the optimiser's heuristics left the model
_OPTIMISER_KEYS = ("pair_grad_clip", "epoch_steps", "whole_epoch")
#: the automatic learning rate is divided by this with repulsion="sampled"
SAMPLED_LR_SHRINK = 16.0


@reference
class GraphCoupling(PosteriorInference, DREstimator):
    """Probabilistic graph coupling (Van Assel et al. 2022) fitted by MAP: the estimator of which
    SNE, TSNE, LargeVis and UMAP are presets, with every choice open.

    The model: the data give an input graph W_X, drawn from the posterior of the input prior
    (``prior_x``) given the affinities K_X of the rows of X; the embedding Z gives a latent
    graph W_Z, drawn from the latent prior (``prior_z``) with the weights k(‖z_i - z_j‖²) of
    the latent kernel (``kernel_z``); Z maximises the likelihood of W_Z = W_X, i.e. minimises
    the cross-entropy between the two graph laws. The priors: B, independent Bernoulli edges;
    D, one out-edge per node (rows normalised, as SNE's P); E, n edges in all (one global
    normaliser, as t-SNE's Q); B~, UMAP's symmetrised B graph (input side only).

    Parameters
    ----------
    n_neighbors : int or None
        Neighbours per point of the input graph (UMAP's convention: the point itself counted).
        None: 3 × perplexity for the entropic affinities.
    coupling_weight : float or "auto"
        Weight ω of the coupling likelihood, an inverse temperature: the posterior's spread
        depends on it, the MAP does not (up to the Z prior). "auto": 1 for MAP; for SVI, MCMC
        and ``sample_transform`` the tail rule of probdr.estimators.coupling.auto_coupling_weight
        (at most 4 for 2-D t-SNE), stored as ``coupling_weight_``.
    metric : str or callable
        Dissimilarity of the rows of X (probdr.input.distances): "euclidean", "sqeuclidean",
        "cosine", "correlation", "manhattan", "chebyshev", "minkowski", "hamming", "jaccard",
        "haversine", a callable f(x, y) -> float, or "precomputed": X is then a square distance
        matrix, or a sparse matrix whose stored entries in each row are that row's neighbour
        distances (scanpy's ``obsp["distances"]``), and ``transform`` takes the new points'
        distances to the training points. The entropic affinities use the cost d², UMAP's
        calibration the distance d.

    Attributes
    ----------
    embedding_
    input_
    input_graph_
    label_graph_ : torch sparse tensor of shape (n_samples, n_samples) or None
        ``fit(X, y)`` only: E[W_Y | y], the label graph's mean on its sampled edges.
    kernel_
    learned_kernel_params_
    loss_history_ : ndarray
        The optimised objective (exaggerated; stochastic under sampled repulsion) at the steps
        ``loss_steps_``: every 50th step, and the first and last of each phase
        (``probdr.config.set_loss_every``).
    loss_steps_ : ndarray of int
        The steps (from 1) of ``loss_history_``.
    n_iter_
    n_rescued_ : int
        Collapsed columns of Z rescued during the fit (probdr.infer.schedule).
    stopped_by_callback_
    coupling_weight_ : float
        The coupling weight used, "auto" resolved.
    model_kwargs_ : dict
        The model's arguments (after a posterior fit, ``z_prior`` is the posterior's prior).
    n_threads_
    device_
    random_state_
    posterior_
    posterior_samples_
    posterior_sd_
    reliability_
    stability_
    map_embedding_
    mode_embedding_
    map_converged_
    mode_steps_
    posterior_mean_
    z_prior_scale_

    See Also
    --------
    TSNE, UMAP, SNE, LargeVis : the presets.
    SNEkhorn : the coupling with a doubly stochastic latent law.
    probdr.models.coupling.graph_coupling_model : the Pyro model.

    Notes
    -----
    Besides ``fit``, ``transform`` places new points (MAP of each new point given the fitted
    embedding), ``sample_transform`` draws them from their conditional posteriors, ``optimize``
    continues the fit, ``loss(Z)`` is the exact cross-entropy whatever the optimiser used and
    ``latent_law(Z)`` the law of W_Z.

    X may be a dense array, a sparse matrix (scipy CSR/CSC, e.g. counts or tf-idf, never
    densified: the neighbour search works on its rows and ``init="pca"`` uses a randomised PCA
    of the implicitly centred matrix), precomputed distances or affinities, or a GraphLaw. With
    precomputed distances ``init="pca"`` is classical MDS (dense distances; equal to PCA for
    Euclidean ones) or, without all distances, the spectral initialisation.

    References
    ----------
    H. Van Assel, T. Espinasse, J. Chiquet, F. Picard. A Probabilistic Graph Coupling View of
    Dimension Reduction. NeurIPS 2022.

    Examples
    --------
    t-SNE written out as a coupling (D, E) with the Student kernel, with heavier tails:

    >>> import probdr
    >>> X, y = probdr.datasets.load("digits", n_samples=200)
    >>> est = probdr.GraphCoupling("D", "E", "student", perplexity=20,
    ...                            kernel_params={"dof": 0.5}, random_state=0)
    >>> Z = est.fit_transform(X)
    >>> Z.shape
    (200, 2)
    >>> probdr.metrics.trustworthiness(X, Z, k=10) > 0.9
    True
    """

    _has_laplace = True  # the coupling model declares its per-point curvature
    _has_restarts = True  # _restart: the MAP schedule from a random start

    _defaults_kernel: dict[str, Any] = {}
    #: the estimator's own parameters that are its latent kernel's, passed to
    #: :func:`~probdr.kernels.get_kernel` by name (TSNE's ``dof``; UMAP's ``min_dist`` and
    #: ``spread``, from which the kernel fits its curve's ``a``, ``b``)
    _kernel_args: tuple[str, ...] = ()
    #: the fitted kernel's numbers that ``fit`` records as ``<name>_`` (UMAP's ``a_``, ``b_``)
    _kernel_records: tuple[str, ...] = ()
    _constraint_overrides = {
        "learning_rate": [POSITIVE, StrOptions({"auto"})],
        "coupling_weight": [POSITIVE, StrOptions({"auto"})],
        "n_neighbors": [Int(2), None],  # UMAP's count includes the point itself
        "affinity": [StrOptions({"auto", *AFFINITIES, "precomputed"})],
        "repulsion": [StrOptions(set(REPULSIONS))],
        "optimizer": [StrOptions({"gains", "sgd", "adam"})],
        "init": [StrOptions(set(INITS)), "array-like"],
        "kernel_z": [StrOptions({"gaussian", "student", "cauchy", "t", "umap", "umap_odds"}),
                     Kernel]}
    _accepts_sparse = True
    _dense_inits = ("ccpca",)  # ccPCA's component means need the features dense

    def __init__(
        self,
        prior_x="D",
        prior_z="E",
        kernel_z="student",
        perplexity: float = 30.0,
        n_components: int = 2,
        *,
        affinity: str = "auto",
        n_neighbors: int | None = None,
        kernel_params: dict | None = None,
        edge_prior=None,
        repulsion: str = "auto",
        negative_samples: int = 5,
        negative_weight: float = 1.0,
        observe: str = "mean",
        init="pca",
        n_iter: int = 750,
        early_exaggeration: float = 12.0,
        early_exaggeration_iter: int | str = "auto",
        learning_rate="auto",
        momentum: float = 0.8,
        early_momentum: float = 0.5,
        optimizer: str = "gains",
        learning_rate_decay: bool = False,
        grad_clip: float | None = None,
        init_scale: float | str = 1e-4,
        neighbors: str = "auto",
        inference: str = "map",
        inference_params: dict | None = None,
        z_prior=None,
        coupling_weight="auto",
        latent_edge_prior=None,
        dtype: str = "float32",
        random_state: int | None = None,
        verbose: bool = False,
        callbacks=None,
        callbacks_every: int = 50,
        n_jobs: int | None = None,
        device="auto",
        metric="euclidean",
        metric_params: dict | None = None,
        precomputed_knn=None,
        target_weight: float = 0.5,
    ):
        self.prior_x = prior_x
        self.prior_z = prior_z
        self.kernel_z = kernel_z
        self.perplexity = perplexity
        self.n_components = n_components
        self.affinity = affinity
        self.n_neighbors = n_neighbors
        self.kernel_params = kernel_params
        self.edge_prior = edge_prior
        self.repulsion = repulsion
        self.negative_samples = negative_samples
        self.negative_weight = negative_weight
        self.observe = observe
        self.init = init
        self.n_iter = n_iter
        self.early_exaggeration = early_exaggeration
        self.early_exaggeration_iter = early_exaggeration_iter
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.early_momentum = early_momentum
        self.optimizer = optimizer
        self.learning_rate_decay = learning_rate_decay
        self.grad_clip = grad_clip
        self.init_scale = init_scale
        self.neighbors = neighbors
        self.inference = inference
        self.inference_params = inference_params
        self.z_prior = z_prior
        self.coupling_weight = coupling_weight
        self.latent_edge_prior = latent_edge_prior
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.callbacks = callbacks
        self.callbacks_every = callbacks_every
        self.n_jobs = n_jobs
        self.device = device
        self.metric = metric
        self.metric_params = metric_params
        self.precomputed_knn = precomputed_knn
        self.target_weight = target_weight

    # -- configuration ----------------------------------------------------------------------
    def _affinity(self) -> str:
        """The input affinity, ``"auto"`` resolved (by the input side)."""
        return self._make_input().affinity

    def _latent_prior(self) -> GraphPrior:
        return get_prior(self.prior_z, self.latent_edge_prior)

    def _make_kernel(self):
        """The latent kernel the parameters name: ``kernel_z`` with the preset's own kernel
        parameters (:attr:`_kernel_args`) and ``kernel_params``."""
        params = dict(self._defaults_kernel)
        params.update({name: getattr(self, name) for name in self._kernel_args})
        params.update(self.kernel_params or {})
        return get_kernel(self.kernel_z, **params)

    def _steps(self, n: int) -> tuple[int, int]:
        """The optimiser's steps in all and per negative-sampling epoch for ``n`` points
        (:func:`~probdr.estimators.fitted.optimiser_steps`: ``n_iter``, or UMAP's epochs)."""
        return optimiser_steps(n, getattr(self, "n_iter", None), getattr(self, "n_epochs", None),
                               getattr(self, "epoch_steps", 1))

    def _make_input(self) -> InputGraph:
        """The input side from those of the estimator's parameters that set it (a preset
        without a parameter, such as UMAP's perplexity, leaves InputGraph's default)."""
        params = self.get_params(deep=False)
        return InputGraph(self.prior_x, self.affinity,
                          **{k: params[k] for k in INPUT_PARAMETERS if k in params})

    # -- what X may be -------------------------------------------------------------------------
    def _precomputed(self) -> str | None:
        """``"distances"`` (``metric="precomputed"``), ``"affinity"``
        (``affinity="precomputed"``) or ``None`` (X holds features), as the input side reads
        the parameters (:attr:`probdr.input.InputGraph.precomputed`)."""
        return self._make_input().precomputed

    def _takes_graph_law(self) -> bool:
        """X may be a GraphLaw: the input graph itself (``affinity="precomputed"``)."""
        return self._precomputed() == "affinity"

    def _check_labels(self, y, n: int):
        from ..input.labels import check_labels

        return check_labels(y, n)

    def _initial(self, X, mean, gen) -> torch.Tensor:
        """The initial embedding (:func:`probdr.init.initial_embedding`)."""
        return initial_embedding(self.init, X, mean, self.input_graph_, self.n_components,
                                 self.init_scale, self._precomputed(), gen)

    def _observed_graph(self, W=None):
        r"""The graph the latent graph is coupled with: :math:`W_X` (its mean unless given), or
        after ``fit(X, y)`` the label mixture :math:`(1-\alpha) W_X + \alpha W_Y` of the
        labelled rows (:func:`probdr.input.labels.supervised_mean`)."""
        W = self.input_graph_.mean if W is None else W
        if getattr(self, "label_graph_", None) is None:
            return W
        from ..input.labels import supervised_mean

        return supervised_mean(W, self.label_graph_, self._y_fit, float(self.target_weight))

    def _check_priors(self) -> None:
        """The pair of priors has a defined cross-entropy (Van Assel et al. 2022, Table 1)."""
        kx, kz = prior_kind(self.prior_x), prior_kind(self.prior_z)
        if not isinstance(self.prior_z, GraphPrior) or kz in ("B", "D", "E"):
            check_coupling(kx, kz)

    def _check_params_together(self) -> None:
        """The coupling's data-independent rules (Table 1's pairs, what a precomputed input or
        a repulsion needs, the latent kernel's numbers), then the posterior's and the base's
        (``super()``)."""
        self._check_priors()
        kind = self._precomputed()
        if kind is not None and isinstance(self.init, str) and self.init == "ccpca":
            raise InvalidParameterError(
                "init='ccpca' needs the data's features; with a precomputed "
                f"{kind} use init='spectral' or 'pca'.")
        if self.repulsion == "negative_sampling" and prior_kind(self._latent_prior()) != "B":
            raise InvalidParameterError(
                "repulsion='negative_sampling' is implemented for the B latent prior (UMAP, "
                "LargeVis); use repulsion='exact' with D or E.")
        n_iter, ee = getattr(self, "n_iter", None), self.early_exaggeration_iter
        if n_iter is not None and not isinstance(ee, str) and ee > n_iter:  # UMAP: epochs
            raise InvalidParameterError(
                f"early_exaggeration_iter={ee} exceeds n_iter={n_iter}: set "
                f"early_exaggeration_iter='auto' (min(250, n_iter // 3) = "
                f"{early_exaggeration_steps('auto', n_iter)} here) or a number up to {n_iter}, "
                "or a larger n_iter.")
        try:
            kernel = self._make_kernel()
        except (TypeError, ValueError) as err:  # kernel_params, UMAP's min_dist and spread
            raise InvalidParameterError(f"{type(self).__name__}'s latent kernel: {err}") from err
        if self.repulsion == "fft":
            self._check_fft(kernel)
        super()._check_params_together()

    def _check_fft(self, kernel) -> None:
        """``repulsion="fft"``: a 2-D embedding, and the E latent law with a Student kernel or
        the B law (the laws whose all-pairs sums the FFT field serves)."""
        kind = prior_kind(self._latent_prior())
        name = type(self).__name__
        if kind not in ("E", "B"):
            raise InvalidParameterError(
                f"{name}: repulsion='fft' covers the E latent law (t-SNE) and the B law (UMAP, "
                f"LargeVis), not the {kind} law; use repulsion='exact' or 'sampled'.")
        if self.n_components != 2:
            raise InvalidParameterError(f"{name}: repulsion='fft' needs n_components=2, got "
                                        f"{self.n_components}; use repulsion='exact' or "
                                        "'sampled'.")
        if kind == "E" and not kernel.has_fft:
            raise InvalidParameterError(
                f"{name}: repulsion='fft' with the E latent law covers the Student kernels "
                "(t-SNE's family); use repulsion='exact' or 'sampled' for this kernel.")

    def _configure(self, n: int, p: int, dtype=torch.float64) -> Configuration:
        """What the parameters make of a fit of ``n`` points of ``p`` features, resolved once
        and checked against the data before any work: the input side (``input_``), the latent
        kernel, the repulsion, the MAP's prior (the posterior's settings checked last)."""
        side = self._make_input().check(n, p)
        from ..laws.edge_priors import check_edge_prior

        check_edge_prior(self.edge_prior, n, "edge_prior")
        check_edge_prior(self.latent_edge_prior, n, "latent_edge_prior")
        kernel = self._make_kernel()
        repulsion = self._repulsion(n, kernel)
        if self.inference == "laplace":  # fail now, not after the MAP fit
            self._check_laplace(n, kernel, repulsion)
        # a z_prior distribution over (n, q); NUTS: fail before the MAP fit, not after it
        q = self.n_components
        self._check_inference(n, q, repulsion if self.inference == "mcmc" else "exact")
        return Configuration(side, kernel, repulsion, self._map_prior(n, q, dtype))

    def _check_laplace(self, n: int, kernel: Kernel, repulsion: str) -> None:
        """``inference="laplace"``: the latent law's curvature is written for this setting
        (:func:`probdr.laws.curvature.check_laplace`) and has no edge prior."""
        from ..laws.curvature import check_laplace

        ns = (self.negative_samples, self.negative_weight) \
            if repulsion == "negative_sampling" else None
        try:
            check_laplace(prior_kind(self._latent_prior()), kernel, n, self.n_components, ns)
        except ValueError as err:
            raise InvalidParameterError(str(err)) from err
        if self.latent_edge_prior is not None:
            raise InvalidParameterError("inference='laplace' covers latent laws without an "
                                        "edge prior; use inference='svi'.")

    def _phases(self, n: int, repulsion: str | None = None,
                steps: tuple[int, int] | None = None
                ) -> tuple[list[Phase], float, float | None, int]:
        """The MAP fit's phases (:func:`~probdr.estimators.fitted.map_phases`), loss scale,
        gradient clip (umap-learn's per-pair clip at 4 is applied inside the model for the SGD
        presets) and steps per negative-sampling epoch, of ``steps`` (steps in all, per epoch;
        ``None``: :meth:`_steps`) with the resolved ``repulsion`` (``None``: :meth:`_repulsion`).
        The loss is divided by ``coupling_weight``, so that the MAP trajectory (flat prior) does
        not depend on the posterior's temperature."""
        weight, shrink = self._weight_now(), 1.0
        if self.optimizer == "gains":
            # with the Monte Carlo normaliser the gradient is noisy and a 16x smaller step was
            # needed for stability (measured); a B law's rows carry more mass (_row_mass)
            repulsion = self._repulsion(n) if repulsion is None else repulsion
            shrink = (SAMPLED_LR_SHRINK if repulsion == "sampled" else 1.0) * self._row_mass(n)
        n_iter, epoch_steps = self._steps(n) if steps is None else steps
        phases, scale = map_phases(
            n, n_iter, optimizer=self.optimizer, learning_rate=self.learning_rate,
            early_exaggeration=self.early_exaggeration,
            early_exaggeration_iter=self.early_exaggeration_iter, momentum=self.momentum,
            early_momentum=self.early_momentum, learning_rate_decay=self.learning_rate_decay,
            lr_shrink=shrink)
        return phases, scale / weight, self.grad_clip, epoch_steps

    def _row_mass(self, n: int) -> float:
        r"""The observed graph's mass per row, :math:`P_{++}/n`, for a latent B law (1 for the
        E and D laws, whose graphs have unit mass per row by construction). t-SNE's automatic
        rate is for unit mass: a B law's gradient on a point grows with its degree (its
        attraction and its repulsion both sum over about that many edges), so the rate is
        divided by it. Without this, a (B, B) coupling with UMAP's curve on 200 points drawn
        from its law and started at the truth ended at a loss 1.65 times the truth's, the map
        3.3 times too large; with it, below the truth's."""
        if prior_kind(self._latent_prior()) != "B" or not hasattr(self, "model_kwargs_"):
            return 1.0
        return max(1.0, float(graph_total(self.model_kwargs_["W_X"])) / max(n, 1))

    # -- fitting ---------------------------------------------------------------------------
    def _repulsion(self, n: int, kernel: Kernel | None = None) -> str:
        """Resolve ``repulsion="auto"``: exact for small n; FFT for 2-D t-SNE; else sampled
        (``kernel``: the latent kernel, ``None``: from the parameters)."""
        if self.repulsion != "auto":
            return self.repulsion
        k = self._make_kernel() if kernel is None else kernel
        return auto_repulsion(n, prior_kind(self._latent_prior()), self.n_components, k,
                              self.latent_edge_prior)

    def _fit(self, X, y=None) -> torch.Tensor:
        n, p = (X.n, X.n) if isinstance(X, GraphLaw) else X.shape
        dtype = self._fit_dtype
        # what the parameters make of n points, checked against the data before any work: once
        self.input_, self.kernel_, repulsion, z_prior = self._configure(n, p, dtype)
        for name in self._kernel_records:  # UMAP's a_, b_
            setattr(self, f"{name}_", getattr(self.kernel_, name))
        gen = generator(self.random_state_)
        self.input_graph_ = self.input_.fit(X, random_state=self.random_state_)
        if self.input_graph_.n != n:
            raise ValueError(f"the input graph has {self.input_graph_.n} nodes for {n} samples.")
        mean = self.input_graph_.mean
        check_support(self.latent_edge_prior, mean)  # before optimising
        self.label_graph_ = self._y_fit = None  # a refit without labels forgets earlier ones
        if y is not None and float(self.target_weight) > 0:
            from ..input.labels import label_graph

            self.label_graph_ = label_graph(y, mean, generator=gen)
            self._y_fit = y
            mean = self._observed_graph(mean)
        W_X = sparse_to(mean, dtype) if mean.is_sparse else mean.to(dtype)
        # the MAP fit at a plain MAP fit's weight (bit for bit the same MAP); the tail rule after
        self.coupling_weight_ = self._resolve_coupling_weight(mean, map_fit=True)
        posterior_weight = self._resolve_coupling_weight(mean)
        Z0 = self._initial(X, mean, gen).to(dtype)
        del mean  # W_X holds what the fit needs (a float64 copy of a large graph's values)
        self.model_kwargs_ = dict(
            W_X=W_X, prior_z=self._latent_prior(), kernel=self.kernel_,
            n_components=self.n_components, repulsion=repulsion,
            negative_samples=self.negative_samples, negative_weight=self.negative_weight,
            z_prior=z_prior, coupling_weight=self.coupling_weight_)
        observe = self._observe()
        phases, scale, clip, epoch_steps = self._phases(n, repulsion)
        if "epoch_steps" in self._get_param_names():  # "auto" resolved
            self.epoch_steps_ = epoch_steps
        mk = self.model_kwargs_
        coupling = FittedCoupling(
            prior_z=mk["prior_z"], kernel=self.kernel_, repulsion=repulsion,
            negative_samples=mk["negative_samples"], negative_weight=mk["negative_weight"],
            schedule=list(phases), loss_scale=scale, grad_clip=clip, epoch_steps=epoch_steps,
            model_kernel=self.kernel_)
        init, sites = coupling.start(Z0)
        res = run_map(coupling.model(), self.model_kwargs_, init, phases,
                      optimizer=self.optimizer, loss_scale=scale, grad_clip=clip,
                      observe=observe, verbose=self.verbose, desc=type(self).__name__, **sites)
        # the kernel that new points and the posterior use: learned numbers at their MAP
        self._coupling, self.learned_kernel_params_ = coupling.learned(res.values)
        self.kernel_ = self._coupling.kernel
        self.loss_history_, self.loss_steps_ = res.loss_history, res.loss_steps
        self.n_iter_ = res.n_iter
        self.n_rescued_ = res.n_rescued
        self.stopped_by_callback_ = res.stopped
        # what optimize continues: the optimiser's state and torch's random stream (negative
        # samples, sampled graphs); the schedule is the fitted coupling's
        self._optimizer_state, self._stream = res.optimizer_state, res.stream
        if self.inference == "map":
            return res.Z
        return self._fit_posterior(res.Z, Z0, gen, posterior_weight)

    def _fit_posterior(self, Z_map, Z0, gen, posterior_weight: float) -> torch.Tensor:
        """The posterior from the MAP ``Z_map`` (the fit started at ``Z0``): the prior by the
        rule of PosteriorInference (from the MAP embedding); a learned kernel's numbers held at
        their MAP (empirical Bayes), which also sets the automatic temperature's tail rule; the
        fit's simulation for the variance factor (:meth:`_simulation`)."""
        map_kwargs = dict(self.model_kwargs_, kernel=self.kernel_)
        self.model_kwargs_["z_prior"] = prior = self._posterior_z_prior(Z_map)
        if self.learned_kernel_params_:
            posterior_weight = self._resolve_coupling_weight(self.model_kwargs_["W_X"])
        self.coupling_weight_ = self.model_kwargs_["coupling_weight"] = posterior_weight
        # the posterior weighs each step's share of a negative-sampling epoch as the whole epoch,
        # an epoch cut into at most POSTERIOR_EPOCH_STEPS steps
        kwargs = {**self.model_kwargs_, "kernel": self.kernel_}
        model = self._coupling.model(whole_epoch=True, epoch_steps=self._posterior_epoch_steps())
        return self._posterior(model, kwargs, Z_map, gen, prior=prior,
                               simulation=self._simulation(kwargs, map_kwargs, Z0),
                               restart=self._restart(map_kwargs, Z_map))

    def _posterior_epoch_steps(self) -> int:
        """The optimiser steps a negative-sampling epoch is cut into for the posterior: the
        fit's ``epoch_steps``, at most :data:`POSTERIOR_EPOCH_STEPS`; 1 before a fit and up to
        :data:`POSTERIOR_SPLIT_MIN_POINTS` points."""
        coupling = self.__dict__.get("_coupling")
        W = getattr(self, "model_kwargs_", {}).get("W_X")
        if coupling is None or W is None or W.shape[-1] <= POSTERIOR_SPLIT_MIN_POINTS:
            return 1
        return min(coupling.epoch_steps, POSTERIOR_EPOCH_STEPS)

    def _inference_options(self) -> dict:
        """``inference_params``, with SVI's default ``num_steps`` :data:`SPLIT_EPOCH_SVI_STEPS`
        where an epoch is cut into several steps."""
        opts = dict(self.inference_params or {})
        if self.inference == "svi" and self._posterior_epoch_steps() > 1:
            opts.setdefault("num_steps", SPLIT_EPOCH_SVI_STEPS)
        return opts

    def _graph_given(self) -> bool:
        return self._precomputed() == "affinity"

    def _measures_by_default(self) -> bool:
        """The observed graph is given (``affinity="precomputed"``): data of the kind the
        simulation draws."""
        return self._graph_given()

    def _shortcut_factor(self) -> float | None:
        """:data:`CALIBRATED_INFLATION`'s factor for this fit's setting, if it is one of the
        four the Gaussian-blob study measured."""
        return CALIBRATED_INFLATION.get((self.inference, prior_kind(self._latent_prior()),
                                         _kernel_family(self.kernel_)))

    def _simulation(self, kwargs: dict, map_kwargs: dict, Z0: torch.Tensor):
        """The fit's simulation (:class:`probdr.infer.calibrate.Simulation`): the observed
        graph drawn from the fitted latent law at an embedding, at the posterior's temperature
        (:func:`probdr.laws.simulate.simulate_observed_graph`), in the fit's dtype; the MAP
        schedule of this fit on it from this fit's start ``Z0`` (the MAP's arguments
        ``map_kwargs``, the kernel held at its fitted numbers). The negative-sampling
        surrogate's maps have another size than the B law's (``scale``). A latent edge prior
        or a doubly stochastic law cannot be simulated (a string says why)."""
        kind = prior_kind(kwargs["prior_z"])
        if self.latent_edge_prior is not None:
            return "a latent edge prior"
        if kind not in SIMULATED_PRIORS:
            return f"the latent law {kind!r}"
        kernel, weight = kwargs["kernel"], float(kwargs["coupling_weight"])
        dtype = kwargs["W_X"].dtype

        def draw(Z, gen):
            return sparse_to(simulate_observed_graph(kind, Z, kernel, weight, gen), dtype)

        def map_fit(W):
            return self._schedule_map(dict(map_kwargs, W_X=W), self._graph_start(W, Z0),
                                      "simulated")

        return Simulation(draw, lambda W: dict(kwargs, W_X=W), map_fit,
                          scale=kwargs.get("repulsion") == "negative_sampling")

    def _schedule_map(self, map_kwargs: dict, start: torch.Tensor, what: str) -> torch.Tensor:
        """This fit's MAP schedule (its phases, optimiser, loss scale and clip, its input
        draws) run again from ``start`` with the MAP's arguments ``map_kwargs`` (the kernel
        held at its fitted numbers): the MAP of a simulated graph, or of another start."""
        c = self._coupling
        res = run_map(c.model(), map_kwargs, {"Z": start}, c.schedule, optimizer=self.optimizer,
                      loss_scale=c.loss_scale, grad_clip=c.grad_clip, observe=self._observe(),
                      warn_collapse=False, desc=f"{type(self).__name__} ({what})")
        return res.Z.detach()

    def _restart(self, map_kwargs: dict, like: torch.Tensor):
        """Another MAP of the data from a random start (``init="random"``, this fit's
        ``init_scale``) drawn from a given generator: the candidates of the posterior's
        multi-start mode search (``inference_params={"restarts": k}``)."""
        n, q = like.shape

        def restart(gen: torch.Generator) -> torch.Tensor:
            start = initialize("random", torch.empty(n, 0, dtype=torch.float64), q,
                               scale=self.init_scale, generator=gen)
            return self._schedule_map(map_kwargs, start.to(like.dtype), "restart")

        return restart

    def _graph_starts(self, kwargs: dict, score) -> list[torch.Tensor]:
        """The starts of the mode search read off the observed graph ``kwargs["W_X"]`` by the
        latent law's kernel values (:func:`probdr.estimators.starts.geodesic_starts`, the E and D
        laws' scaled by ``score``, the log density; none with a latent edge prior, whose weights
        are not the law's)."""
        if self.latent_edge_prior is not None:
            return []
        return geodesic_starts(kwargs["W_X"], kwargs["kernel"], prior_kind(kwargs["prior_z"]),
                               float(kwargs["coupling_weight"]), self.n_components, score)

    def _graph_start(self, W: torch.Tensor, Z0: torch.Tensor) -> torch.Tensor:
        """The start of a fit of the graph ``W`` in place of the data: the spectral embedding
        of ``W`` where this fit's start came from its graph (``init="spectral"``, or ``"pca"``
        of a precomputed graph), else this fit's start ``Z0`` (features' PCA, random, given)."""
        graph_init = isinstance(self.init, str) and (
            self.init == "spectral" or (self.init == "pca" and self._precomputed() is not None
                                        and self._precomputed() != "distances"))
        if not graph_init:
            return Z0.clone()
        gen = generator(self.random_state_)
        Z = initialize("spectral", torch.empty(W.shape[0], 0, dtype=torch.float64),
                       self.n_components, graph=W.double().coalesce() if W.is_sparse
                       else W.double(), scale=self.init_scale, generator=gen)
        return Z.to(Z0.dtype)

    def _weight_now(self) -> float:
        """The resolved coupling weight (before a fit: the given one, or 1 for ``"auto"``)."""
        w = getattr(self, "coupling_weight_", None)
        if w is not None:
            return float(w)
        cw = self.coupling_weight
        return 1.0 if isinstance(cw, str) else float(cw)

    def _resolve_coupling_weight(self, W, map_fit: bool = False) -> float:
        r"""``coupling_weight``, or the automatic one: 1 for MAP (also ``map_fit``: the MAP fit a
        posterior starts from, so that it is the plain fit's), the tail rule for SVI/MCMC with
        each point's attraction mass :math:`m_i = \sum_j (W_{ij} + W_{ji})` and the tail of
        ``kernel_`` (a learned number at its starting value before the MAP fit, at its MAP
        value after it)."""
        if not (isinstance(self.coupling_weight, str) and self.coupling_weight == "auto"):
            return float(self.coupling_weight)
        if self.inference == "map" or map_fit:
            return 1.0
        return auto_coupling_weight(self.kernel_, self.n_components, attraction_mass(W))

    def _observe(self):
        """A fresh input-graph draw per step (``observe="sample"``), else ``None``."""
        if self.observe != "sample":
            return None
        dtype = self._fit_dtype

        def observe():
            W = self._observed_graph(self.input_graph_.sample().double())
            return W.to(dtype).coalesce() if W.is_sparse else W.to(dtype)
        return observe

    # -- the objective ------------------------------------------------------------------------
    def _check_Z(self, Z) -> torch.Tensor:
        if not hasattr(self, "input_graph_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit(X) first.")
        Zt = torch.as_tensor(np.asarray(Z) if not isinstance(Z, torch.Tensor) else Z,
                             dtype=torch.float64)
        n = self.input_graph_.n
        if tuple(Zt.shape) != (n, self.n_components):
            raise ValueError(f"Z must have shape ({n}, {self.n_components}), got "
                             f"{tuple(Zt.shape)}.")
        return Zt

    def _fitted_coupling(self) -> FittedCoupling:
        """What the fit resolved (:class:`~probdr.estimators.fitted.FittedCoupling`); for a
        model saved before it was kept, made from the fitted attributes (not stored)."""
        self._check_fitted()
        coupling = self.__dict__.get("_coupling")
        mk = self.model_kwargs_
        if coupling is not None:
            if "epoch_steps" not in vars(coupling) and "epoch_steps" in mk:
                # kept before it held epoch_steps: then model_kwargs_ did
                coupling = replace(coupling, epoch_steps=int(mk["epoch_steps"]))
            if coupling.model_kernel is None:  # kept before it held the model's kernel
                coupling = replace(coupling, model_kernel=mk["kernel"])
            return coupling
        schedule = getattr(self, "_schedule", None)
        if schedule is None:  # saved before the schedule was kept: its last rate, constant
            lr, mom = self._last_step
            schedule = [Phase(0, lr, mom, name="main")]
        _, scale, clip, _ = self._phases(self.embedding_.shape[0])
        return FittedCoupling(prior_z=mk["prior_z"], kernel=self.kernel_,
                              repulsion=mk["repulsion"], negative_samples=mk["negative_samples"],
                              negative_weight=mk["negative_weight"], schedule=list(schedule),
                              loss_scale=scale, grad_clip=clip,
                              epoch_steps=int(mk.get("epoch_steps", 1)), model_kernel=mk["kernel"])

    def _model_kwargs(self) -> dict:
        """``model_kwargs_`` without the optimiser's settings that files saved before
        :class:`~probdr.infer.schedule.OptimiserHooks` kept there (the fitted coupling's now)."""
        return {k: v for k, v in self.model_kwargs_.items() if k not in _OPTIMISER_KEYS}

    def latent_law(self, Z) -> GraphLaw:
        """The posterior law of the latent graph W_Z given Z (float64), under the fit's latent
        prior and its kernel (``kernel_``: learned numbers at their MAP)."""
        Zt = self._check_Z(Z)
        return self._fitted_coupling().latent_law(Zt)

    def loss(self, Z) -> float:
        """The coupling cross-entropy H(Z) between the laws of W_X and W_Z (Van Assel et al.
        2022, §3.1), exactly (all ordered pairs i ≠ j, float64), from ``input_graph_.mean``."""
        law = self.latent_law(Z)
        P = self._observed_graph()
        return float(law.cross_entropy(P.double().coalesce() if P.is_sparse else P.double()))

    def log_joint(self, Z) -> float:
        """The Pyro model's log joint density at Z (exact repulsion, no exaggeration, float64)."""
        import pyro.poutine as poutine

        Zt = self._check_Z(Z)
        kw = dict(self._model_kwargs(), kernel=self.kernel_)  # learned numbers at their MAP
        P = self._observed_graph()
        kw.update(W_X=P.double().coalesce() if P.is_sparse else P.double(), repulsion="exact")
        tr = poutine.trace(poutine.condition(graph_coupling_model, data={"Z": Zt})).get_trace(**kw)
        return float(tr.log_prob_sum())

    # -- continuing the fit --------------------------------------------------------------------
    @in_fit_environment
    def optimize(self, n_iter: int, *, learning_rate: float | None = None,
                 momentum: float | None = None, exaggeration: float | None = None):
        """Continue optimising the fitted embedding for ``n_iter`` more steps (openTSNE's
        ``optimize``), from where the previous ``fit`` or ``optimize`` stopped: the optimiser's
        state (gains, velocity, moments) and torch's random stream (negative samples, sampled
        graphs) go on as in one longer run, and so does the schedule:

        * a fit stopped before the end of its schedule (by a callback) first runs the rest of
          it, as planned: ``fit`` of ``N`` steps stopped after ``a``, then ``optimize(N - a)``
          (with ``callbacks=None``: optimize runs the callbacks too, counting from 1), is
          bitwise the uninterrupted fit (also for UMAP's and LargeVis's decaying rate);
        * past the end, the last phase goes on. A constant learning rate stays (t-SNE,
          GraphCoupling: ``fit`` of ``a`` steps then ``optimize(b)`` is bitwise a fit of
          ``a + b``). A linear decay to 0 (UMAP, LargeVis) cannot go on past 0: it is stretched,
          the new steps taking the rates that a decay planned ``a + b`` steps long gives its
          steps ``a`` to ``a + b - 1``, from ``lr0 * b / (a + b)`` down towards 0. Only the
          first ``a`` steps' rates then differ from a fit of ``a + b`` steps.

        ``learning_rate`` (held constant), ``momentum`` and ``exaggeration`` replace the
        schedule's in every new step. Updates ``embedding_``, ``loss_history_`` and
        ``loss_steps_`` (appended) and ``n_iter_``; the callbacks run as in ``fit``. Returns
        ``self``."""
        from ..infer.map import fit_callbacks
        from .base import isolated_random_state

        self._check_fitted()
        check_scalar(n_iter, "n_iter", Integral, min_val=1)
        if exaggeration is not None:
            check_scalar(exaggeration, "exaggeration", Real, min_val=0,
                         include_boundaries="neither")
        if self.inference != "map":
            raise ValueError("optimize continues a MAP fit; with inference="
                             f"{self.inference!r} refit the estimator instead.")
        coupling = self._fitted_coupling()
        phases = coupling.continuation(int(self.n_iter_), int(n_iter), learning_rate, momentum,
                                       exaggeration)
        scale, clip = coupling.loss_scale, coupling.grad_clip
        Z0 = torch.as_tensor(self.embedding_).to(self._fit_dtype)
        init, sites = coupling.start(Z0, getattr(self, "learned_kernel_params_", None))
        seed = (self.random_state_ + int(self.n_iter_)) % (2**32)  # for files without _stream
        with isolated_random_state(seed), fit_callbacks(self._callback(), self.callbacks_every):
            res = run_map(coupling.model(), self._model_kwargs(), init, phases,
                          optimizer=self.optimizer, loss_scale=scale, grad_clip=clip,
                          observe=self._observe(), verbose=self.verbose,
                          desc=f"{type(self).__name__}.optimize",
                          optimizer_state=self._optimizer_state,
                          stream=getattr(self, "_stream", None), first_step=int(self.n_iter_),
                          **sites)
        self._stream = res.stream
        self._coupling, self.learned_kernel_params_ = coupling.learned(res.values)
        self.kernel_ = self._coupling.kernel
        if not torch.isfinite(res.Z).all():
            raise FloatingPointError(f"{type(self).__name__}.optimize produced a non-finite "
                                     "embedding; lower the learning rate.")
        self.embedding_ = res.Z.detach().to(torch.float64).cpu().numpy()
        self.loss_history_ = np.concatenate([self.loss_history_, res.loss_history])
        done = getattr(self, "loss_steps_", None)  # absent in estimators saved before it
        done = np.arange(1, len(self.loss_history_) + 1) if done is None else done
        self.loss_steps_ = np.concatenate([done, int(self.n_iter_) + res.loss_steps])
        self.n_iter_ = int(self.n_iter_) + res.n_iter
        self.stopped_by_callback_ = res.stopped
        self._optimizer_state = res.optimizer_state
        return self

    # -- new points ------------------------------------------------------------------------------
    #: ``transform``'s ``n_iter`` is an option, not metadata that a meta-estimator routes:
    #: scikit-learn then adds no ``set_transform_request`` method
    __metadata_request__transform = {"n_iter": UNUSED}

    def _new_points(self) -> NewPoints:
        """New points against this fit (:class:`~probdr.estimators.coupling_new_points.NewPoints`):
        the fitted coupling, embedding and dtype, and the ``coupling_weight`` and ``z_prior``
        of the new points' model."""
        return NewPoints(self._fitted_coupling(), self.embedding_, self._fit_dtype,
                         coupling_weight=self.coupling_weight, z_prior=self.z_prior,
                         verbose=self.verbose, name=type(self).__name__)

    def _new_rows(self, X_new) -> tuple[torch.Tensor, torch.Tensor]:
        """The new points' input rows and, for each, the index of a training point it is (-1
        if none): the fit's input side (:class:`probdr.input.InputGraph`), which keeps the
        calibration and the reference points (with a precomputed input, ``X_new`` holds the new
        points' distances or affinities to the training points). ``X_new``: validated by
        ``_validate_new``, not scanned again."""
        side = self._fitted_input()
        return side.rows(X_new, validated=True), side.matches(X_new, validated=True)

    @in_fit_environment
    def transform(self, X, *, n_iter: int = 100):
        r"""Place new points into the fitted embedding (MAP of each new point's position given
        the fitted embedding, which is not changed; :mod:`probdr.estimators.coupling_new_points`).

        Parameters
        ----------
        X : array (m, n_features)
        n_iter : int
            Adam steps per batch of new points (learning rate ``TRANSFORM_LR`` times the
            embedding's median nearest-neighbour distance, decaying linearly to 0).

        Returns
        -------
        array (m, n_components): numpy in -> numpy out, torch in -> torch out.
        """
        Xt = self._validate_new(X)
        check_n_iter(n_iter)
        P, match = self._new_rows(Xt)
        return self._output(self._new_points().place(P, match, int(n_iter)), X)

    @in_fit_environment
    def sample_transform(self, X, num_samples: int = 200, random_state=None, *,
                         num_warmup: int = 300, thin: int = 4, n_iter: int = 100):
        """Draws from each new point's conditional posterior given the fitted embedding,
        p(z_i | ·) ∝ p(z_i) exp(β ℓ_i(z_i)), ℓ_i its coupling log-likelihood, at the
        estimator's ``coupling_weight`` β; "auto" (the default) applies the tail rule of
        :func:`auto_coupling_weight` to the new rows (4 for 2-D t-SNE), so that spreads reflect
        the data rather than the prior.

        Exact per-point Markov chains: two random-walk Metropolis chains per new point, started
        at the MAP (:meth:`transform`), each point's step adapted during ``num_warmup`` steps,
        then every ``thin``-th state kept (:func:`probdr.infer.metropolis.random_walk_metropolis`).
        The prior: ``z_prior`` as a scale, or (``None``) an isotropic Gaussian centred on the
        embedding with ``SAMPLE_PRIOR_SCALE`` times its RMS spread. Summaries:
        :func:`probdr.infer.draws.point_summary`; plot with
        :func:`probdr.plotting.plot_uncertainty`.

        Returns
        -------
        array (num_samples, m, n_components)
        """
        from .base import resolve_seed

        check_sampling_options(num_samples, num_warmup, thin, n_iter)
        Xt = self._validate_new(X)
        seed = resolve_seed(random_state)
        P, match = self._new_rows(Xt)
        draws, low_accept = self._new_points().sample(P, match, num_samples, num_warmup, thin,
                                                      int(n_iter), seed)
        if low_accept:
            warnings.warn(f"{low_accept} new point(s) had an acceptance rate below 5% in "
                          "sample_transform: raise num_warmup.", RuntimeWarning, stacklevel=2)
        out = draws.to(torch.float64).cpu().numpy()
        if isinstance(X, torch.Tensor):
            return torch.from_numpy(out).to(X.device)
        return out
