"""Optimisers used by the MAP driver (torch optimisers, wrapped by Pyro's optim machinery)."""

from __future__ import annotations

import torch

__all__ = ["GainsMomentum"]


class GainsMomentum(torch.optim.Optimizer):
    """Gradient descent with momentum and adaptive per-coordinate gains (delta-bar-delta, Jacobs
    1988), the t-SNE optimiser of van der Maaten & Hinton (2008) and openTSNE.

    ``update = momentum * update - lr * gains * grad``; a gain grows by ``0.2`` where the gradient
    and the previous update disagree in sign and shrinks by ``0.8`` where they agree, never below
    ``min_gain``.
    """

    def __init__(self, params, lr: float = 200.0, momentum: float = 0.5, min_gain: float = 0.01,
                 max_grad_norm: float | None = None):
        if lr <= 0:
            raise ValueError(f"lr must be positive, got {lr}.")
        super().__init__(params, dict(lr=lr, momentum=momentum, min_gain=min_gain,
                                      max_grad_norm=max_grad_norm))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if group["max_grad_norm"] is not None:
                    norm = g.norm(dim=-1, keepdim=True)
                    g = g * torch.clamp(group["max_grad_norm"] / norm.clamp_min(1e-12), max=1.0)
                st = self.state[p]
                if not st:
                    st["update"] = torch.zeros_like(p)
                    st["gains"] = torch.ones_like(p)
                upd, gains = st["update"], st["gains"]
                agree = torch.sign(g) == torch.sign(upd)
                gains.copy_(torch.where(agree, gains * 0.8, gains + 0.2)).clamp_(min=group["min_gain"])
                upd.mul_(group["momentum"]).sub_(group["lr"] * gains * g)
                p.add_(upd)
        return loss
