r"""Entropic affinities (EA) on a dense cost matrix, and the one entropic bisection of probdr.

Van Assel (2024, PhD thesis, ch. 4). :math:`P^e_{ij} = \exp(-C_{ij}/\varepsilon_i) /
\sum_\ell \exp(-C_{i\ell}/\varepsilon_i)` with :math:`\varepsilon_i` set so that row :math:`i` has
perplexity :math:`\xi`. :func:`bisect_log_beta` is the bandwidth search shared by the dense EA
here and by the neighbour-list affinities of :mod:`probdr.input.affinities`. The entropy has the
thesis' "+1" convention, :math:`H(\mathbf p) = -\sum_j p_j(\log p_j - 1)`, see :mod:`probdr.ot.sea`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from .._utils import as_output
from .costs import as_tensor_2d, check_cost, sq_euclidean_cost

__all__ = ["entropic_affinity_matrix", "row_entropy", "row_perplexity", "bisect_log_beta",
           "SEAConvergenceWarning"]

#: rows per block where the dual ascent and the EA bisection work row by row (a block's
#: temporaries stay in cache instead of several n x n float64 passes through memory)
SEA_BLOCK = 128


def bisect_log_beta(entropy_at, n: int, target: float, bound: float, max_iter: int,
                    tol_interval: float, tol_entropy: float | None = None) -> torch.Tensor:
    r"""Vectorised bisection on :math:`t_i = \log(\beta_i s_i)` (precision times the row's cost
    scale) so that ``entropy_at(t)`` (an ``(n, 1)`` tensor, decreasing in t) equals ``target``.

    Starts from :math:`[-\text{bound}, \text{bound}]`; stops when every bracket is narrower than
    ``tol_interval`` or, if given, every entropy is within ``tol_entropy`` of the target. Rows whose
    target cannot be reached end at the nearest end of the bracket. Returns t, ``(n, 1)``."""
    lo = torch.full((n, 1), -bound, dtype=torch.float64)
    hi = torch.full((n, 1), bound, dtype=torch.float64)
    for _ in range(max_iter):
        mid = 0.5 * (lo + hi)
        H = entropy_at(mid)
        flat = H > target  # entropy too high: increase beta
        lo = torch.where(flat, mid, lo)
        hi = torch.where(flat, hi, mid)
        if tol_entropy is not None and (H - target).abs().max() < tol_entropy:
            break
        if (hi - lo).max() < tol_interval:
            break
    return 0.5 * (lo + hi)


class SEAConvergenceWarning(UserWarning):
    """The SEA dual ascent or the Sinkhorn iterations stopped before meeting ``tol``."""


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def input_cost(X: Any, precomputed: bool) -> torch.Tensor:
    if precomputed:
        return check_cost(X, name="C")
    return sq_euclidean_cost(as_tensor_2d(X))


def row_entropy(log_P: torch.Tensor) -> torch.Tensor:
    r"""Row entropies with the "+1" convention, :math:`H_i = -\sum_j P_{ij}(\log P_{ij} - 1)`,
    from log-affinities (``-inf`` entries contribute 0)."""
    P = torch.exp(log_P)
    t = torch.where(torch.isfinite(log_P), P * (log_P - 1.0), torch.zeros_like(P))
    return -t.sum(-1)


def row_perplexity(P: Any, log: bool = False) -> torch.Tensor:
    r"""Per-point perplexity :math:`e^{H(\mathbf P_{i:}) - 1}` (thesis' definition; equals the
    Shannon perplexity for stochastic rows). ``log=True`` if ``P`` holds log-affinities."""
    Pt = torch.as_tensor(np.asarray(P) if not isinstance(P, torch.Tensor) else P,
                         dtype=torch.float64)
    log_P = Pt if log else torch.log(Pt)
    return torch.exp(row_entropy(log_P) - 1.0)


def check_perplexity(perplexity: float, n: int, exclude_self: bool) -> float:
    hi = n - 2 if exclude_self else n - 1
    if not isinstance(perplexity, (int, float, np.integer, np.floating)) or isinstance(
            perplexity, bool):
        raise TypeError(f"perplexity must be a number, got {type(perplexity).__name__}.")
    if not (1.0 < float(perplexity) <= hi):
        what = "n - 2 (self excluded)" if exclude_self else "n - 1"
        raise ValueError(
            f"perplexity must lie in (1, {what}] = (1, {hi}] for n={n} samples, got "
            f"{perplexity}.")
    return float(perplexity)


# --------------------------------------------------------------------------------------------
# entropic affinities (EA)
# --------------------------------------------------------------------------------------------
def ea_log(C: torch.Tensor, perplexity: float, exclude_self: bool, tol: float = 1e-10,
           max_iter: int = 200) -> tuple[torch.Tensor, torch.Tensor]:
    """Log EA and the bandwidths, by vectorised bisection on log(beta) (float64)."""
    n = C.shape[0]
    Cm = C.clone()
    if exclude_self:
        Cm.fill_diagonal_(float("inf"))
    finite = torch.isfinite(Cm)
    rowmin = torch.where(finite, Cm, torch.full_like(Cm, float("inf"))).min(1).values
    Cs = Cm - rowmin[:, None]
    rowmax = torch.where(finite, Cs, torch.zeros_like(Cs)).max(1).values
    scale = torch.where(rowmax > 0, rowmax, torch.ones_like(rowmax))
    Cs = Cs / scale[:, None]
    target = math.log(perplexity)  # Shannon entropy of a normalised row

    def logp_at(t, rows=slice(None)):
        logits = -torch.exp(t[rows]) * Cs[rows]
        return logits - torch.logsumexp(logits, 1, keepdim=True)

    def entropy_at(t):
        # row by row, so in blocks of rows (cache-sized temporaries, same numbers)
        return torch.cat([row_entropy(logp_at(t, slice(a, a + SEA_BLOCK)))
                          for a in range(0, n, SEA_BLOCK)])

    t = bisect_log_beta(lambda t: entropy_at(t)[:, None] - 1.0, n, target, 60.0, max_iter,
                        tol_interval=1e-13, tol_entropy=tol)
    lp = logp_at(t)
    eps = (scale[:, None] / torch.exp(t)).squeeze(1)
    return lp, eps


def entropic_affinity_matrix(
    X: Any,
    perplexity: float = 30.0,
    *,
    precomputed: bool = False,
    exclude_self: bool = False,
    return_log: bool = False,
) -> Any:
    r"""Dense entropic affinity :math:`\mathbf P^e` (thesis eq. (EA)), row-stochastic.

    Parameters
    ----------
    X : array (n, p), or (n, n) cost if ``precomputed``
    perplexity : float
        :math:`\xi`, in :math:`(1, n-1]` (:math:`(1, n-2]` with ``exclude_self``).
    precomputed : bool
        ``X`` is a symmetric cost matrix with zero diagonal.
    exclude_self : bool
        Force :math:`P_{ii} = 0`. The thesis keeps the self-loop (default).
    return_log : bool
        Return :math:`\log\mathbf P^e` instead (``-inf`` on an excluded diagonal).

    Returns
    -------
    P : (n, n) array (numpy in, numpy out; torch in, torch out)
    """
    C = input_cost(X, precomputed)
    check_perplexity(perplexity, C.shape[0], exclude_self)
    lp, _ = ea_log(C, float(perplexity), exclude_self)
    return as_output(lp if return_log else torch.exp(lp), X)


# --------------------------------------------------------------------------------------------
# symmetric entropic affinities (SEA)
# --------------------------------------------------------------------------------------------
