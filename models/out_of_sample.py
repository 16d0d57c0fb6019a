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
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from torch.distributions import constraints

from probdr._compute.allpairs import pairwise_sq_distances

__all__ = ["ROW_LAWS", "new_point_log_likelihood", "new_points_model"]

ROW_LAWS = ("categorical", "bernoulli")


def new_point_log_likelihood(Z: torch.Tensor, edges: tuple, Z_ref: torch.Tensor, kernel,
                             row_law: str = "categorical",
                             nonedge_weight: torch.Tensor | None = None,
                             field=None) -> torch.Tensor:
    r"""Per-point coupling log-likelihood :math:`\ell_i(z_i)` of new points (module docstring).

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
    rows, cols, p = edges
    m, q = Z.shape[-2:]
    lead = Z.shape[:-2]
    d2_e = (Z[..., rows, :] - Z_ref[cols]).square().sum(-1)  # (..., edges)
    logk_e = kernel.log_k(d2_e)
    p = p.to(Z.dtype)

    def per_row(v):  # sum of edge terms per new point
        return torch.zeros(*lead, m, dtype=Z.dtype).index_add_(-1, rows, v * p)

    if row_law == "categorical":
        p_tot = torch.zeros(m, dtype=Z.dtype).index_add_(0, rows, p)
        if field is not None:
            return per_row(logk_e) - p_tot * field.log_sum(Z)
        d2 = pairwise_sq_distances(Z.reshape(-1, q), Z_ref).reshape(*lead, m, -1)  # (..., m, n)
        if kernel.heavy_tailed:  # no underflow: sum the kernel itself
            log_norm = torch.log(kernel.k_and_dlog_k(d2)[0].sum(-1))
        else:
            log_norm = torch.logsumexp(kernel.log_k(d2), dim=-1)
        return per_row(logk_e) - p_tot * log_norm
    if row_law == "bernoulli":
        # log sigma(log K) = log K - log(1 + K); log sigma(-log K) = -log(1 + K)
        attraction = per_row(logk_e - F.softplus(logk_e))
        repel = _nonedge_sums(Z, Z_ref, kernel, field)
        if nonedge_weight is None:  # (1 - p_ij) on every pair
            return attraction + repel - per_row(-F.softplus(logk_e))
        return attraction + nonedge_weight * repel
    raise ValueError(f"row_law must be one of {ROW_LAWS}, got {row_law!r}.")


def _nonedge_sums(Z: torch.Tensor, Z_ref: torch.Tensor, kernel, field=None) -> torch.Tensor:
    """:math:`\\sum_j \\log\\sigma(-\\log K_{ij}) = -\\sum_j \\log(1 + K_{ij})` over all the
    reference points, (..., m): from the references' field (near pairs exact, far part
    interpolated) when one is given, else over all pairs."""
    if field is not None:
        return field.sum(Z)
    m, q = Z.shape[-2:]
    d2 = pairwise_sq_distances(Z.reshape(-1, q), Z_ref).reshape(*Z.shape[:-2], m, -1)
    if kernel.heavy_tailed:
        return -torch.log1p(kernel.k_and_dlog_k(d2)[0]).sum(-1)
    return -F.softplus(kernel.log_k(d2)).sum(-1)


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
