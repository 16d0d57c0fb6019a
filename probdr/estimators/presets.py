"""The graph-coupling presets :class:`SNE`, :class:`TSNE`, :class:`LargeVis` and :class:`UMAP`:
each is :class:`~probdr.estimators.coupling.GraphCoupling` with its fixed choices (priors,
kernel, optimiser, schedule) as class attributes and its own parameters in ``__init__``.

=========  =======  =======  ============  ===========  ==========================================
preset     prior_x  prior_z  kernel_z      affinity     optimisation default
=========  =======  =======  ============  ===========  ==========================================
SNE        D        D        gaussian      entropic     exact normalisers, gains + momentum
TSNE       D        E        student       entropic     exact normalisers, early exaggeration 12
LargeVis   D        B        student       entropic     negative sampling (m=5, gamma=7), SGD
UMAP       B~       B        umap_odds     umap         negative sampling (m=5, gamma=1), SGD
=========  =======  =======  ============  ===========  ==========================================

``affinity`` is the preset's calibration, or ``"precomputed"`` (X is the input affinity). The
parameters not listed in a preset's signature are those of :class:`GraphCoupling` at the
values of the class attributes below (use :class:`GraphCoupling` to change them).
"""

from __future__ import annotations

import math

from ..kernels import find_ab_params, get_kernel
from .coupling import GraphCoupling

__all__ = ["SNE", "TSNE", "LargeVis", "UMAP"]


class _GainsPreset(GraphCoupling):
    """Fixed choices of the exact-normaliser presets fitted with t-SNE's gains optimiser."""

    prior_x = "D"
    affinity = "entropic"
    n_neighbors = None
    kernel_params = None
    negative_weight = 1.0
    optimizer = "gains"
    learning_rate_decay = False
    grad_clip = None
    init_scale = 1e-4


class _SGDPreset(GraphCoupling):
    """Fixed choices of the negative-sampling presets fitted by umap-learn's SGD scheme: no
    exaggeration, no momentum, learning rate decaying linearly to 0, forces clipped at 4,
    initialisation in the box [0, 10]."""

    prior_z = "B"
    kernel_params = None
    early_exaggeration = 1.0
    early_exaggeration_iter = 0
    momentum = 0.0
    early_momentum = 0.0
    optimizer = "sgd"
    learning_rate_decay = True
    grad_clip = 4.0
    init_scale = "umap"


class SNE(_GainsPreset):
    """Stochastic neighbour embedding: coupling (D, D) with a Gaussian latent kernel
    :math:`\\exp(-\\|z_i - z_j\\|^2)`. The default learning rate (10, with momentum and gains) was
    measured stable; t-SNE's automatic rate (about n / 4) makes SNE diverge (the Gaussian kernel
    gives points that fly off no force back). Parameters as :class:`GraphCoupling`."""

    prior_z = "D"

    def __init__(self, perplexity=30.0, n_components=2, *, kernel_z="gaussian", n_iter=750,
                 early_exaggeration=4.0, early_exaggeration_iter=250, learning_rate=10.0,
                 momentum=0.8, early_momentum=0.5, init="pca", repulsion="auto",
                 negative_samples=10, observe="mean", edge_prior=None, neighbors="auto",
                 inference="map", inference_params=None, z_prior=None, coupling_weight="auto",
                 latent_edge_prior=None, dtype="float32", random_state=None, verbose=False, callbacks=None,
                 callbacks_every: int = 50, n_jobs=None, device="auto", metric="euclidean", metric_params=None,
                 precomputed_knn=None, target_weight=0.5, affinity="entropic"):
        self.perplexity = perplexity
        self.n_components = n_components
        self.kernel_z = kernel_z
        self.n_iter = n_iter
        self.early_exaggeration = early_exaggeration
        self.early_exaggeration_iter = early_exaggeration_iter
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.early_momentum = early_momentum
        self.init = init
        self.repulsion = repulsion
        self.negative_samples = negative_samples
        self.observe = observe
        self.edge_prior = edge_prior
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
        self.affinity = affinity


class TSNE(_GainsPreset):
    r"""t-SNE: coupling (D, E) with the Student (Cauchy) latent kernel :math:`1/(1 + d^2)`;
    exact normalisers, early exaggeration 12 for 250 of 750 steps, openTSNE's learning rate.
    ``dof`` is the Student kernel's degrees of freedom :math:`\nu`,
    :math:`k(d^2) = (1 + d^2/\nu)^{-(\nu+1)/2}`: 1 is t-SNE's Cauchy kernel, smaller values
    give heavier tails and more separated clusters (Kobak et al. 2019), ``"learn"`` fits
    :math:`\nu` by MAP with the embedding (a latent site with a flat prior, started at 1, held
    during early exaggeration; the value is ``learned_kernel_params_["dof"]``). Other
    parameters as :class:`GraphCoupling`."""

    prior_z = "E"
    kernel_z = "student"

    def __init__(self, perplexity=30.0, n_components=2, *, dof=1.0, n_iter=750,
                 early_exaggeration=12.0, early_exaggeration_iter=250, learning_rate="auto",
                 momentum=0.8, early_momentum=0.5, init="pca", repulsion="auto",
                 negative_samples=10, observe="mean", edge_prior=None, neighbors="auto",
                 inference="map", inference_params=None, z_prior=None, coupling_weight="auto",
                 latent_edge_prior=None, dtype="float32", random_state=None, verbose=False, callbacks=None,
                 callbacks_every: int = 50, n_jobs=None, device="auto", metric="euclidean", metric_params=None,
                 precomputed_knn=None, target_weight=0.5, affinity="entropic"):
        self.perplexity = perplexity
        self.n_components = n_components
        self.dof = dof
        self.n_iter = n_iter
        self.early_exaggeration = early_exaggeration
        self.early_exaggeration_iter = early_exaggeration_iter
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.early_momentum = early_momentum
        self.init = init
        self.repulsion = repulsion
        self.negative_samples = negative_samples
        self.observe = observe
        self.edge_prior = edge_prior
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
        self.affinity = affinity

    def _make_kernel(self):
        return get_kernel("student", dof=self.dof)


