"""Small helpers shared by the optimal-transport modules (input handling, costs, metrics)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._compute.allpairs import pairwise_sq_distances
from .._utils import check_array

__all__ = ["as_tensor_2d", "sq_euclidean_cost", "check_cost", "upper_pairs",
           "pearson_distance_correlation", "stress"]


def as_tensor_2d(X: Any, name: str = "X", min_samples: int = 2) -> torch.Tensor:
    """Validated float64 ``(n, p)`` tensor (``ValueError`` on NaN, 1-D or empty input)."""
    return check_array(X, name=name, min_samples=min_samples, dtype=torch.float64)


def sq_euclidean_cost(X: torch.Tensor) -> torch.Tensor:
    r"""Squared Euclidean cost :math:`C_{ij} = \|x_i - x_j\|_2^2` (float64, exact zero diagonal).

    The data are centred first: the expansion :math:`|a|^2 + |b|^2 - 2\langle a, b\rangle` then
    loses less precision.
    """
    X64 = X.to(torch.float64)
    X64 = X64 - X64.mean(0, keepdim=True)
    C = pairwise_sq_distances(X64)
    C.fill_diagonal_(0.0)
    return 0.5 * (C + C.T)


def check_cost(C: Any, name: str = "C") -> torch.Tensor:
    """Validate a square, symmetric, finite, non-negative cost matrix with zero diagonal."""
    Ct = check_array(C, name=name, min_samples=2, dtype=torch.float64)
    n, m = Ct.shape
    if n != m:
        raise ValueError(f"{name} must be a square (n, n) cost matrix, got shape {(n, m)}.")
    if (Ct < 0).any():
        raise ValueError(f"{name} must be non-negative.")
    scale = float(Ct.abs().max().clamp_min(1e-300))
    if (Ct - Ct.T).abs().max() > 1e-10 * scale:
        raise ValueError(f"{name} must be symmetric.")
    if Ct.diagonal().abs().max() > 1e-12 * scale:
        raise ValueError(f"{name} must have a zero diagonal (C_ii = 0).")
    Ct = 0.5 * (Ct + Ct.T)
    Ct.fill_diagonal_(0.0)
    return Ct


def upper_pairs(D: Any) -> np.ndarray:
    """Entries of the strict upper triangle of a square, finite matrix (the pairs
    :math:`i < j`)."""
    D = check_array(D, name="D", min_samples=2, square=True).cpu().numpy()
    iu = np.triu_indices(D.shape[0], k=1)
    return D[iu]


def pearson_distance_correlation(D_X: Any, D_Y: Any) -> float:
    r"""Pearson correlation between two pairwise-distance matrices over the pairs :math:`i<j`
    ([G] eq. (7)); the zero diagonal is excluded (it would inflate the correlation)."""
    a, b = upper_pairs(D_X), upper_pairs(D_Y)
    if a.shape != b.shape:
        raise ValueError(f"distance matrices differ in size: {a.shape} vs {b.shape}.")
    a = a - a.mean()
    b = b - b.mean()
    den = np.sqrt((a * a).sum() * (b * b).sum())
    if den == 0:
        raise ValueError("a distance matrix is constant: the correlation is undefined.")
    return float((a * b).sum() / den)


def stress(D_X: Any, D_Y: Any) -> float:
    r"""Raw stress :math:`\sum_{i<j} (D_{X,ij} - D_{Y,ij})^2` ([G] eq. (1))."""
    a, b = upper_pairs(D_X), upper_pairs(D_Y)
    return float(((a - b) ** 2).sum())
