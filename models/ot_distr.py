r"""Distributional Reduction (DistR) as an energy-based Pyro model (Van Assel et al., 2024;
thesis ch. 5).

Prototypes :math:`\mathbf Z \in \mathbb R^{n\times d}` (flat prior) are tied to the data through
a fixed soft assignment :math:`\mathbf T \in \mathcal U_n(\mathbf h_X)` by the semi-relaxed GW
energy

.. math::
    E_L(\mathbf C_X, \mathbf C_Z(\mathbf Z), \mathbf T) = \sum_{ijkl} L([\mathbf C_X]_{ij},
    [\mathbf C_Z]_{kl})\,T_{ik}T_{jl}
    = \langle f_1(\mathbf C_X), \mathbf h\mathbf h^\top\rangle
    + \langle f_2(\mathbf C_Z), \mathbf q\mathbf q^\top\rangle
    - \langle \mathbf A, h_2(\mathbf C_Z)\rangle,

with :math:`\mathbf q = \mathbf T^\top\mathbf 1_N` (prototype weights) and
:math:`\mathbf A = \mathbf T^\top h_1(\mathbf C_X)\mathbf T` (cached while T is fixed). Losses
(Peyré's decomposition, thesis eq. (8.76)):

* ``"square"``: :math:`L = (a-b)^2`, :math:`f_2(b) = b^2`, :math:`h_2(b) = 2b`;
* ``"kl"``: generalised KL :math:`a\log(a/b) - a + b`, :math:`f_2(b) = b`,
  :math:`h_2(b) = \log b` (a proper divergence: the bare cross-entropy would let srGW collapse
  onto one prototype, thesis App. 8.2.1).

The prototype affinity :math:`\mathbf C_Z` is a Student or Gaussian kernel rescaled to mean 1
over prototype pairs, :math:`\mathbf C_Z = n^2\mathbf K_Z/\sum_{kl}K_{Z,kl}` (the input affinity
is scaled to mean 1 under :math:`\mathbf h_X\mathbf h_X^\top`, so both sides carry the same mass
when prototypes are used evenly), or the Gram matrix :math:`\mathbf Z\mathbf Z^\top`.
"""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

__all__ = ["log_prototype_affinity", "prototype_affinity", "srgw_energy", "distr_model"]


def _sq_dists(Z: torch.Tensor) -> torch.Tensor:
    diff = Z[:, None, :] - Z[None, :, :]
    return (diff * diff).sum(-1)


def log_prototype_affinity(Z: torch.Tensor, kind: str) -> torch.Tensor:
    r""":math:`\log\mathbf C_Z(\mathbf Z)` for the normalised kernels (``"student"``,
    ``"gaussian"``): :math:`\log K_{kl} - \mathrm{LSE}(\log\mathbf K) + 2\log n`."""
    n = Z.shape[0]
    d2 = _sq_dists(Z)
    if kind == "student":
        logK = -torch.log1p(d2)
    elif kind == "gaussian":
        logK = -d2
    else:
        raise ValueError(f"no log-affinity for kind {kind!r}.")
    return logK - torch.logsumexp(logK.flatten(), 0) + 2.0 * math.log(n)


def prototype_affinity(Z: torch.Tensor, kind: str) -> torch.Tensor:
    """:math:`\\mathbf C_Z(\\mathbf Z)`: normalised Student / Gaussian kernel, or Gram matrix."""
    if kind == "gram":
        return Z @ Z.T
    return torch.exp(log_prototype_affinity(Z, kind))


def srgw_energy(Z: torch.Tensor, A: torch.Tensor, q: torch.Tensor, kind: str, loss: str,
                const: float = 0.0) -> torch.Tensor:
    r""":math:`E_L(\mathbf C_X, \mathbf C_Z(\mathbf Z), \mathbf T)` from the cached
    :math:`\mathbf A = \mathbf T^\top\mathbf C_X\mathbf T` and :math:`\mathbf q`; ``const`` is
    :math:`\langle f_1(\mathbf C_X), \mathbf h\mathbf h^\top\rangle`."""
    qq = q[:, None] * q[None, :]
    if loss == "square":
        C = prototype_affinity(Z, kind)
        return const + (C * C * qq).sum() - 2.0 * (A * C).sum()
    if loss == "kl":
        if kind == "gram":
            raise ValueError("the KL loss needs a positive prototype affinity (not 'gram').")
        logC = log_prototype_affinity(Z, kind)
        return const + (torch.exp(logC) * qq).sum() - (A * logC).sum()
    raise ValueError(f"loss must be 'square' or 'kl', got {loss!r}.")


def distr_model(A: torch.Tensor, q: torch.Tensor, n_components: int, kind: str, loss: str,
                const: float = 0.0) -> torch.Tensor:
    """Pyro model of the DistR Z-step: flat prior on the prototypes, factor ``-E_L``."""
    n = q.shape[0]
    Z = pyro.sample("Z", dist.ImproperUniform(constraints.real, (), (n, n_components)))
    pyro.factor("distr", -srgw_energy(Z, A, q, kind, loss, const))
    return Z
