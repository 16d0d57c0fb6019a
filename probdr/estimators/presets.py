"""The graph-coupling presets :class:`SNE`, :class:`TSNE`, :class:`LargeVis` and :class:`UMAP`:
each is :class:`~probdr.estimators.coupling.GraphCoupling` with its fixed choices (priors,
kernel, optimiser, schedule) as class attributes and its own parameters and defaults declared
(``_defaults``).

=========  =======  =======  ============  ===========  ==========================================
preset     prior_x  prior_z  kernel_z      affinity     optimisation default
=========  =======  =======  ============  ===========  ==========================================
SNE        D        D        gaussian      entropic     exact normalisers, gains + momentum
TSNE       D        E        student       entropic     exact normalisers, early exaggeration 12
LargeVis   D        B        student       entropic     negative sampling (m=5, gamma=7), SGD
UMAP       B~       B        umap_odds     umap         negative sampling (m=5, gamma=1), SGD
=========  =======  =======  ============  ===========  ==========================================

``affinity`` is the preset's calibration, or ``"precomputed"`` (X is the input affinity).

A preset is a declaration, not a constructor written out: its class attributes fix the
choices of :class:`GraphCoupling` it does not open (use :class:`GraphCoupling` to change them),
``_positional`` names the parameters that come first, and ``_defaults`` gives its own parameters
and the defaults it changes. Its ``__init__`` is made from :class:`GraphCoupling`'s signature
(:func:`declare`): every parameter of GraphCoupling that the preset does not fix is the
preset's too, with GraphCoupling's default unless ``_defaults`` changes it. So a parameter added
to GraphCoupling (its ``__init__`` entry and its row of :data:`probdr.estimators.params.TABLE`)
reaches every preset that does not fix it, with its constraint and its docstring entry.
"""

from __future__ import annotations

import inspect

from .compat import foreign_names
from .coupling import GraphCoupling
from .docs import reference

__all__ = ["SNE", "TSNE", "LargeVis", "UMAP"]

def preset_signature(cls) -> inspect.Signature:
    """The ``__init__`` signature of the preset ``cls``: ``_positional``, then its own
    parameters (in ``_defaults``, not GraphCoupling's), then GraphCoupling's keyword parameters
    in their order, less those ``cls`` fixes (a class attribute of ``cls`` or of a base below
    GraphCoupling that ``_defaults`` does not name), each with its default in ``_defaults``
    or GraphCoupling's."""
    family = inspect.signature(GraphCoupling.__init__).parameters
    declared = cls._defaults
    fixed = {name for klass in cls.__mro__[:cls.__mro__.index(GraphCoupling)]
             for name in vars(klass) if name in family} - set(declared)
    kw, pos = inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD

    def param(name, kind):
        base = family.get(name)
        default = declared[name] if name in declared else base.default
        annotation = base.annotation if base is not None else inspect.Parameter.empty
        return inspect.Parameter(name, kind, default=default, annotation=annotation)

    names = [n for n in family if n != "self" and n not in fixed and n not in cls._positional]
    own = [n for n in declared if n not in family and n not in cls._positional]
    return inspect.Signature([inspect.Parameter("self", pos)]
                             + [param(n, pos) for n in cls._positional]
                             + [param(n, kw) for n in own + names])


def declare(cls) -> None:
    """Give the preset ``cls`` its ``__init__``: the parameters of :func:`preset_signature`,
    each stored as it is given (scikit-learn's rule; ``get_params`` reads the signature)."""
    signature = preset_signature(cls)

    def __init__(self, *args, **kwargs):
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError as err:  # Python's message for a written-out __init__
            raise TypeError(f"{type(self).__name__}.__init__() {err}") from None
        bound.apply_defaults()
        for name, value in list(bound.arguments.items())[1:]:
            setattr(self, name, value)

    __init__.__signature__ = signature
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__doc__ = f"Store the parameters of {cls.__name__} (see the class docstring)."
    cls.__init__ = __init__


