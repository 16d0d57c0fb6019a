"""Exact per-point Markov chains for densities that factorise over points: vectorised
random-walk Metropolis with each point's step adapted during warm-up. Used by the graph
couplings' ``sample_transform`` (:mod:`probdr.estimators.coupling_new_points`), where each new
point's conditional posterior given the fitted embedding is a density of its own position."""

from __future__ import annotations

import math

import torch

__all__ = ["random_walk_metropolis", "TARGET_ACCEPT"]

#: target acceptance rate of the random-walk chains (about optimal in 1 to 3 dimensions)
TARGET_ACCEPT = 0.35


@torch.no_grad()
def random_walk_metropolis(log_density, Z0: torch.Tensor, num_samples: int, num_warmup: int,
                           thin: int, gen: torch.Generator, scale0: float):
    """Two random-walk Metropolis chains per point (vectorised over points) of the density
    ``exp(log_density(Z))`` that factorises over points (``log_density`` maps ``(2, m, q)`` to
    ``(2, m)``), started near ``Z0`` (``0.1 * scale0`` Gaussian jitter); each point's step,
    first ``scale0 / sqrt(q)``, is adapted during ``num_warmup`` steps towards the acceptance
    rate :data:`TARGET_ACCEPT` (a Robbins-Monro step on its logarithm), then held; every
    ``thin``-th state is kept. Returns the draws ``(num_samples, m, q)`` (the chains
    interleaved) and each point's acceptance rate after warm-up."""
    m, q = Z0.shape
    Z = Z0.expand(2, m, q) + 0.1 * scale0 * torch.randn(2, m, q, generator=gen, dtype=Z0.dtype)
    lp = log_density(Z)
    step = torch.full((2, m), scale0 / math.sqrt(q), dtype=Z0.dtype)
    per_chain = math.ceil(num_samples / 2)
    kept = torch.empty(per_chain, 2, m, q, dtype=Z0.dtype)
    accepted = torch.zeros(2, m, dtype=Z0.dtype)
    for t in range(num_warmup + per_chain * thin):
        prop = Z + step[..., None] * torch.randn(2, m, q, generator=gen, dtype=Z0.dtype)
        lpp = log_density(prop)
        u = torch.rand(2, m, generator=gen, dtype=Z0.dtype)
        ok = torch.log(u) < (lpp - lp)  # NaN proposals (never expected) are rejected
        Z = torch.where(ok[..., None], prop, Z)
        lp = torch.where(ok, lpp, lp)
        if t < num_warmup:
            step = step * torch.exp((ok.to(Z0.dtype) - TARGET_ACCEPT) / math.sqrt(t + 1.0))
        else:
            accepted += ok
            r = t - num_warmup
            if (r + 1) % thin == 0:
                kept[r // thin] = Z
    rate = accepted.mean(0) / max(per_chain * thin, 1)
    draws = kept.transpose(0, 1).reshape(2 * per_chain, m, q)[:num_samples]
    return draws, rate
