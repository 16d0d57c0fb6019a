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

Learnable parameters
    A kernel's numbers (the Student kernel's ``dof`` and ``scale``, UMAP's ``a`` and ``b``, a
    scalar Gaussian ``bandwidth``) may be

    * a number: fixed (the fast closed forms, e.g. the Cauchy paths, apply);
    * a tensor that requires grad (e.g. a ``pyro.param``): every path of the package -- the
      edge sums, the exact blocked normalisers, the FFT normaliser, the sampled normalisers --
      returns its gradient with respect to it, as autograd through the dense
      :math:`n \times n` kernel would;
    * :class:`Learn`: a latent site of the model, drawn by :meth:`Kernel.sampled` inside a Pyro
      model (``graph_coupling_model`` does it), so that MAP, SVI and NUTS infer it beside Z.

    The hand-written gradients use :meth:`Kernel.dlog_k_dparams`, the derivative of
    :math:`\log k` with respect to each learnable number at every squared distance (closed forms
    here; forward-mode autodiff for a user's kernel).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

__all__ = [
    "Learn",
    "Kernel",
    "GaussianKernel",
    "StudentKernel",
    "UMAPKernel",
    "get_kernel",
    "find_ab_params",
]


class Learn:
    """A kernel parameter to infer: a latent site of the model.

    Parameters
    ----------
    init : float
        Starting value (MAP, the guide's location, NUTS's first state).
    prior : pyro distribution, optional
        Prior of the site (a positive-support law for positive parameters). ``None``: an
        improper flat prior on the positive reals, so that MAP is maximum likelihood in the
        parameter (SVI and NUTS need a proper prior).
    name : str, optional
        Name of the site; by default the parameter's name (``"dof"``, ``"scale"``, ``"a"``...).
    """

    def __init__(self, init: float = 1.0, prior=None, name: str | None = None):
        if not float(init) > 0:
            raise ValueError(f"a kernel parameter's initial value must be positive, got {init}.")
        self.init, self.prior, self.name = float(init), prior, name

    def site_prior(self):
        """The site's prior (a flat one on the positive reals unless one was given)."""
        if self.prior is not None:
            return self.prior
        import pyro.distributions as dist
        from torch.distributions import constraints

        return dist.ImproperUniform(constraints.positive, (), ())

    def __repr__(self) -> str:
        return f"Learn(init={self.init!r}" + (f", name={self.name!r})" if self.name else ")")


def _number(value, what: str):
    """A kernel parameter as given: a positive float, a tensor (learnable if it requires grad)
    or :class:`Learn`."""
    if isinstance(value, Learn):
        return value
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{what} must be a number (a 0-d tensor), got shape "
                             f"{tuple(value.shape)}.")
        if not bool(value.detach() > 0):
            raise ValueError(f"{what} must be positive, got {float(value)}.")
        return value.reshape(())
    if not value > 0:
        raise ValueError(f"{what} must be positive, got {value}.")
    return float(value)