class Preset(GraphCoupling):
    """A preset: GraphCoupling with choices fixed (class attributes), its parameters declared
    (``_positional``, ``_defaults``) and its ``__init__`` made from them (:func:`declare`) when
    the class is defined, unless the class writes its own. The base of the presets of this
    module and of :class:`~probdr.estimators.snekhorn.SNEkhorn` and ``TSNEkhorn``."""

    #: the parameters that may be given by position, in order
    _positional: tuple[str, ...] = ("perplexity", "n_components")
    #: the preset's own parameters and the defaults it changes, ``{name: default}``
    _defaults: dict = {}

    def __init_subclass__(cls, **kwargs):
        if "__init__" not in vars(cls):
            declare(cls)  # before the base reads the signature (the constraints)
        super().__init_subclass__(**kwargs)


class _GainsPreset(Preset):
    """Fixed choices of the exact-normaliser presets fitted with t-SNE's gains optimiser."""

    prior_x = "D"
    n_neighbors = None
    kernel_params = None
    negative_weight = 1.0
    optimizer = "gains"
    learning_rate_decay = False
    grad_clip = None
    init_scale = 1e-4


class _SGDPreset(Preset):
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


@reference
class SNE(_GainsPreset):
    """Stochastic neighbour embedding (Hinton & Roweis 2002) as a graph coupling: entropic input
    affinities under the D prior (one out-edge per node: SNE's row-normalised P), the D prior
    on the latent graph too, and the Gaussian latent kernel k(d) = exp(-d²), fitted with exact
    normalisers by t-SNE's gains optimiser with momentum.

    The default learning rate (10, with momentum and gains) was measured stable; t-SNE's
    automatic rate (about n / 4) makes SNE diverge (the Gaussian kernel gives points that fly
    off no force back). The choices not in the signature are GraphCoupling's at the values of
    the class attributes (``SNE.prior_x``, ``SNE.optimizer``, ...).

    Attributes
    ----------
    embedding_
    input_
    input_graph_
    kernel_
    loss_history_
    n_iter_
    n_threads_
    device_
    random_state_
    coupling_weight_
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
    TSNE : the Student latent kernel and a global normaliser.
    GraphCoupling : every choice open.

    References
    ----------
    G. Hinton, S. Roweis. Stochastic Neighbor Embedding. NeurIPS 2002.

    Examples
    --------
    >>> import probdr
    >>> X, y = probdr.datasets.load("digits", n_samples=200)
    >>> sne = probdr.SNE(perplexity=20, random_state=0)
    >>> Z = sne.fit_transform(X)
    >>> Z.shape
    (200, 2)
    >>> probdr.metrics.trustworthiness(X, Z, k=10) > 0.9
    True
    """

    prior_z = "D"
    _defaults = {"kernel_z": "gaussian", "affinity": "entropic", "negative_samples": 10,
                 "early_exaggeration": 4.0, "learning_rate": 10.0}


