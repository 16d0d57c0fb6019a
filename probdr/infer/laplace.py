r"""The cheap posterior: a Laplace approximation from each point's 2x2 curvature at the MAP.

Each point gets :math:`z_i \sim \mathcal N(\hat z_i, c\,\Lambda_i^{-1})`, independently, with
:math:`\Lambda_i` its block of the Hessian of the negative log posterior at the MAP
(:func:`probdr.laws.curvature.point_precisions`: the conditional posterior of the point with the
others held at the MAP) and :math:`c` a variance inflation (the estimators measure, for each
fit, the factor that makes the credible regions cover their share of a simulated truth:
:mod:`probdr.infer.calibrate`). :func:`probdr.infer.posterior.fit_posterior` with ``method="laplace"`` runs
it for a model that declares ``point_precisions``.
"""

from __future__ import annotations

import math

import torch

from ..laws.curvature import EXACT_MAX_N, FIELD_FROM, LAWS, check_laplace, point_precisions

__all__ = ["laplace_draws", "point_precisions", "check_laplace", "LAWS", "FIELD_FROM",
           "EXACT_MAX_N"]


def laplace_draws(Z: torch.Tensor, precisions: torch.Tensor, num_samples: int, *,
                  inflation: float = 1.0,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    r"""``num_samples`` draws (S, n, q) of :math:`z_i \sim \mathcal N(\hat z_i,
    \text{inflation}\cdot\Lambda_i^{-1})`, independent across points."""
    if not (math.isfinite(inflation) and inflation > 0):
        raise ValueError(f"inflation must be a positive number, got {inflation!r}.")
    L = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(precisions)))
    Z = Z.detach().to(precisions.dtype)
    eps = torch.randn((num_samples, *Z.shape), dtype=Z.dtype, device=Z.device,
                      generator=generator)
    return Z + math.sqrt(inflation) * torch.einsum("nab,snb->sna", L, eps)
