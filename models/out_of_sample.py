r"""New points in a fitted graph coupling: the conditional model of their positions.

A new point is a new node of the same generative model. Its input-graph row against the
:math:`n` training (reference) nodes is a closed-form law (:func:`probdr.input.graph.new_point_rows`
gives its mean :math:`p_{i\cdot}`), and with the fitted embedding :math:`Z_{\rm ref}` held fixed
its latent row has the latent prior's law with weights
:math:`K_{ij} = k_z(\|z_i - z^{\rm ref}_j\|^2)`. The new points are independent given the reference
(as in openTSNE's and umap-learn's ``transform``); the reference rows are not refitted. Per new
point :math:`i` the coupling log-likelihood is

* **categorical rows** (latent prior D; and E, whose row given its degree is the D law -- a
  multinomial restricted to a subset of its cells and conditioned on their total is a
  multinomial over them):

  .. math:: \ell_i(z_i) = \sum_j p_{ij}\log K_{ij} - p_{i+}\log\sum_{j=1}^n K_{ij};

* **Bernoulli rows** (latent prior B, odds :math:`K_{ij}`, edge probability
  :math:`\sigma(\log K_{ij})`):

  .. math:: \ell_i(z_i) = \sum_j p_{ij}\log\sigma(\log K_{ij})
            + \sum_j \omega_{ij}\log\sigma(-\log K_{ij}),

  with :math:`\omega_{ij} = 1 - p_{ij}` (the exact B law), or, for a fit by negative sampling,
  the expectation of that scheme, :math:`\omega_{ij} = \gamma\, m\, p_{i+}/n` for every
  :math:`j` (``negative_samples`` :math:`m` uniform negatives of weight :math:`\gamma` per unit of
  edge weight; see :mod:`probdr.models.coupling`).

The posterior of a new point's position is
:math:`p(z_i \mid \cdot) \propto p(z_i)\, e^{\beta \ell_i(z_i)}` with the estimator's
``coupling_weight`` :math:`\beta`.

The likelihood is not written here again: it is the graph law's own, evaluated on weights pinned
to the reference rows (:class:`probdr.laws.weights.ReferenceWeights`) by
:meth:`probdr.laws.graph.GraphLaw.rows_log_prob` -- the D law's for categorical rows, the B
law's for Bernoulli rows.
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

from probdr.laws.graph import BinaryGraph, UnitDegreeGraph
from probdr.laws.weights import ReferenceWeights

__all__ = ["ROW_LAWS", "new_point_log_likelihood", "new_points_model"]

#: the law that scores a new row: categorical (the D law; the E law's row given its degree) or
#: Bernoulli (the B law)
ROW_LAWS = {"categorical": UnitDegreeGraph, "bernoulli": BinaryGraph}


def new_point_log_likelihood(Z: torch.Tensor, edges: tuple, Z_ref: torch.Tensor, kernel,
                             row_law: str = "categorical",
                             nonedge_weight: torch.Tensor | None = None,
                             field=None) -> torch.Tensor:
    r"""Per-point coupling log-likelihood :math:`\ell_i(z_i)` of new points (module docstring):
    the row law's :meth:`~probdr.laws.graph.GraphLaw.rows_log_prob` on the weights of the new
    rows against the reference points (:class:`~probdr.laws.weights.ReferenceWeights`).

    Parameters
    ----------
    Z : tensor (..., m, q)
        Positions of the new points (leading batch dimensions allowed, e.g. proposals).
    edges : (rows, cols, values)
        The nonzero entries :math:`p_{ij}` of the new points' input-graph rows against the
        reference points (``rows`` in ``[0, m)``, ``cols`` in ``[0, n)``).
    Z_ref : tensor (n, q)
        The fitted (fixed) reference embedding.
    kernel : probdr.kernels.Kernel
    row_law : {"categorical", "bernoulli"}
    nonedge_weight : tensor (m,), optional
        Bernoulli rows only: the weight of every pair's non-edge term (expected negative
        sampling); ``None`` is the exact B law, :math:`1 - p_{ij}`.
    field : probdr._compute.fft.CauchyField or probdr._compute.pair_field.ReferenceField, optional
        In 2-D, the reference points' field (computed once): for categorical rows with the
        Cauchy kernel (:class:`~probdr._compute.fft.CauchyField`), the normaliser
        :math:`\log\sum_j K_{ij}` interpolated; for Bernoulli rows
        (:class:`~probdr._compute.pair_field.ReferenceField` of :math:`-\log(1 + K)`), the
        non-edge sum :math:`-\sum_j \log(1 + K_{ij})`, near pairs exact and the far part
        interpolated. ``None``: sums over all pairs.

    Returns
    -------
    tensor (..., m)
    """
    if row_law not in ROW_LAWS:
        raise ValueError(f"row_law must be one of {tuple(ROW_LAWS)}, got {row_law!r}.")
    law = ROW_LAWS[row_law](ReferenceWeights(Z, Z_ref, kernel, field))
    return law.rows_log_prob(edges, nonedge_weight)


def new_points_model(edges: tuple, Z_ref: torch.Tensor, kernel, n_components: int, n_new: int, *,
                     row_law: str = "categorical", nonedge_weight: torch.Tensor | None = None,
                     z_prior: dist.TorchDistribution | None = None,
                     coupling_weight: float = 1.0, field=None):
    r"""Pyro model of new points' positions given the fitted reference embedding: a site ``Z``
    of shape (m, q) (flat prior unless ``z_prior``) and the factor
    :math:`\beta \sum_i \ell_i(z_i)` (:func:`new_point_log_likelihood`); ``edges`` as there,
    ``n_new`` = m."""
    prior = (dist.ImproperUniform(constraints.real, (), (n_new, n_components)) if z_prior is None
             else z_prior)
    Z = pyro.sample("Z", prior)
    ll = new_point_log_likelihood(Z, edges, Z_ref, kernel, row_law, nonedge_weight, field)
    pyro.factor("W_new", coupling_weight * ll.sum())
    return Z