@foreign_names("scikit-learn", "openTSNE")
@reference
class TSNE(_GainsPreset):
    """t-SNE (van der Maaten & Hinton 2008) as a graph coupling: entropic input affinities under
    the D prior (SNE's row-normalised P), the E prior on the latent graph (n edges in all: one
    global normaliser, t-SNE's Q) and the Student latent kernel, by default the Cauchy kernel
    k(d) = 1/(1 + d²); fitted as openTSNE does: early exaggeration 12 for 250 of 750 steps,
    t-SNE's gains optimiser with momentum, openTSNE's learning rate.

    The normaliser is computed exactly up to 1,000 points in 2-D (4,000 in other dimensions),
    by FFT interpolation above in 2-D, by sampling above in other dimensions (``repulsion``).
    The choices not in the signature are GraphCoupling's at the values of the class
    attributes (``TSNE.prior_x``, ``TSNE.optimizer``, ...).

    Parameters
    ----------
    dof : float or "learn"
        Degrees of freedom ν of the Student kernel k(d) = (1 + d²/ν)^(-(ν+1)/2): 1 is t-SNE's
        Cauchy kernel, smaller values give heavier tails and more separated clusters (Kobak et
        al. 2019). "learn" fits ν by MAP with the embedding (a latent site with a flat prior,
        started at 1, held during early exaggeration); its value is
        ``learned_kernel_params_["dof"]``.

    Attributes
    ----------
    embedding_
    input_
    input_graph_
    kernel_
    learned_kernel_params_
    loss_history_
    loss_steps_
    n_iter_
    n_threads_
    device_
    random_state_
    coupling_weight_
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
    UMAP : the B priors, UMAP's curve and negative sampling.
    TSNEkhorn : t-SNE with symmetric entropic affinities and a doubly stochastic latent law.
    GraphCoupling : every choice open.
    ccPCA : an initialisation that keeps the positions of the clusters (``init="ccpca"``).

    References
    ----------
    L. van der Maaten, G. Hinton. Visualizing Data using t-SNE. JMLR 2008.
    D. Kobak, G. Linderman, S. Steinerberger, Y. Kluger, P. Berens. Heavy-tailed kernels
    reveal a finer cluster structure in t-SNE visualisations. ECML PKDD 2019.

    Examples
    --------
    >>> import probdr
    >>> X, y = probdr.datasets.load("digits", n_samples=200)
    >>> tsne = probdr.TSNE(perplexity=20, random_state=0)
    >>> Z = tsne.fit_transform(X)
    >>> Z.shape
    (200, 2)
    >>> probdr.metrics.trustworthiness(X, Z, k=10) > 0.95
    True

    Learn the tails (the degrees of freedom) with the embedding, then place new points:

    >>> tsne = probdr.TSNE(perplexity=20, dof="learn", random_state=0).fit(X[:150])
    >>> sorted(tsne.learned_kernel_params_)
    ['dof']
    >>> tsne.transform(X[150:]).shape
    (50, 2)
    """

    prior_z = "E"
    kernel_z = "student"
    _defaults = {"dof": 1.0, "affinity": "entropic", "negative_samples": 10}
    _kernel_args = ("dof",)


@reference
class LargeVis(_SGDPreset):
    """LargeVis (Tang et al. 2016) as a graph coupling: entropic input affinities under the D
    prior, the B prior on the latent graph (independent Bernoulli edges) and the Student latent
    kernel k(d) = 1/(1 + d²), fitted by negative sampling (5 negatives per edge, weight γ = 7,
    as Tang et al.) with SGD, the learning rate decaying linearly to 0 and the forces clipped at
    4 (umap-learn's scheme).

    ``repulsion="exact"`` optimises the exact cross-entropy of the coupling (D, B). The choices
    not in the signature are GraphCoupling's at the values of the class attributes
    (``LargeVis.prior_z``, ``LargeVis.optimizer``, ...).

    Parameters
    ----------
    learning_rate : float or "auto"
        Step size of SGD, decaying linearly to 0 over the fit; "auto": 1 (umap-learn's).

    Attributes
    ----------
    embedding_
    input_
    input_graph_
    kernel_
    loss_history_
    n_iter_
    n_threads_
    device_
    random_state_
    coupling_weight_
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
    UMAP : the same prior on the latent graph with UMAP's input graph and curve.
    TSNE : the E prior on the latent graph.
    GraphCoupling : every choice open.

    References
    ----------
    J. Tang, J. Liu, M. Zhang, Q. Mei. Visualizing Large-scale and High-dimensional Data.
    WWW 2016.

    Examples
    --------
    >>> import probdr
    >>> X, y = probdr.datasets.load("digits", n_samples=200)
    >>> lv = probdr.LargeVis(perplexity=20, random_state=0)
    >>> Z = lv.fit_transform(X)
    >>> Z.shape
    (200, 2)
    >>> probdr.metrics.trustworthiness(X, Z, k=10) > 0.9
    True
    """

    prior_x = "D"
    kernel_z = "student"
    n_neighbors = None
    _defaults = {"affinity": "entropic", "negative_weight": 7.0, "init": "spectral",
                 "repulsion": "negative_sampling", "n_iter": 500}


