r"""Observed graphs simulated from a latent law given an embedding: the data a fitted coupling
would have seen had its model been true.

A coupling at inverse temperature :math:`\omega` (``coupling_weight``) scores its observed graph
:math:`P` as :math:`\omega` independent graphs of the latent law would be scored, their average
observed: :math:`\omega \log p(P \mid Z) = \log p(W^{(1)}, \dots, W^{(\omega)} \mid Z)` when
:math:`P = \tfrac1\omega \sum_r W^{(r)}`. :func:`simulate_observed_graph` draws that average from
the latent law at an embedding :math:`Z` with the fit's kernel:

* **E** (n edges over all cells, :math:`\mathcal M(n, w/w_{++})` each graph): the sum of
  :math:`\omega` graphs is one multinomial of :math:`\omega n` edges; its rows are drawn in
  proportion to the rows' kernel sums, then the columns within each row;
* **D** (one edge per row, :math:`\mathcal C(w_{i\cdot}/w_{i+})`): :math:`\omega` columns per row;
* **B** (independent Bernoulli cells, :math:`\mathcal B(w/(1+w))`): a binomial count per cell.

A weight that is not a whole number draws :math:`\lfloor\omega n\rfloor` or
:math:`\lceil\omega n\rceil` edges (E), :math:`\lfloor\omega\rfloor` or :math:`\lceil\omega\rceil`
per row (D), at random with the right mean; the B law draws :math:`\mathrm{round}(\omega)`
graphs (at least one). The kernel is evaluated in blocks of rows, :math:`O(n^2)` time and
memory of the drawn edges only; the result is a sparse ``(n, n)`` float64 graph.
"""

from __future__ import annotations

import math

import torch

__all__ = ["simulate_observed_graph", "SIMULATED_PRIORS"]

#: the latent laws that can be simulated
SIMULATED_PRIORS = ("B", "D", "E")
#: kernel entries per block of rows
BLOCK_ENTRIES = 2_000_000


def simulate_observed_graph(prior: str, Z: torch.Tensor, kernel, weight: float,
                            generator: torch.Generator) -> torch.Tensor:
    r"""The average of :math:`\omega` = ``weight`` graphs drawn from the latent law ``prior``
    (``"B"``, ``"D"`` or ``"E"``) with weights :math:`w_{ij} = k(\|z_i - z_j\|^2)`, ``i != j``
    (see the module docstring); sparse ``(n, n)`` float64."""
    if prior not in SIMULATED_PRIORS:
        raise ValueError(f"no simulation for the latent law {prior!r}: one of "
                         f"{SIMULATED_PRIORS}.")
    if not (math.isfinite(weight) and weight > 0):
        raise ValueError(f"the coupling weight must be a positive number, got {weight!r}.")
    Z = torch.as_tensor(Z).detach().to(torch.float32)
    n = Z.shape[0]
    if prior == "B":
        return _binary_average(Z, kernel, max(1, round(weight)), generator)
    if prior == "E":
        sums = torch.cat([_log_kernel(Z, s, e, kernel).exp().sum(1, dtype=torch.float64)
                          for s, e in _blocks(n)])
        total = _round_at_random(weight * n, generator)
        rows = torch.multinomial(sums / sums.sum(), total, replacement=True, generator=generator)
        counts = torch.bincount(rows, minlength=n)
    else:
        counts = torch.tensor([_round_at_random(weight, generator) for _ in range(n)])
    return _row_draws(Z, kernel, counts, weight, generator)


def _blocks(n: int):
    b = max(1, BLOCK_ENTRIES // max(n, 1))
    for s in range(0, n, b):
        yield s, min(n, s + b)


def _log_kernel(Z: torch.Tensor, s: int, e: int, kernel) -> torch.Tensor:
    r""":math:`\log k(\|z_i - z_j\|^2)` of the rows ``s:e``, ``-inf`` on the diagonal, in
    ``Z``'s dtype (the simulation passes float32 positions: half the time of float64, and a
    relative error of 1e-7 in a probability is far below the draws' own noise)."""
    d2 = torch.cdist(Z[s:e], Z).square()
    lk = kernel.log_k(d2)
    lk[torch.arange(e - s), torch.arange(s, e)] = float("-inf")
    return lk


def _round_at_random(x: float, generator: torch.Generator) -> int:
    """``floor(x)`` or ``ceil(x)``, the latter with probability ``x - floor(x)``."""
    low = math.floor(x)
    u = float(torch.rand((), dtype=torch.float64, generator=generator))
    return int(low + (u < x - low))


def _row_draws(Z, kernel, counts: torch.Tensor, weight: float, generator) -> torch.Tensor:
    """``counts[i]`` columns drawn with replacement in row i in proportion to the kernel, as a
    graph of counts divided by ``weight``."""
    n = Z.shape[0]
    R, C = [], []
    for s, e in _blocks(n):
        c = counts[s:e]
        top = int(c.max()) if c.numel() else 0
        if top == 0:
            continue
        probs = torch.softmax(_log_kernel(Z, s, e, kernel), 1)
        cols = torch.multinomial(probs, top, replacement=True, generator=generator)
        keep = torch.arange(top)[None] < c[:, None]
        R.append(torch.arange(s, e)[:, None].expand_as(cols)[keep])
        C.append(cols[keep])
    return _graph(R, C, None, n, weight)


def _binary_average(Z, kernel, m: int, generator) -> torch.Tensor:
    """The average of ``m`` B-law graphs: a binomial count per cell."""
    n = Z.shape[0]
    R, C, V = [], [], []
    for s, e in _blocks(n):
        p = torch.sigmoid(_log_kernel(Z, s, e, kernel))
        count = torch.binomial(torch.full_like(p, float(m)), p, generator=generator)
        r, c = count.nonzero(as_tuple=True)
        R.append(r + s), C.append(c), V.append(count[r, c])
    return _graph(R, C, V, n, float(m))


def _graph(R, C, V, n: int, weight: float) -> torch.Tensor:
    """The sparse graph of the edges ``(R, C)`` (counts ``V``, ones where None; repeated edges
    summed), divided by ``weight``."""
    rows = torch.cat(R) if R else torch.zeros(0, dtype=torch.long)
    cols = torch.cat(C) if C else torch.zeros(0, dtype=torch.long)
    vals = torch.cat(V) if V else torch.ones(rows.numel(), dtype=torch.float64)
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), vals / weight, (n, n),
                                   dtype=torch.float64, check_invariants=False).coalesce()
