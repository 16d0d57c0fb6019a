r"""The fused form of the graph coupling's log-likelihood (:mod:`probdr.models.coupling`): its
value and its gradient on Z by explicit formulas, for a MAP step that runs neither a Pyro trace
nor autograd (:class:`probdr.infer.map.MAPFit`).

The model offers it as ``graph_coupling_model.fused_step``: called with the model's arguments
(and the current Z), it returns a step function, or ``None`` where the configuration has no
fused form -- then the driver runs the Pyro program. Covered: a flat prior on Z, a fixed kernel
(no learned numbers), no latent edge prior, and

* negative sampling of the B law (UMAP, LargeVis): the same epoch's edges and the same uniform
  negatives, drawn from the same stream in the same order as the model's
  ``_negative_sampling_likelihood``, at weights ``weight`` and ``negative_weight * weight``,
  umap-learn's per-pair gradient clip;
* the E law (t-SNE) with its exact normaliser (in blocks of rows) or its FFT-interpolated one
  (2-D, Student kernels): the attraction over the observed edges and
  :math:`W_{++} \log \sum_{i \ne j} k_{ij}`;

each with the early-exaggeration factor :math:`(\alpha - 1) \sum W_{X,ij} \log k_{ij}` and the
coupling weight. The optimiser's heuristics (the clip, the epoch's steps) are read from the same
Pyro effects as in the model, answered by the driver's handlers.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from probdr._compute.allpairs import cauchy_pairs_value_and_grad
from probdr._compute.edges import epoch_edges
from probdr._compute.fft import kernel_log_total_value_and_grad
from probdr._compute.fused import (
    bernoulli_pairs_value_and_grad,
    edge_sum_value_and_grad,
    log_total_value_and_grad,
)
from probdr.laws.edge_lists import edge_terms, folded_edges, graph_total, sum_lgamma1
from probdr.laws.graph import BinaryGraph, GraphPrior, NEdgeGraph
from probdr.laws.weights import KernelWeights

__all__ = ["coupling_fused_step"]

#: the most points whose exact t-SNE step sums attraction and normaliser in one dense n x n pass
#: (:class:`_DensePairs`; above, the edge list and the normaliser in their own passes)
DENSE_PAIRS_MAX_N = 1500

#: a step: ``step(Z, loss_scale, value) -> (loss or None, gradient of loss_scale * loss on Z)``
FusedStep = Callable[[torch.Tensor, float, bool], tuple]


def coupling_fused_step(Z: torch.Tensor, *, W_X, prior_z, kernel, n_components=None,
                        z_prior=None, exaggeration: float = 1.0, repulsion: str = "exact",
                        negative_samples: int = 5, negative_weight: float = 1.0,
                        coupling_weight: float = 1.0) -> FusedStep | None:
    """The fused step of :func:`~probdr.models.coupling.graph_coupling_model` at these
    arguments, or ``None`` where it has none (module docstring). ``Z``: the fit's current value
    (its dtype and device)."""
    kind = _plain_law(prior_z)
    if (z_prior is not None or kind is None or prior_z.edge_prior is not None
            or kernel.sites() or kernel.learnable()):
        return None
    if not isinstance(W_X, torch.Tensor) or W_X.dim() != 2:  # a batch of graphs
        return None
    weights = KernelWeights(Z.detach(), kernel)  # the pair clip: the driver's, as in the model
    clip, cw, ex = weights.pair_grad_clip, float(coupling_weight), float(exaggeration)
    if repulsion == "negative_sampling" and kind == "B":
        return _negative_sampling_step(weights, W_X, int(negative_samples),
                                       float(negative_weight), cw, ex, clip)
    if kind == "E" and (repulsion == "exact" or (
            repulsion == "fft" and kernel.has_fft and Z.shape[-1] == 2)):
        return _e_law_step(W_X, kernel, cw, ex, clip, repulsion)
    return None


def _plain_law(prior_z):
    """The latent law's kind, "B" or "E", when ``prior_z`` gives the B or E law of
    :mod:`probdr.laws.graph` itself (not a subclass's own posterior or law); else ``None``."""
    law = getattr(prior_z, "law", None)
    if law not in (BinaryGraph, NEdgeGraph) or type(prior_z).posterior is not GraphPrior.posterior:
        return None
    return law.prior


def _attraction_edges(W_X):
    """The attraction's edge list, as :meth:`~probdr.laws.graph.GraphLaw.attraction` takes it
    for kernel weights without an edge prior: the folded pairs of a sparse graph, else its
    off-diagonal entries."""
    if W_X.is_sparse:
        return folded_edges(W_X)
    r, c, v = edge_terms(W_X)
    keep = r != c
    return r[keep], c[keep], v[keep]


def _negative_sampling_step(weights: KernelWeights, W_X, m: int, gamma: float, cw: float,
                            ex: float, clip) -> FusedStep:
    r"""The negative-sampling likelihood's step: :math:`-\,c\,[w \sum_e \log \sigma(\log k_e)
    + \gamma w \sum_k \log \sigma(-\log k_k)]` (coupling weight :math:`c`, the epoch's weight
    :math:`w`), and the exaggeration factor's :math:`-c(\alpha - 1) \sum W \log k`."""
    rows0, cols0, v, vmax = weights.observed_edges(W_X)
    n = weights.n
    att = _attraction_edges(W_X) if ex != 1.0 else None

    def step(Z, loss_scale: float, value: bool = True):
        gen = weights.generator  # the fit's stream at this step
        rows, cols, neg_rows, mask, neg_mask, w = epoch_edges(v, vmax, rows0, cols0, n, m, gen)
        if mask is not None or neg_mask is not None:  # pragma: no cover - sync-free mode
            raise RuntimeError("the fused step does not run in sync-free mode.")
        neg_cols = _shifted(neg_rows, torch.randint(1, n, (neg_rows.numel(),),
                                                    device=rows.device, generator=gen), n)
        g = torch.full((), loss_scale, dtype=Z.dtype, device=Z.device).neg()  # d obj / d elbo
        # the sites' scales as Pyro composes them: the weight, the plate (size / size), then c
        s_pos = cw * (w * rows.numel() / rows.numel())
        s_neg = cw * ((gamma * w) * neg_rows.numel() / neg_rows.numel())
        lp_e, grad = bernoulli_pairs_value_and_grad(Z, rows, cols, 1.0, weights.kernel, clip,
                                                    s_pos, g, value)
        lp_n, grad_n = bernoulli_pairs_value_and_grad(Z, neg_rows, neg_cols, 0.0,
                                                      weights.kernel, clip, s_neg, g, value)
        grad = grad.add_(grad_n)
        loss = None
        if value:
            loss = lp_e + lp_n
        if att is not None:
            a, grad_a = edge_sum_value_and_grad(Z, *att, weights.kernel, clip,
                                                g * cw * (ex - 1.0), value)
            grad = grad + grad_a
            if value:
                loss = loss + (a * (ex - 1.0)) * cw
        return (None if loss is None else loss.neg()), grad

    return step


def _shifted(rows: torch.Tensor, shift: torch.Tensor, n: int) -> torch.Tensor:
    """``(rows + shift) % n`` for rows in ``[0, n)`` and shifts in ``[1, n)`` (the model's
    negatives): the sum is below ``2n``, so one conditional subtraction, written with a sign
    mask (the same integers, without the division of ``%``); ``shift`` is overwritten."""
    t = shift.add_(rows).sub_(n)
    return t.add_(t.bitwise_right_shift(63).bitwise_and_(n))


class _DensePairs:
    """The attraction's weights as a dense symmetric (n, n) matrix :math:`W + W^\\top` (zero
    diagonal), for :func:`probdr._compute.allpairs.cauchy_pairs_value_and_grad`, and its last
    multiple by the attraction's factor (one per phase of the schedule)."""

    def __init__(self, att, n: int):
        self.att, self.n, self.factor, self.V = att, n, None, None

    def scaled(self, factor: float, Z: torch.Tensor) -> torch.Tensor:
        if factor != self.factor or self.V.dtype != Z.dtype:
            rows, cols, v = (t.to(Z.device) for t in self.att)
            r, c = rows.to(torch.int64), cols.to(torch.int64)
            V = Z.new_zeros((self.n, self.n))
            v = v.to(Z.dtype) * factor
            V.index_put_((r, c), v, accumulate=True).index_put_((c, r), v, accumulate=True)
            self.factor, self.V = factor, V
        return self.V


def _e_law_step(W_X, kernel, cw: float, ex: float, clip, repulsion: str) -> FusedStep:
    r"""The E law's step: :math:`-\,c\,[\alpha \sum W \log k - W_{++} \log \sum_{i \ne j}
    k_{ij} + \log n! - \sum \log W_{ij}!]` (coupling weight :math:`c`, exaggeration
    :math:`\alpha`), the normaliser summed exactly (``"exact"``, in blocks of rows) or
    interpolated on a grid (``"fft"``, 2-D). The scalars of the gradient are formed as autograd
    forms them from the Pyro path's loss, whose dtype is float64 (the constant's)."""
    log_total_of = log_total_value_and_grad if repulsion == "exact" else \
        kernel_log_total_value_and_grad
    att = _attraction_edges(W_X)
    total = graph_total(W_X)
    const = math.lgamma(W_X.shape[0] + 1) - sum_lgamma1(edge_terms(W_X)[2])
    pairs = _DensePairs(att, W_X.shape[0]) if (
        repulsion == "exact" and kernel.is_cauchy and clip is None
        and W_X.shape[0] <= DENSE_PAIRS_MAX_N) else None

    def step(Z, loss_scale: float, value: bool = True):
        g = torch.full((), loss_scale, dtype=const.dtype, device=Z.device).neg()  # d / d elbo
        g_lp = (g * cw if cw != 1.0 else g).to(Z.dtype)  # d obj / d log p(W_Z), its terms
        g_att = g_lp
        if ex != 1.0:  # the factor's share of the attraction
            gf = g.to(Z.dtype)
            g_att = g_lp + (gf * cw if cw != 1.0 else gf) * (ex - 1.0)
        if pairs is not None:  # attraction and normaliser in one n x n pass
            log_total, a, grad = cauchy_pairs_value_and_grad(
                Z, pairs.scaled(float(g_att), Z), float(g_lp.neg() * total),
                att if value else None)
        else:
            a, grad = edge_sum_value_and_grad(Z, *att, kernel, clip, g_att, value)
            log_total, grad_n = log_total_of(Z, kernel, g_lp.neg() * total)
            grad = grad + grad_n
        if not value:
            return None, grad
        lp = a - total * log_total + const
        elbo = lp * cw if cw != 1.0 else lp
        if ex != 1.0:
            fac = (ex - 1.0) * a
            elbo = elbo + (fac * cw if cw != 1.0 else fac)
        return elbo.neg(), grad

    return step