@foreign_names("umap-learn")
@reference
class UMAP(_SGDPreset):
    """UMAP (McInnes et al. 2018) as a graph coupling: UMAP's fuzzy kNN weights under the
    symmetrised B~ input prior, the B prior on the latent graph (independent Bernoulli edges)
    with UMAP's curve 1/(1 + a d^(2b)) as the edge probability (kernel "umap_odds"), fitted as
    umap-learn does: negative sampling (5 per edge), SGD with learning rate 1 decaying linearly
    to 0, forces clipped at 4, spectral initialisation in the box [0, 10].

    The choices not in the signature are GraphCoupling's at the values of the class attributes
    (``UMAP.prior_x``, ``UMAP.optimizer``, ...).

    Parameters
    ----------
    n_neighbors : int
        Neighbours per point of the fuzzy kNN graph, the point itself counted (umap-learn's
        convention).
    min_dist : float
        Distance below which the curve is flat: how tightly points pack (umap-learn's).
    spread : float
        Scale of the curve, with ``min_dist``; a and b are fitted to them as umap-learn does
        (``a_``, ``b_``).
    n_epochs : int or None
        Optimisation epochs; None: by the data's size
        (``probdr.estimators.fitted.UMAP_SCHEDULE``): 100 up to 10,000 points, 60 up to
        100,000, else 100 (umap-learn: 500 up to 10,000 points, else 200).
    epoch_steps : int or "auto"
        Optimiser steps per epoch, each using its share of the epoch's edges (an edge acts at
        most once per epoch), so that points move within an epoch as in umap-learn's
        sequential updates. "auto": 3 up to 10,000 points, 12 up to 100,000, else 8. More
        steps do more per epoch: on 70,000 deformed MNIST digits at 200 epochs, 5-NN accuracy
        is 0.918, 0.923, 0.933 and 0.943 with 1, 2, 4 and 8 steps (umap-learn 0.934), and 60
        epochs of 12 steps match umap-learn's trustworthiness and 5-NN accuracy in half its
        time (docs/benchmarks.md; benchmarks/results/umap_epoch_steps.jsonl).
    learning_rate : float or "auto"
        Step size of SGD, decaying linearly to 0 over the fit; "auto": 1 (umap-learn's).

    Attributes
    ----------
    embedding_
    input_
    input_graph_
    kernel_
    a_ : float
        The curve's a, fitted from ``min_dist`` and ``spread``.
    b_ : float
        The curve's b, fitted from ``min_dist`` and ``spread``.
    epoch_steps_ : int
        Optimiser steps per epoch, "auto" resolved.
    loss_history_
    n_iter_
    n_threads_
    device_
    random_state_
    coupling_weight_
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
    TSNE : the D and E priors and the Cauchy kernel.
    LargeVis : the B latent prior with entropic input affinities.
    GraphCoupling : every choice open.
    probdr.kernels.find_ab_params : a and b from ``min_dist`` and ``spread``.

    References
    ----------
    L. McInnes, J. Healy, J. Melville. UMAP: Uniform Manifold Approximation and Projection for
    Dimension Reduction. arXiv:1802.03426 (2018).

    Examples
    --------
    >>> import probdr
    >>> X, y = probdr.datasets.load("digits", n_samples=200)
    >>> umap = probdr.UMAP(n_neighbors=10, random_state=0)
    >>> Z = umap.fit_transform(X)
    >>> Z.shape
    (200, 2)
    >>> probdr.metrics.knn_accuracy(Z, y) > 0.85
    True

    Labels, where known, pull points of the same label together (``target_weight``):

    >>> y_partial = y.copy()
    >>> y_partial[100:] = -1
    >>> Z = probdr.UMAP(n_neighbors=10, random_state=0).fit_transform(X, y_partial)
    """

    prior_x = "B~"
    kernel_z = "umap_odds"
    perplexity = None  # the calibration is by n_neighbors
    n_iter = None  # counted in epochs: n_epochs of epoch_steps steps (optimiser_steps)
    _positional = ("n_neighbors", "n_components")
    _defaults = {"n_neighbors": 15, "min_dist": 0.1, "spread": 1.0, "n_epochs": None,
                 "epoch_steps": "auto", "affinity": "umap", "init": "spectral",
                 "repulsion": "negative_sampling"}
    _kernel_args = ("min_dist", "spread")  # the curve's a, b (find_ab_params)
    _kernel_records = ("a", "b")
