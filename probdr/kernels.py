r"""Kernels of squared distances, in log space.

A kernel maps a squared distance :math:`d^2 = \|z_i - z_j\|^2` to a positive similarity
:math:`k(d^2)`. Every kernel here returns :math:`\log k` (``log_k``) and the derivative
:math:`\partial \log k / \partial d^2` (``dlog_k``), which the exact all-pairs normalisers use for
their hand-written gradients.

=============  ==========================================  ===============================
name           :math:`k(d^2)`                               used by
=============  ==========================================  ===============================
``gaussian``   :math:`\exp(-d^2 / h)`                       SNE, symmetric SNE, input side
``student``    :math:`(1 + d^2/\nu)^{-(\nu+1)/2}`            t-SNE (:math:`\nu=1`), LargeVis
``umap``       :math:`1 / (1 + a d^{2b})`                   UMAP's curve as a kernel
``umap_odds``  :math:`1 / (a d^{2b})`                       UMAP preset: B-law edge prob = curve
=============  ==========================================  ===============================

``umap_odds`` is what makes the B-prior edge probability :math:`K/(1+K)` equal UMAP's curve
exactly; it is unbounded at :math:`d=0` (violates Theorem 1), so squared distances are
floored at ``d2_floor``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

__all__ = [
    "Kernel",
    "GaussianKernel",
    "StudentKernel",
    "UMAPKernel",
    "get_kernel",
    "find_ab_params",
]


class Kernel:
    """Base class: a symmetric kernel of squared distances, evaluated in log space."""

    name = "kernel"
    #: whether ``k`` decays polynomially (no underflow at large distances)
    heavy_tailed = True

    @property
    def tail_index(self) -> float:
        r""":math:`\tau` with :math:`k(d^2) \sim d^{-2\tau}` as :math:`d \to \infty` (``inf`` for
        kernels that decay faster than any power); it sets how heavy the tails of a point's
        posterior are (:func:`probdr.estimators.coupling_new_points.auto_coupling_weight`)."""
        return float("inf")

    @property
    def is_cauchy(self) -> bool:
        r"""Whether this is the Cauchy kernel :math:`1/(1 + d^2)` (the Student kernel with one
        degree of freedom, t-SNE's latent kernel), which the FFT normaliser and the fused
        Cauchy paths compute in closed form. False here; :class:`StudentKernel` says when."""
        return False

    def log_k(self, d2: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def dlog_k(self, d2: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def log_k_factored(self, d2: torch.Tensor) -> tuple[torch.Tensor, float]:
        r"""``(t, s)`` with :math:`\log k(d^2) = s\,t`, ``s`` a number: kernels whose log is a
        scaled function (Student: :math:`-\tfrac{\nu+1}{2}\log(1 + d^2/\nu)`) return the
        function and fold the constant into ``s``, one pass fewer over an edge list of millions
        (the edge sums scale the total instead)."""
        return self.log_k(d2), 1.0

    def weighted_dlog_k_(self, d2: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, float]:
        r"""``(t, s)`` with :math:`s\,t = w\,\partial \log k / \partial d^2`, ``s`` a number;
        free to overwrite ``d2``. Kernels with a closed form write it in two passes over an edge
        list (Student: :math:`t = w / (\nu + d^2)`, :math:`s = -\tfrac{\nu+1}{2}`)."""
        return self.dlog_k(d2).mul_(w), 1.0

    def k_and_dlog_k(self, d2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(k, dlog k / dd2)``; subclasses override with cheaper closed forms."""
        return torch.exp(self.log_k(d2)), self.dlog_k(d2)

    def __call__(self, d2: torch.Tensor) -> torch.Tensor:
        return self.log_k(d2)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class GaussianKernel(Kernel):
    r"""Gaussian kernel :math:`k(d^2) = \exp(-d^2 / h)` with bandwidth ``h``.

    ``h`` is a scalar, or a vector of per-point bandwidths :math:`h_i` (Remark 1 of the paper:
    :math:`K_{ij} = \exp(-\|x_i - x_j\|^2 / h_i)`), applied along the rows of a 2-D ``d2`` of
    shape (n, k) -- neighbour lists or a dense matrix. ``h = 1`` gives SNE's latent kernel
    :math:`\exp(-\|z_i - z_j\|^2)`; the entropic affinities use the per-point form.
    """

    name = "gaussian"
    heavy_tailed = False

    def __init__(self, bandwidth=1.0):
        h = torch.as_tensor(bandwidth, dtype=torch.float64)
        if h.ndim > 1 or not bool((h > 0).all()):
            raise ValueError("bandwidth must be a positive scalar or a 1-D vector of positive "
                             "per-point bandwidths.")
        self.bandwidth = float(h) if h.ndim == 0 else h

    def _h(self, d2):
        if isinstance(self.bandwidth, float):
            return self.bandwidth
        if d2.ndim != 2 or d2.shape[0] != self.bandwidth.shape[0]:
            raise ValueError(f"per-point bandwidths need d2 of shape ({self.bandwidth.shape[0]}, "
                             f"k), got {tuple(d2.shape)}.")
        return self.bandwidth.to(d2.dtype)[:, None]

    def log_k(self, d2):
        return -d2 / self._h(d2)

    def dlog_k(self, d2):
        return -torch.ones_like(d2) / self._h(d2)


class StudentKernel(Kernel):
    r"""Student-t kernel :math:`k(d^2) = (1 + d^2/\nu)^{-(\nu+1)/2}`; ``dof=1`` is Cauchy
    :math:`1/(1+d^2)`, t-SNE's latent kernel."""

    name = "student"

    @property
    def tail_index(self) -> float:
        return 0.5 * (self.dof + 1.0)

    @property
    def is_cauchy(self) -> bool:
        """True for ``dof == 1``: :math:`1/(1 + d^2)`."""
        return self.dof == 1.0

    def __init__(self, dof: float = 1.0):
        if not dof > 0:
            raise ValueError(f"dof must be positive, got {dof}.")
        self.dof = float(dof)

    def log_k(self, d2):
        if self.dof == 1.0:
            return -torch.log1p(d2)
        return -0.5 * (self.dof + 1.0) * torch.log1p(d2 / self.dof)

    def dlog_k(self, d2):
        return -0.5 * (self.dof + 1.0) / (self.dof + d2)

    def log_k_factored(self, d2):
        if self.dof == 1.0:
            return torch.log1p(d2), -1.0
        return torch.log1p(d2 / self.dof), -0.5 * (self.dof + 1.0)

    def weighted_dlog_k_(self, d2, w):
        return torch.div(w, d2.add_(self.dof), out=d2), -0.5 * (self.dof + 1.0)

    def k_and_dlog_k(self, d2):
        if self.dof == 1.0:
            k = (d2 + 1.0).reciprocal_()
            return k, -k
        return super().k_and_dlog_k(d2)


class UMAPKernel(Kernel):
    r"""UMAP's curve :math:`w(d) = 1/(1 + a d^{2b})`, or its odds :math:`w/(1-w) = 1/(a d^{2b})`.

    Parameters
    ----------
    a, b : float
        Curve parameters; see :func:`find_ab_params` to fit them from ``min_dist`` and ``spread``.
    odds : bool
        If True, return the odds kernel :math:`1/(a d^{2b})`, so that a B-prior (Bernoulli) edge
        probability :math:`K/(1+K)` equals UMAP's curve exactly.
    d2_floor : float
        Floor on squared distances where :math:`\log d^2` appears (duplicated points).
    """

    name = "umap"

    @property
    def tail_index(self) -> float:
        return self.b

    def __init__(self, a: float = 1.577, b: float = 0.8951, odds: bool = False, d2_floor=1e-10):
        if not (a > 0 and b > 0):
            raise ValueError(f"a and b must be positive, got a={a}, b={b}.")
        self.a, self.b, self.odds, self.d2_floor = float(a), float(b), bool(odds), float(d2_floor)

    def _log_ad2b(self, d2):
        return math.log(self.a) + self.b * torch.log(d2.clamp_min(self.d2_floor))

    def log_k(self, d2):
        t = self._log_ad2b(d2)
        return -t if self.odds else -F.softplus(t)

    def dlog_k(self, d2):
        d2c = d2.clamp_min(self.d2_floor)
        dt = self.b / d2c
        if self.odds:
            return -dt
        return -torch.sigmoid(self._log_ad2b(d2)) * dt

    def k_and_dlog_k(self, d2):
        if self.odds:
            d2c = d2.clamp_min(self.d2_floor)
            return (d2c.pow(self.b) * self.a).reciprocal_(), -self.b / d2c
        return super().k_and_dlog_k(d2)


def find_ab_params(spread: float = 1.0, min_dist: float = 0.1) -> tuple[float, float]:
    """Fit UMAP's ``a, b`` so that ``1/(1 + a x^{2b})`` matches the target curve (1 below
    ``min_dist``, ``exp(-(x - min_dist)/spread)`` above) by least squares on [0, 3*spread],
    as umap-learn documents."""
    from scipy.optimize import curve_fit

    if not spread > 0:
        raise ValueError(f"spread must be positive, got {spread}.")
    if not 0 <= min_dist <= spread:
        raise ValueError(f"min_dist must lie in [0, spread={spread}], got {min_dist}.")

    def curve(x, a, b):
        return 1.0 / (1.0 + a * x ** (2 * b))

    xv = np.linspace(0, spread * 3, 300)
    yv = np.where(xv < min_dist, 1.0, np.exp(-(xv - min_dist) / spread))
    (a, b), _ = curve_fit(curve, xv, yv)
    return float(a), float(b)


def get_kernel(kernel, **kwargs) -> Kernel:
    """Return a :class:`Kernel` from a name (``gaussian``, ``student``, ``umap``, ``umap_odds``)
    or pass a Kernel instance through."""
    if isinstance(kernel, Kernel):
        return kernel
    if kernel == "gaussian":
        return GaussianKernel(**kwargs)
    if kernel in ("student", "cauchy", "t"):
        return StudentKernel(**kwargs)
    if kernel == "umap":
        return UMAPKernel(**kwargs)
    if kernel == "umap_odds":
        return UMAPKernel(odds=True, **kwargs)
    raise ValueError(
        f"Unknown kernel {kernel!r}; choose 'gaussian', 'student', 'umap', 'umap_odds' or pass "
        "a probdr.kernels.Kernel instance."
    )
