r"""GW-MDS as an energy-based Pyro model (Eufrazio, Montesuma & Cavalcante, [G] Algorithm 1).

The embedding :math:`Y \in \mathbb R^{n\times d}` carries a flat (improper) prior and the
Gromov-Wasserstein energy of a *fixed* transport plan :math:`\pi` enters as a factor:

.. math::
    Y \sim \text{flat},\qquad
    \log p(Y \mid \pi) = -E_{L_2}(\mathbf C_X, \mathbf C_Y(Y), \pi) + \text{const},\qquad
    E_{L_2} = \sum_{ijkl} (C_{X,ij} - \|y_k - y_l\|)^2\, \pi_{ik}\pi_{jl}.

The energy is evaluated with Peyré's decomposition in :math:`O(n^3)` (never the :math:`n^4`
tensor): with :math:`\mathbf p = \pi\mathbf 1`, :math:`\mathbf q = \pi^\top\mathbf 1`,

.. math::
    E = \langle \mathbf C_X^{\odot 2}, \mathbf p\mathbf p^\top\rangle
      + \langle \mathbf C_Y^{\odot 2}, \mathbf q\mathbf q^\top\rangle
      - 2\langle \pi^\top \mathbf C_X \pi, \mathbf C_Y\rangle.

MAP over Y with :math:`\pi` held fixed is [G]'s step 6 (the plan is the envelope-theorem
minimiser, so :math:`\nabla_Y E` at fixed :math:`\pi` is the gradient of the GW value).
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

__all__ = ["euclidean_distances", "gw_energy", "gwmds_model"]


class _EuclideanDistances(torch.autograd.Function):
    """D_ij = ||y_i - y_j|| with the hand-written gradient sum_l (M + M^T)_kl (y_k - y_l),
    M = dL/dD / D (0 on the diagonal and for coincident points): O(n^2 d), no (n, n, d) tensor."""

    @staticmethod
    def forward(ctx, Y):
        Yc = Y - Y.mean(0, keepdim=True)
        sq = (Yc * Yc).sum(1)
        d2 = torch.addmm(sq[:, None] + sq[None, :], Yc, Yc.T, alpha=-2.0).clamp_min_(0.0)
        d2.fill_diagonal_(0.0)
        D = torch.sqrt(d2)
        ctx.save_for_backward(Y, D)
        return D

    @staticmethod
    def backward(ctx, g):
        Y, D = ctx.saved_tensors
        M = torch.where(D > 0, g / torch.where(D > 0, D, torch.ones_like(D)), torch.zeros_like(D))
        S = M + M.T
        return S.sum(1, keepdim=True) * Y - S @ Y


def euclidean_distances(Y: torch.Tensor) -> torch.Tensor:
    """Pairwise Euclidean distances (zero diagonal; gradient 0 at coincident points)."""
    return _EuclideanDistances.apply(Y)


def gw_energy(C_X: torch.Tensor, C_Y: torch.Tensor, plan: torch.Tensor,
              A: torch.Tensor | None = None) -> torch.Tensor:
    r"""Square-loss GW energy :math:`E_{L_2}(\mathbf C_X, \mathbf C_Y, \pi)` (decomposition above).

    ``A`` may hold the cached :math:`\pi^\top\mathbf C_X\pi` (it does not depend on Y)."""
    p = plan.sum(1)
    q = plan.sum(0)
    if A is None:
        A = plan.T @ C_X @ plan
    const = (C_X * C_X * p[:, None] * p[None, :]).sum()
    return const + (C_Y * C_Y * q[:, None] * q[None, :]).sum() - 2.0 * (A * C_Y).sum()


def gwmds_model(C_X: torch.Tensor, plan: torch.Tensor, n_components: int,
                A: torch.Tensor | None = None) -> torch.Tensor:
    """Pyro model: flat prior on Y, factor ``-E_{L2}(C_X, C_Y(Y), plan)``."""
    n = plan.shape[1]
    Y = pyro.sample("Y", dist.ImproperUniform(constraints.real, (), (n, n_components)))
    pyro.factor("gw", -gw_energy(C_X, euclidean_distances(Y), plan, A))
    return Y
