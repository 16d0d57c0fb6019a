r"""The semi-relaxed Gromov--Wasserstein energy of DistR and its gradient (Van Assel et al.,
*Distributional Reduction*, 2024): :math:`E_L(\mathbf C, \bar{\mathbf C}, \mathbf T)` and
:math:`\nabla_{\mathbf T} E_L` in :math:`O(N^2 n + N n^2)`, never the 4-tensor."""

from __future__ import annotations

import torch

__all__ = ["srgw_objective", "srgw_gradient"]


def gw_f1(C: torch.Tensor, loss: str) -> torch.Tensor:
    if loss == "square":
        return C * C
    return torch.special.xlogy(C, C) - C


def srgw_objective(C: torch.Tensor, Cbar: torch.Tensor, T: torch.Tensor, loss: str = "square"
                   ) -> torch.Tensor:
    r""":math:`E_L(\mathbf C, \bar{\mathbf C}, \mathbf T) = \sum_{ijkl}L(C_{ij},\bar C_{kl})
    T_{ik}T_{jl}` by the decomposition :math:`\langle f_1(\mathbf C),\mathbf h\mathbf h^\top\rangle
    + \langle f_2(\bar{\mathbf C}),\mathbf q\mathbf q^\top\rangle - \langle\mathbf T^\top h_1(\mathbf
    C)\mathbf T, h_2(\bar{\mathbf C})\rangle` in :math:`O(N^2n + Nn^2)` (never the 4-tensor).
    ``loss``: ``"square"`` :math:`(a-b)^2` or ``"kl"`` :math:`a\log(a/b) - a + b`."""
    h, q = T.sum(1), T.sum(0)
    A = T.T @ C @ T
    const = (gw_f1(C, loss) * h[:, None] * h[None, :]).sum()
    if loss == "square":
        return const + (Cbar * Cbar * q[:, None] * q[None, :]).sum() - 2.0 * (A * Cbar).sum()
    if loss == "kl":
        return const + (Cbar * q[:, None] * q[None, :]).sum() - (A * torch.log(Cbar)).sum()
    raise ValueError(f"loss must be 'square' or 'kl', got {loss!r}.")


def srgw_gradient(C: torch.Tensor, Cbar: torch.Tensor, T: torch.Tensor, loss: str = "square"
                  ) -> torch.Tensor:
    r""":math:`\nabla_{\mathbf T}F` for symmetric :math:`\mathbf C, \bar{\mathbf C}` (thesis eq.
    (8.78)): :math:`2(\mathbf 1_N\mathbf 1_N^\top\mathbf T f_2(\bar{\mathbf C}) -
    h_1(\mathbf C)\mathbf T h_2(\bar{\mathbf C})^\top)`."""
    N = C.shape[0]
    if loss == "square":
        f2, h2 = Cbar * Cbar, 2.0 * Cbar
    elif loss == "kl":
        f2, h2 = Cbar, torch.log(Cbar)
    else:
        raise ValueError(f"loss must be 'square' or 'kl', got {loss!r}.")
    q = T.sum(0)
    F1 = torch.ones(N, 1, dtype=T.dtype) @ (q[None, :] @ f2)
    return 2.0 * (F1 - C @ T @ h2.T)