class LargeVis(_SGDPreset):
    """LargeVis: coupling (D, B) with the Student latent kernel, fitted by negative sampling
    (5 negatives per edge, weight 7, as Tang et al.) with SGD; ``repulsion="exact"`` gives the
    exact :math:`\\mathcal H_{D,B}`. Parameters as :class:`GraphCoupling`."""

    prior_x = "D"
    kernel_z = "student"
    affinity = "entropic"
    n_neighbors = None

    def __init__(self, perplexity=30.0, n_components=2, *, n_iter=500, negative_samples=5,
                 negative_weight=7.0, learning_rate="auto", init="spectral",
                 repulsion="negative_sampling", observe="mean", edge_prior=None,
                 neighbors="auto", inference="map", inference_params=None, z_prior=None,
                 coupling_weight="auto", latent_edge_prior=None, dtype="float32",
                 random_state=None, verbose=False, callbacks=None,
                 callbacks_every: int = 50, n_jobs=None, device="auto", metric="euclidean", metric_params=None,
                 precomputed_knn=None, target_weight=0.5, affinity="entropic"):
        self.perplexity = perplexity
        self.n_components = n_components
        self.n_iter = n_iter
        self.negative_samples = negative_samples
        self.negative_weight = negative_weight
        self.learning_rate = learning_rate
        self.init = init
        self.repulsion = repulsion
        self.observe = observe
        self.edge_prior = edge_prior
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
        self.affinity = affinity


class UMAP(_SGDPreset):
    """UMAP: coupling (B~, B) of the symmetrised fuzzy kNN graph with UMAP's curve
    :math:`1/(1 + a d^{2b})` as the latent edge probability (kernel ``umap_odds``), fitted by
    negative sampling (5 per edge) with SGD, learning rate 1 decaying to 0, gradients clipped at
    4, spectral initialisation -- umap-learn's scheme.

    ``n_epochs``: optimisation epochs (``None``: 500 up to 10,000 points, else 200, as
    umap-learn). ``epoch_steps``: optimiser steps per epoch, each using its share of the epoch's
    edges, so that points move within an epoch as in umap-learn's sequential updates (one step
    per epoch converges more slowly on large data; measured in ``docs/benchmarks.md``);
    ``"auto"``: ceil(sqrt(n / 20000)), at most 4. ``min_dist`` and ``spread`` set the curve.
    Other parameters as :class:`GraphCoupling`. Attributes ``a_``, ``b_`` hold the curve fitted from ``min_dist``
    and ``spread``; ``epoch_steps_`` the steps per epoch used.
    """

    prior_x = "B~"
    kernel_z = "umap_odds"
    affinity = "umap"

    def __init__(self, n_neighbors=15, n_components=2, *, min_dist=0.1, spread=1.0,
                 n_epochs=None, negative_samples=5, negative_weight=1.0, learning_rate="auto",
                 init="spectral", repulsion="negative_sampling", observe="mean", edge_prior=None,
                 neighbors="auto", inference="map", inference_params=None, z_prior=None,
                 coupling_weight="auto", latent_edge_prior=None, dtype="float32",
                 random_state=None, verbose=False, callbacks=None,
                 callbacks_every: int = 50, n_jobs=None, device="auto", metric="euclidean", metric_params=None,
                 precomputed_knn=None, target_weight=0.5, affinity="umap", epoch_steps="auto"):
        self.n_neighbors = n_neighbors
        self.n_components = n_components
        self.min_dist = min_dist
        self.spread = spread
        self.n_epochs = n_epochs
        self.negative_samples = negative_samples
        self.negative_weight = negative_weight
        self.learning_rate = learning_rate
        self.init = init
        self.repulsion = repulsion
        self.observe = observe
        self.edge_prior = edge_prior
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
        self.affinity = affinity
        self.epoch_steps = epoch_steps

    def _make_kernel(self):
        self.a_, self.b_ = find_ab_params(self.spread, self.min_dist)
        return get_kernel("umap_odds", a=self.a_, b=self.b_)

    def _n_iter(self, n: int) -> int:
        epochs = int(self.n_epochs) if self.n_epochs is not None else (500 if n <= 10_000 else 200)
        return epochs * self._epoch_steps(n)

    def _epoch_steps(self, n: int) -> int:
        self.epoch_steps_ = (min(4, math.ceil(math.sqrt(n / 20_000))) if self.epoch_steps == "auto"
                             else int(self.epoch_steps))
        return self.epoch_steps_
