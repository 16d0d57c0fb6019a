"""Optimisers used by the MAP driver: t-SNE's gains-and-momentum descent, SGD with momentum and
Adam.

They follow ``torch.optim``'s interface (``param_groups``, ``state``, ``zero_grad``, ``step``)
and, for SGD and Adam, its update rules exactly (tests compare them step by step), but do not
derive from ``torch.optim.Optimizer``: its methods import ``torch._dynamo`` on first use, which
costs more than a whole fit on a few thousand points (``docs/benchmarks.md``).
"""

from __future__ import annotations

import torch

__all__ = ["GainsMomentum", "SGD", "Adam"]


class _Optimizer:
    """Parameter groups and per-parameter state, as in ``torch.optim.Optimizer``."""

    def __init__(self, params, defaults: dict):
        params = list(params)
        if not params:
            raise ValueError("the optimiser got an empty parameter list.")
        self.defaults = dict(defaults)
        self.param_groups = [dict(defaults, params=params)]
        self.state: dict = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_().zero_()

    #: state entries that scale linearly with the parameter under a scale-equivariant update
    #: (a velocity): :meth:`scale_state_` multiplies them with the parameter
    _linear_state: tuple[str, ...] = ()

    @torch.no_grad()
    def scale_state_(self, p: torch.Tensor, factor: torch.Tensor) -> None:
        """Multiply the velocity-like state of parameter ``p`` by ``factor`` (broadcast against
        ``p``, e.g. one factor per column), so that rescaling ``p`` by the same factor maps the
        optimiser's trajectory onto the rescaled trajectory (exact for SGD and gains-momentum
        when the gradient is linear in ``p``). Adam's step length does not scale with the
        gradient, so no rescaling of its state has this property: it lists no such state."""
        st = self.state.get(p, {})
        for key in self._linear_state:
            if key in st:
                st[key].mul_(factor)

    def _params_with_grad(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    yield group, p, p.grad, self.state.setdefault(p, {})


class SGD(_Optimizer):
    """Gradient descent with (heavy-ball) momentum: ``b = momentum * b + g`` (``b = g`` on the
    first step), ``p -= lr * b``; ``torch.optim.SGD``'s rule without dampening or Nesterov."""

    _linear_state = ("buf",)

    def __init__(self, params, lr: float, momentum: float = 0.0):
        if lr <= 0:
            raise ValueError(f"lr must be positive, got {lr}.")
        super().__init__(params, dict(lr=lr, momentum=momentum))

    @torch.no_grad()
    def step(self):
        for group, p, g, st in self._params_with_grad():
            if group["momentum"]:
                if "buf" not in st:
                    st["buf"] = g.clone()
                else:
                    st["buf"].mul_(group["momentum"]).add_(g)
                g = st["buf"]
            p.add_(g, alpha=-group["lr"])


class Adam(_Optimizer):
    """Adam (Kingma & Ba 2015) with bias correction, ``torch.optim.Adam``'s rule:
    ``p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8):
        if lr <= 0:
            raise ValueError(f"lr must be positive, got {lr}.")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps))

    @torch.no_grad()
    def step(self):
        for group, p, g, st in self._params_with_grad():
            b1, b2 = group["betas"]
            if not st:
                st["t"] = 0
                st["m"] = torch.zeros_like(p)
                st["v"] = torch.zeros_like(p)
            st["t"] += 1
            t = st["t"]
            st["m"].lerp_(g, 1 - b1)
            st["v"].mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (st["v"].sqrt() / (1 - b2 ** t) ** 0.5).add_(group["eps"])
            p.addcdiv_(st["m"], denom, value=-group["lr"] / (1 - b1 ** t))


class GainsMomentum(_Optimizer):
    """Gradient descent with momentum and adaptive per-coordinate gains (delta-bar-delta, Jacobs
    1988), the t-SNE optimiser of van der Maaten & Hinton (2008) and openTSNE.

    ``update = momentum * update - lr * gains * grad``; a gain grows by ``0.2`` where the gradient
    and the previous update disagree in sign and shrinks by ``0.8`` where they agree, never below
    ``min_gain``. Each point's step (a row of ``update``) is then clipped to norm
    ``max_step_norm`` (openTSNE's default 5): without it a few points can be thrown far from the
    embedding early on, which costs nothing in quality but inflates the interpolation grid of
    the FFT repulsion (measured at n = 20,000: ~100 points at 5-10x the embedding's radius made
    the grid 16x larger than the body of the embedding needs). ``None`` disables it.
    """

    _linear_state = ("update",)

    def __init__(self, params, lr: float = 200.0, momentum: float = 0.5, min_gain: float = 0.01,
                 max_grad_norm: float | None = None, max_step_norm: float | None = 5.0):
        if lr <= 0:
            raise ValueError(f"lr must be positive, got {lr}.")
        if max_step_norm is not None and max_step_norm <= 0:
            raise ValueError(f"max_step_norm must be positive or None, got {max_step_norm}.")
        super().__init__(params, dict(lr=lr, momentum=momentum, min_gain=min_gain,
                                      max_grad_norm=max_grad_norm, max_step_norm=max_step_norm))

    @torch.no_grad()
    def step(self):
        for group, p, g, st in self._params_with_grad():
            if group["max_grad_norm"] is not None:
                norm = g.norm(dim=-1, keepdim=True)
                g = g * torch.clamp(group["max_grad_norm"] / norm.clamp_min(1e-12), max=1.0)
            if not st:
                st["update"] = torch.zeros_like(p)
                st["gains"] = torch.ones_like(p)
            upd, gains = st["update"], st["gains"]
            agree = torch.sign(g) == torch.sign(upd)
            gains.copy_(torch.where(agree, gains * 0.8, gains + 0.2)).clamp_(min=group["min_gain"])
            upd.mul_(group["momentum"]).sub_(group["lr"] * gains * g)
            if group["max_step_norm"] is not None:
                norm = upd.norm(dim=-1, keepdim=True) if upd.ndim > 1 else upd.abs()
                upd.mul_(torch.clamp(group["max_step_norm"] / norm.clamp_min(1e-12), max=1.0))
            p.add_(upd)
