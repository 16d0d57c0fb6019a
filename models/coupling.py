r"""Probabilistic graph coupling (Van Assel, Espinasse, Chiquet & Picard, NeurIPS 2022).

Hidden graphs structure the rows of the data and of the embedding through pairwise Markov random
fields. Under the limit priors of Definition 2 (B, D or E, with edge prior :math:`\pi`), the
posterior of the input graph is closed-form (Proposition 1),

.. math:: W_X \mid X \sim \mathbb P_{\mathcal P_X}(\cdot;\ \pi \odot K_X),

and the embedding is fitted by coupling the two posteriors with a cross-entropy,

.. math::
    Z \sim \text{flat prior},\qquad
    W_Z \mid Z \sim \mathbb P_{\mathcal P_Z}(\cdot;\ \pi \odot K_Z),\quad K_{Z,ij} = k_z(\|z_i-z_j\|^2),
    \qquad W_Z \text{ observed at } \mathbb E[W_X \mid X] \text{ (or at draws of } W_X\text{)},

so that :math:`-\log p(Z \mid W_Z = \mathbb E[W_X]) = \mathcal H_{\mathcal P_X, \mathcal P_Z}(Z)`
+ const. MAP over Z gives SNE (D, D, Gaussian), t-SNE (D, E, Student), LargeVis (D, B, Student)
and UMAP (B~, B, UMAP curve).

Negative sampling (UMAP, LargeVis in practice) replaces the B law's all-pairs non-edge term by
``negative_samples`` uniformly drawn non-neighbours per observed edge, each weighted by the edge
weight times ``negative_weight``:

.. math::
    \sum_{(i,j)} \bar P_{ij} \log Q^B_{ij}
    + \gamma \sum_{(i,j)} \bar P_{ij} \sum_{k \sim \mathcal U[n]}^{m} \log(1 - Q^B_{ik}),

which in expectation is a B law whose non-edges are down-weighted by
:math:`\gamma\, m\, \bar P_{i+}/n` -- the effective repulsion of umap-learn and LargeVis.
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from torch.distributions import constraints

from probdr._compute.edges import epoch_edges
from probdr.laws.graph import GraphPrior
from probdr.laws.weights import KernelWeights

from .coupling_fused import coupling_fused_step

__all__ = ["graph_coupling_model", "flat_prior"]


def flat_prior(n: int, q: int, dtype=torch.float32) -> dist.TorchDistribution:
    """Improper flat prior :math:`p(Z) \\propto 1` on :math:`\\mathbb R^{n \\times q}`."""
    return dist.ImproperUniform(constraints.real, (), (n, q))


def graph_coupling_model(
    W_X: torch.Tensor,
    prior_z: GraphPrior,
    kernel,
    n_components: int,
    *,
    z_prior: dist.TorchDistribution | None = None,
    exaggeration: float = 1.0,
    repulsion: str = "exact",
    negative_samples: int = 5,
    negative_weight: float = 1.0,
    coupling_weight: float = 1.0,
):
    """Pyro model of the graph coupling.

    Parameters
    ----------
    W_X : tensor (n, n), dense or sparse COO
        The observed input graph: the posterior mean :math:`\\mathbb E[W_X \\mid X]` or a draw.
    prior_z : GraphPrior
        Latent graph prior (B, D or E, with its edge prior).
    kernel : probdr.kernels.Kernel
        Latent kernel :math:`k_z`. Its numbers given as :class:`probdr.kernels.Learn` are latent
        sites of the model, drawn after ``Z`` (e.g. ``StudentKernel(dof=Learn())``: the site
        ``"dof"``), inferred with Z by MAP, SVI or NUTS.
    z_prior : distribution over (n, q), optional
        Prior on Z; default flat (improper), as in the paper.
    exaggeration : float
        Early exaggeration :math:`\\alpha`: adds :math:`(\\alpha-1)` times the MRF attraction
        :math:`\\sum W_{X,ij} \\log k_z` as a factor.
    repulsion : {"exact", "fft", "sampled", "negative_sampling"}
        How the all-pairs (repulsive) normaliser of the latent law is computed: exactly,
        by FFT interpolation (2-D: the E law with a Student kernel, t-SNE; the B law, UMAP's
        and LargeVis's exact likelihood), by Monte Carlo over ``negative_samples`` uniform
        partners per node (any law), or by umap-learn's negative sampling (B law only: a
        down-weighted non-edge likelihood, see the module docstring).
    coupling_weight : float
        Weight (inverse temperature) of the coupling likelihood, via ``poutine.scale``.

    The optimiser's heuristics are not the model's: umap-learn's per-pair gradient clip and
    negative sampling's epoch cut into optimiser steps (each step's share of the edges, weighed
    as its share or as the whole epoch) are Pyro effects of the sites, set by the driver's
    handler (:class:`probdr.infer.schedule.OptimiserHooks`); run on its own, the model uses
    each edge with probability :math:`v_e / \\max v` at every call.

    Data-parallel (the model declares ``data_parallel = True``): in a fit sharded over the ranks
    of a process group, the latent weights and their law evaluate each rank's share of the log
    joint -- its chunk of the edges and negative samples, its rows of the normalisers, its share
    of the E law's constant -- and the MAP driver carries its share of the prior of Z
    (:class:`probdr.infer.map.MAPFit`), so that the ranks' shares sum to the log joint.
    """
    n = W_X.shape[0]
    Z = pyro.sample("Z", flat_prior(n, n_components) if z_prior is None else z_prior)
    kernel = kernel.sampled()  # a number given as Learn is a latent site (e.g. "dof")
    normaliser = repulsion if repulsion in ("exact", "fft", "sampled") else "exact"
    K_Z = KernelWeights(Z, kernel, normaliser=normaliser, n_samples=negative_samples)
    law = prior_z.posterior(K_Z)
    with poutine.scale(scale=coupling_weight):
        if repulsion in ("exact", "fft", "sampled"):
            pyro.sample("W_Z", law, obs=W_X)
        elif repulsion == "negative_sampling":
            if prior_z.kind != "B":
                raise ValueError("negative sampling is defined here for the B latent prior only.")
            _negative_sampling_likelihood(law, W_X, negative_samples, negative_weight, n)
        else:
            raise ValueError("repulsion must be 'exact', 'fft', 'sampled' or 'negative_sampling', "
                             f"got {repulsion!r}.")
        if exaggeration != 1.0:
            pyro.factor("exaggeration", (exaggeration - 1.0) * law.attraction(W_X))
    return Z


#: the model can be evaluated in shares, one per rank of a data-parallel fit
graph_coupling_model.data_parallel = True


def coupling_point_precisions(Z: torch.Tensor, *, W_X, prior_z, kernel, z_prior=None,
                              repulsion="exact", negative_samples=5, negative_weight=1.0,
                              coupling_weight=1.0, **_) -> torch.Tensor:
    r"""The per-point posterior precision blocks of :func:`graph_coupling_model` at ``Z``
    (:func:`probdr.laws.curvature.point_precisions`): the latent law's curvature in each
    :math:`z_i` -- of the exact law, or of the negative-sampling surrogate that a fit by
    negative sampling optimises -- times ``coupling_weight``, plus the Gaussian ``z_prior``'s
    precision. A latent edge prior is refused (its weights are not a kernel of the distance)."""
    from probdr.laws.curvature import point_precisions

    if prior_z.edge_prior is not None:
        raise ValueError("the Laplace approximation covers latent laws without an edge prior.")
    ns = (int(negative_samples), float(negative_weight)) if repulsion == "negative_sampling" \
        else None
    return point_precisions(Z, W_X, prior_z.kind, kernel.fixed(), coupling_weight=coupling_weight,
                            prior_precision=gaussian_precision(z_prior, Z.shape),
                            negative_sampling=ns)


def gaussian_precision(z_prior, shape) -> torch.Tensor | None:
    """The per-coordinate precision (n, q) of a Gaussian prior with independent coordinates
    (``Normal(loc, scale)`` expanded to (n, q)); ``None`` for no prior; otherwise an error."""
    if z_prior is None:
        return None
    base = z_prior
    while isinstance(base, (dist.Independent, torch.distributions.Independent)):
        base = base.base_dist
    if not isinstance(base, torch.distributions.Normal):
        raise ValueError("the Laplace approximation needs a Gaussian prior on Z with independent "
                         f"coordinates, got {type(z_prior).__name__}.")
    return (base.scale.to(torch.float64) ** -2).expand(shape)


#: the per-point curvature at a point (the Laplace approximation, probdr.infer.laplace)
graph_coupling_model.point_precisions = coupling_point_precisions
#: the likelihood's value and gradient on Z by explicit formulas, where it has them (the MAP
#: driver's fused step, :mod:`probdr.models.coupling_fused`)
graph_coupling_model.fused_step = coupling_fused_step


def _negative_sampling_likelihood(law, W_X, m, gamma, n):
    """umap-learn's scheme: each epoch, edge e is used with probability v_e / max(v) (then with
    weight max(v)), and every used edge draws m uniform negatives. In expectation over the draws
    this is the objective of the module docstring; the work per epoch is O(sum(v) * m).

    The driver may cut an epoch into optimiser steps, each using an edge with probability
    v_e / (max(v) steps) at the same weight (:data:`probdr._compute.edges.epoch_edges`, set by
    :class:`probdr.infer.schedule.OptimiserHooks`: an edge acts at most once per epoch, in a
    step drawn at random): the points move between the parts of an epoch, as they do in
    umap-learn's sequential updates (which all read the latest positions)."""
    weights = law.weights
    rows, cols, v, vmax = weights.observed_edges(W_X)
    gen = weights.generator
    rows, cols, neg_rows, mask, neg_mask, weight = epoch_edges(v, vmax, rows, cols, n, m, gen)
    with pyro.plate("edges", rows.numel()), poutine.scale(scale=weight):
        pyro.sample("W_Z_edges", law.edges_at(rows, cols, mask),
                    obs=torch.ones(rows.numel(), dtype=v.dtype, device=v.device))
    # uniform over the other n - 1 nodes: never the node itself
    neg_cols = (neg_rows + torch.randint(1, n, (neg_rows.numel(),), device=rows.device,
                                         generator=gen)) % n
    with pyro.plate("negatives", neg_rows.numel()), poutine.scale(scale=gamma * weight):
        pyro.sample("W_Z_negatives", law.edges_at(neg_rows, neg_cols, neg_mask),
                    obs=torch.zeros(neg_rows.numel(), dtype=v.dtype, device=v.device))