class Kernel:
    """Base class: a symmetric kernel of squared distances, evaluated in log space."""

    name = "kernel"
    #: whether ``k`` decays polynomially (no underflow at large distances)
    heavy_tailed = True
    #: the names of the kernel's numbers (each a float, a tensor or :class:`Learn`)
    param_names: tuple[str, ...] = ()
    #: whether the FFT normaliser (:func:`probdr._compute.fft.kernel_log_total`) covers it
    has_fft = False

    # -- parameters ----------------------------------------------------------------------
    @property
    def is_fixed(self) -> bool:
        """Whether every number of the kernel is a plain float (no tensor, no :class:`Learn`)."""
        return all(isinstance(getattr(self, k), float) for k in self.param_names)

    def learnable(self) -> tuple[torch.Tensor, ...]:
        """The parameters that are tensors requiring grad, in :attr:`param_names` order."""
        return tuple(getattr(self, k) for k in self.learnable_names())

    def learnable_names(self) -> tuple[str, ...]:
        """The names of :meth:`learnable`'s parameters."""
        return tuple(k for k in self.param_names if isinstance(getattr(self, k), torch.Tensor)
                     and getattr(self, k).requires_grad)

    def sites(self) -> dict[str, Learn]:
        """``{site name: Learn}`` of the parameters that are latent sites."""
        return {(v.name or k): v for k, v in self._learn_params().items()}

    def with_params(self, **values) -> Kernel:
        """A copy with some parameters replaced (numbers, tensors or :class:`Learn`)."""
        import copy

        out = copy.copy(self)
        for k, v in values.items():
            if k not in self.param_names:
                raise ValueError(f"{type(self).__name__} has no parameter {k!r}; its parameters "
                                 f"are {self.param_names}.")
            setattr(out, k, _number(v, k))
        return out

    def sampled(self) -> Kernel:
        """Inside a Pyro model: the kernel with each :class:`Learn` parameter drawn as a latent
        site (``pyro.sample(name, prior)``); the kernel itself if it has none."""
        learn = self._learn_params()
        if not learn:
            return self
        import pyro

        return self.with_params(**{k: pyro.sample(v.name or k, v.site_prior())
                                   for k, v in learn.items()})

    def _learn_params(self) -> dict[str, Learn]:
        """``{parameter name: Learn}`` of the parameters that are latent sites."""
        return {k: v for k, v in ((k, getattr(self, k)) for k in self.param_names)
                if isinstance(v, Learn)}

    def fixed(self, values: dict | None = None) -> Kernel:
        """The kernel with every parameter a plain number: :class:`Learn` parameters at
        ``values[site]`` (e.g. a MAP fit's), tensors at their current values."""
        values = values or {}
        out = {}
        for k in self.param_names:
            v = getattr(self, k)
            if isinstance(v, Learn):
                v = values.get(v.name or k, v.init)
            if isinstance(v, torch.Tensor):
                if v.numel() != 1:  # per-point bandwidths stay as they are
                    continue
                v = float(v.detach())
            out[k] = v
        return self.with_params(**out)

    def dlog_k_dparams(self, d2: torch.Tensor) -> tuple[torch.Tensor, ...]:
        r""":math:`\partial \log k(d^2) / \partial \theta` at every entry of ``d2``, one tensor
        per learnable parameter (:meth:`learnable`). This default takes forward-mode derivatives
        of :meth:`log_k`; the kernels here override it with closed forms."""
        out = []
        for name in self.learnable_names():
            theta = getattr(self, name).detach()

            def f(t, name=name):
                return self.with_params(**{name: t}).log_k(d2)
            out.append(torch.func.jvp(f, (theta,), (torch.ones_like(theta),))[1].detach())
        return tuple(out)

    def param_grads(self, d2: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        r""":math:`\sum w \, \partial \log k(d^2) / \partial \theta` for each learnable
        :math:`\theta` (``w`` broadcasts against ``d2``), each in the parameter's dtype."""
        return tuple((t * w).sum(dtype=torch.float64).to(p.dtype)
                     for t, p in zip(self.dlog_k_dparams(d2), self.learnable(), strict=True))

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

    def log_k_and_dlog_k(self, d2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log k, dlog k / dd2)``, the numbers of :meth:`log_k` and :meth:`dlog_k`;
        subclasses share their common passes."""
        return self.log_k(d2), self.dlog_k(d2)

    def __call__(self, d2: torch.Tensor) -> torch.Tensor:
        return self.log_k(d2)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class GaussianKernel(Kernel):
    r"""Gaussian kernel :math:`k(d^2) = \exp(-d^2 / h)` with bandwidth ``h``.

    ``h`` is a number (a float, a tensor or :class:`Learn`), or a vector of per-point bandwidths
    :math:`h_i` (Remark 1 of the paper: :math:`K_{ij} = \exp(-\|x_i - x_j\|^2 / h_i)`), applied
    along the rows of a 2-D ``d2`` of shape (n, k) -- neighbour lists or a dense matrix. ``h = 1``
    gives SNE's latent kernel :math:`\exp(-\|z_i - z_j\|^2)`; the entropic affinities use the
    per-point form (a vector that requires grad is differentiated by autograd where the law's
    weights are torch operations: the input side's sparse and dense weights).
    """

    name = "gaussian"
    heavy_tailed = False
    param_names = ("bandwidth",)

    def __init__(self, bandwidth=1.0):
        if isinstance(bandwidth, (Learn, float, int)) or (
                isinstance(bandwidth, torch.Tensor) and bandwidth.numel() == 1):
            self.bandwidth = _number(bandwidth, "bandwidth")
            return
        h = torch.as_tensor(bandwidth, dtype=torch.float64) if not isinstance(
            bandwidth, torch.Tensor) else bandwidth
        if h.ndim > 1 or not bool((h.detach() > 0).all()):
            raise ValueError("bandwidth must be a positive scalar or a 1-D vector of positive "
                             "per-point bandwidths.")
        self.bandwidth = h

    def learnable(self):
        h = self.bandwidth
        if isinstance(h, torch.Tensor) and h.ndim == 1 and h.requires_grad:
            raise ValueError("per-point bandwidths are differentiated on the input side (sparse "
                             "or dense weights), not by the latent kernel's fused paths; learn a "
                             "scalar bandwidth there.")
        return super().learnable()

    def _h(self, d2):
        h = self.bandwidth
        if not isinstance(h, torch.Tensor) or h.ndim == 0:
            return h
        if d2.ndim != 2 or d2.shape[0] != h.shape[0]:
            raise ValueError(f"per-point bandwidths need d2 of shape ({h.shape[0]}, "
                             f"k), got {tuple(d2.shape)}.")
        return h.to(d2.dtype)[:, None]

    def log_k(self, d2):
        return -d2 / self._h(d2)

    def dlog_k(self, d2):
        return -torch.ones_like(d2) / self._h(d2)

    def dlog_k_dparams(self, d2):
        if not self.learnable():
            return ()
        h = self.bandwidth.detach().to(d2.dtype)
        return (d2 / (h * h),)


class StudentKernel(Kernel):
    r"""Student-t kernel :math:`k(d^2) = (1 + d^2/(\nu s^2))^{-(\nu+1)/2}` with ``dof`` =
    :math:`\nu` and ``scale`` = :math:`s`; ``dof=1, scale=1`` is Cauchy :math:`1/(1+d^2)`,
    t-SNE's latent kernel, and :math:`\nu < 1` the heavier tails that separate clusters
    further (Kobak et al. 2019). Each number may be learned (see the module docstring)."""

    name = "student"
    param_names = ("dof", "scale")
    has_fft = True

    @property
    def tail_index(self) -> float:
        dof = self.dof.init if isinstance(self.dof, Learn) else float(self.dof)
        return 0.5 * (dof + 1.0)

    @property
    def is_cauchy(self) -> bool:
        """True for the fixed numbers ``dof == 1`` and ``scale == 1``: :math:`1/(1 + d^2)`."""
        return (isinstance(self.dof, float) and isinstance(self.scale, float)
                and self.dof == 1.0 and self.scale == 1.0)

    def __init__(self, dof=1.0, scale=1.0):
        self.dof = _number(dof, "dof")
        self.scale = _number(scale, "scale")

    def _c(self):
        r""":math:`\nu s^2`, the squared distance at which the kernel bends."""
        return self.dof if isinstance(self.scale, float) and self.scale == 1.0 \
            else self.dof * self.scale * self.scale

    def log_k(self, d2):
        if self.is_cauchy:
            return -torch.log1p(d2)
        return -0.5 * (self.dof + 1.0) * torch.log1p(d2 / self._c())

    def dlog_k(self, d2):
        return -0.5 * (self.dof + 1.0) / (self._c() + d2)

    def log_k_factored(self, d2):
        if self.is_cauchy:
            return torch.log1p(d2), -1.0
        return torch.log1p(d2 / self._c()), -0.5 * (self.dof + 1.0)

    def weighted_dlog_k_(self, d2, w):
        return torch.div(w, d2.add_(self._c()), out=d2), -0.5 * (self.dof + 1.0)

    def k_and_dlog_k(self, d2):
        if self.is_cauchy:
            k = (d2 + 1.0).reciprocal_()
            return k, -k
        return super().k_and_dlog_k(d2)

    def dlog_k_dparams(self, d2):
        r""":math:`\partial_\nu \log k = -\tfrac12 \log(1 + d^2/c) + \tfrac{\nu+1}{2\nu}\,r`,
        :math:`\partial_s \log k = (\nu+1)\,r/s`, with :math:`c = \nu s^2` and
        :math:`r = d^2/(c + d^2)`."""
        names = self.learnable_names()
        if not names:
            return ()
        nu, s = (float(v) if not isinstance(v, torch.Tensor) else v.detach().to(d2.dtype)
                 for v in (self.dof, self.scale))
        c = nu * s * s
        r = d2 / (d2 + c)
        out = {}
        if "dof" in names:
            out["dof"] = torch.log1p(d2 / c).mul_(-0.5).add_(r * (0.5 * (nu + 1.0) / nu))
        if "scale" in names:
            out["scale"] = r * ((nu + 1.0) / s)
        return tuple(out[k] for k in names)


class UMAPKernel(Kernel):
    r"""UMAP's curve :math:`w(d) = 1/(1 + a d^{2b})`, or its odds :math:`w/(1-w) = 1/(a d^{2b})`.

    Parameters
    ----------
    a, b : float, tensor or Learn
        Curve parameters; see :func:`find_ab_params` to fit them from ``min_dist`` and ``spread``.
    odds : bool
        If True, return the odds kernel :math:`1/(a d^{2b})`, so that a B-prior (Bernoulli) edge
        probability :math:`K/(1+K)` equals UMAP's curve exactly.
    d2_floor : float
        Floor on squared distances where :math:`\log d^2` appears (duplicated points).
    """

    name = "umap"
    param_names = ("a", "b")

    @property
    def tail_index(self) -> float:
        return self.b.init if isinstance(self.b, Learn) else float(self.b)

    def __init__(self, a=1.577, b=0.8951, odds: bool = False, d2_floor=1e-10):
        self.a, self.b = _number(a, "a"), _number(b, "b")
        self.odds, self.d2_floor = bool(odds), float(d2_floor)

    def _log_a(self):
        return math.log(self.a) if isinstance(self.a, float) else torch.log(self.a)

    def _log_ad2b(self, d2):
        return self._log_a() + self.b * torch.log(d2.clamp_min(self.d2_floor))

    def log_k(self, d2):
        t = self._log_ad2b(d2)
        return -t if self.odds else -F.softplus(t)

    def dlog_k(self, d2):
        d2c = d2.clamp_min(self.d2_floor)
        dt = self.b / d2c
        if self.odds:
            return -dt
        return -torch.sigmoid(self._log_ad2b(d2)) * dt

    def log_k_and_dlog_k(self, d2):
        if not (self.odds and isinstance(self.a, float) and isinstance(self.b, float)):
            return super().log_k_and_dlog_k(d2)
        # the passes of log_k and dlog_k (``b / x`` is torch's ``x.reciprocal() * b``), in place
        # on their temporaries, the floor taken once: the same numbers
        d2c = d2.clamp_min(self.d2_floor)
        log_k = torch.log(d2c).mul_(self.b).add_(math.log(self.a)).neg_()
        return log_k, d2c.reciprocal_().mul_(self.b).neg_()

    def k_and_dlog_k(self, d2):
        if self.odds:
            d2c = d2.clamp_min(self.d2_floor)
            return (d2c.pow(self.b) * self.a).reciprocal_(), -self.b / d2c
        return super().k_and_dlog_k(d2)

    def dlog_k_dparams(self, d2):
        r""":math:`\partial_a \log k = -\sigma(t)/a`, :math:`\partial_b \log k = -\sigma(t)
        \log d^2` with :math:`t = \log a + b \log d^2` (:math:`\sigma \equiv 1` for the odds)."""
        names = self.learnable_names()
        if not names:
            return ()
        a, b = (float(v) if not isinstance(v, torch.Tensor) else v.detach().to(d2.dtype)
                for v in (self.a, self.b))
        log_d2 = torch.log(d2.clamp_min(self.d2_floor))
        sig = torch.ones_like(d2) if self.odds else torch.sigmoid(
            (math.log(a) if isinstance(a, float) else torch.log(a)) + b * log_d2)
        out = {"a": -sig / a, "b": -sig * log_d2}
        return tuple(out[k] for k in names)


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
    or pass a Kernel instance through. A parameter given as ``"learn"`` becomes
    :class:`Learn` at its default start (1), a latent site of the model. UMAP's kernels take
    their curve's ``a, b`` or, as umap-learn, ``min_dist`` and ``spread``
    (:func:`find_ab_params`)."""
    if isinstance(kernel, Kernel):
        return kernel
    if kernel in ("umap", "umap_odds") and ({"min_dist", "spread"} & kwargs.keys()):
        if {"a", "b"} & kwargs.keys():
            raise ValueError("give UMAP's curve as a, b or as min_dist, spread, not both.")
        kwargs["a"], kwargs["b"] = find_ab_params(kwargs.pop("spread", 1.0),
                                                  kwargs.pop("min_dist", 0.1))
    kwargs = {k: Learn() if isinstance(v, str) and v == "learn" else v
              for k, v in kwargs.items()}
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
