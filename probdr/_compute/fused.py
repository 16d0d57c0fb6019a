r"""The formulas of the fused MAP step: the terms of a graph coupling's log-likelihood and their
gradients on Z, computed directly, without a Pyro trace or autograd
(:meth:`probdr.infer.map.MAPFit`, the models' ``fused_step``).

Each function returns a term's value (``None`` unless asked) and ``g`` times its gradient on Z,
``g`` the derivative of the optimised objective with respect to the term. The passes are those
of the autograd Functions that the Pyro path runs (:mod:`probdr._compute.edges`,
:mod:`probdr._compute.allpairs`), called here as plain functions: the same gathers, kernel
derivatives, per-pair clips and scatters, so the two paths agree to rounding.

* :func:`edge_sum_value_and_grad`: :math:`\sum_e v_e \log k(\|z_{r_e} - z_{c_e}\|^2)`, the
  attraction of the exact laws (and of early exaggeration);
* :func:`bernoulli_pairs_value_and_grad`: :math:`s \sum_e \log \mathcal B(y_e;\,
  \sigma(\log k_e))`, the sampled edges (:math:`y = 1`) and negatives (:math:`y = 0`) of
  negative sampling, whose gradient on the logit is :math:`s\,(y_e - \sigma(\log k_e))`;
* :func:`log_total_value_and_grad`: the E law's log-normaliser
  :math:`\log \sum_{i \ne j} k(\|z_i - z_j\|^2)` (:mod:`probdr._compute.allpairs`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._utils import one_thread
from . import edge_layout
from .allpairs import log_total_value_and_grad
from .edges import (
    all_positive,
    edge_diffs,
    edge_sum_grad,
    edge_value,
    edges_value_and_grad,
    pair_grad,
)

__all__ = ["edge_sum_value_and_grad", "bernoulli_pairs_value_and_grad",
           "log_total_value_and_grad"]


class _EdgeTerms:
    """The settings that the edge sums' passes read (an autograd context's, there)."""

    learn = False

    def __init__(self, kernel, clip, n: int, positive: bool):
        self.kernel, self.clip, self.n, self.positive = kernel, clip, n, positive


def edge_sum_value_and_grad(Z: torch.Tensor, rows, cols, v, kernel, clip, g: torch.Tensor,
                            value: bool = True):
    r""":math:`S = \sum_e v_e \log k(\|z_{r_e} - z_{c_e}\|^2)` (terms with :math:`v_e \le 0`
    dropped; ``None`` unless ``value``) and :math:`g\,\nabla_Z S`, each pair's contribution
    clamped per coordinate at ``clip`` (umap-learn's clip, applied to :math:`g` times it), as
    :func:`probdr._compute.edges.edge_log_kernel_sum` and its backward compute them."""
    terms = _EdgeTerms(kernel, clip, Z.shape[0], all_positive(v))
    vv = v.to(Z.dtype)
    if clip is None:  # the gradient is linear in g: computed at g = 1, then scaled
        fused = None
        if edge_layout.use_for(Z, rows.shape[0], kernel):
            fused = edge_layout.value_and_grad(Z, rows, cols, v, kernel, value)
        out, grad = fused if fused is not None else \
            edges_value_and_grad(Z, rows, cols, vv, terms, value)[:2]
        return (out if value else None), grad * g.to(grad.dtype)
    diff, d2 = edge_diffs(Z, rows, cols)
    out = edge_value(kernel, d2, vv, terms.positive) if value else None
    return out, edge_sum_grad(diff, d2, vv, rows, cols, terms, 2.0 * g.to(d2.dtype), False)


def bernoulli_pairs_value_and_grad(Z: torch.Tensor, rows, cols, y, kernel, clip,
                                   scale: float, g: torch.Tensor, value: bool = True):
    r""":math:`L = \sum_e \ell_e\, s` with :math:`\ell_e = \log \mathcal B(y_e;\,
    \sigma(\log k(d^2_e)))` the Bernoulli log-likelihood of the pair's observation ``y`` (1: a
    sampled edge, 0: a negative sample; a tensor, or one number for every pair) and
    ``s = scale`` its weight (``None`` unless ``value``), and the gradient on Z of
    :math:`g \sum_e s\,\ell_e`: on the logit :math:`g s (y_e - \sigma(\log k_e))`, times
    :math:`2\,\partial_{d^2} \log k\,(z_r - z_c)` per pair, clamped per coordinate at ``clip``
    (umap-learn's clip), as the Pyro path's :class:`~probdr.laws.graph.EdgeBernoulli` and
    :func:`~probdr._compute.edges.edge_log_kernel` compute them.

    With one number ``y`` (0 or 1), the numbers of a tensor of it, fewer passes: the
    log-likelihood is torch's ``-binary_cross_entropy_with_logits`` written out (``log_sigmoid``,
    minus the logit where ``y = 0``), and :math:`y - \sigma` subtracts the number (none for 0)."""
    diff, d2 = edge_diffs(Z, rows, cols)
    logits, dlogk = kernel.log_k_and_dlog_k(d2)
    label = None if isinstance(y, torch.Tensor) else float(y)
    if label not in (None, 0.0, 1.0):
        raise ValueError(f"y must be a tensor, 0 or 1, got {y!r}.")
    out = None
    if value:
        if label is None:
            lp = -F.binary_cross_entropy_with_logits(logits, y, reduction="none")
        else:
            lp = F.logsigmoid(logits) if label == 1.0 else F.logsigmoid(logits).sub_(logits)
        out = lp.mul_(scale).sum()
    with one_thread():  # the sigmoid's last bits would follow the thread count
        s = torch.sigmoid(logits)
    if label is None:
        s.sub_(y)
    elif label != 0.0:
        s.sub_(label)
    # the factor 2 folded into the number (a power of 2 scales exactly, so the same numbers
    # away from the subnormal range), one pass fewer over the pairs
    coef = dlogk.mul_(s.mul_((g * scale).neg().mul_(2.0)))
    return out, pair_grad(diff, coef, rows, cols, Z.shape[0], clip, own=True)
