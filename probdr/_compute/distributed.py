r"""Data-parallel fits on ``torch.distributed``: one rank's shard and the few collectives it uses.

When a process group is initialised (``torchrun --nproc-per-node N``, ``probdr embed --nproc N``,
or a user's own ``init_process_group``) with more than one process, a model that declares
``data_parallel = True`` (the graph coupling) is fitted data-parallel by the one MAP driver
(:class:`probdr.infer.map.MAPFit`). Every rank holds the whole embedding Z and the whole input
graph; each evaluates *its share* of the loss, so that the shares sum to the loss:

* sums over items (attraction edges, negative samples, rows of the exact pair sums) are split in
  contiguous blocks, one per rank (:meth:`Shard.block`, :meth:`Shard.chunk`);
* a normaliser that needs a global sum (the E law's :math:`\log\sum_{i\ne j} w_{ij}`, the FFT
  grid charges) combines the partial sums with a differentiable all-reduce
  (:meth:`Shard.logsumexp`), and the replicated result is carried as ``share = 1 / world_size``
  of it by every rank, so that it is counted once;
* everything else that is replicated (a Z prior, a combinatorial constant, the Monte Carlo
  normaliser) is scaled by ``share``.

Each rank back-propagates its share; the driver sums the gradients and the loss over ranks with
one all-reduce per step (:meth:`Shard.sum_gradients`) before clipping and the optimiser step, so
every rank takes the same step and ends with the same embedding. Random draws that must differ
between ranks (negative samples) come from :attr:`Shard.generator`, a rank-specific stream.

Without a process group (or with one process) :func:`process_group_shard` returns ``None`` and
nothing here runs. See ``docs/distributed.md`` for the communication volume.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar

import torch

from .._utils import tensor_cache
from .isolation import fit_generator

__all__ = ["Shard", "current_shard", "use_shard", "process_group_shard", "process_group_rows",
           "all_gather_rows", "broadcast_"]

_CURRENT: ContextVar[Shard | None] = ContextVar("probdr_shard", default=None)


def _dist():
    import torch.distributed as dist

    return dist


def world() -> tuple[int, int]:
    """``(rank, world size)`` of the default process group; ``(0, 1)`` without one."""
    dist = _dist()
    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def _block(n: int, rank: int, size: int) -> tuple[int, int]:
    return n * rank // size, n * (rank + 1) // size


class Shard:
    """This rank's part of a data-parallel fit (see the module docstring).

    Parameters
    ----------
    rank, size : int
        This process's rank and the number of processes.
    generator : torch.Generator, optional
        The rank-specific random stream (negative samples).
    group : ProcessGroup, optional
        The process group (default: the default group).
    """

    def __init__(self, rank: int, size: int, generator: torch.Generator | None = None,
                 group=None):
        self.rank, self.size, self.generator, self.group = int(rank), int(size), generator, group

    @property
    def share(self) -> float:
        """The part of a replicated term each rank carries: ``1 / size``."""
        return 1.0 / self.size

    def block(self, n: int) -> tuple[int, int]:
        """This rank's contiguous block ``[start, stop)`` of ``n`` items (rows)."""
        if n < self.size:
            raise ValueError(f"a data-parallel fit over {self.size} processes needs at least "
                             f"{self.size} points, got {n}.")
        return _block(n, self.rank, self.size)

    def chunk(self, first: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """This rank's contiguous chunk of an item list given as aligned 1-D tensors (e.g. the
        rows, columns and values of an edge list), as views; cached on ``first``, so that the
        caches kept on the chunk (segment lengths) live as long as the list."""
        key = f"_probdr_chunk_{self.rank}_{self.size}_{len(others)}"

        def compute():
            s, e = _block(first.shape[0], self.rank, self.size)
            return tuple(t[s:e] for t in (first, *others))
        return tensor_cache(first, key, compute)

    # -- collectives ------------------------------------------------------------------------
    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        """Differentiable sum over ranks (its backward sums the gradients over ranks too)."""
        return _AllReduceSum.apply(t, self.group)

    def all_reduce_(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """In-place, non-differentiable reduction (``"sum"`` or ``"max"``) over ranks."""
        dist = _dist()
        dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX,
                        group=self.group)
        return t

    def logsumexp(self, partial: torch.Tensor) -> torch.Tensor:
        r""":math:`\log \sum_r e^{T_r}` of the ranks' partial log-sums :math:`T_r` (scalars),
        differentiable: shifted by the detached maximum, summed by a differentiable all-reduce.
        The gradient reaching :math:`T_r` is :math:`e^{T_r - T}` times the sum over ranks of
        the gradients of the result."""
        m = self.all_reduce_(partial.detach().clone(), "max")
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        return m + torch.log(self.all_reduce(torch.exp(partial - m)))

    def sum_gradients(self, params: Sequence[torch.Tensor], loss: torch.Tensor) -> torch.Tensor:
        """Sum the parameters' gradients (in place) and the loss over ranks, in one all-reduce
        when they share a dtype; returns the summed loss (detached)."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        lv = loss.detach().reshape(1)
        same = all(g.dtype == lv.dtype and g.device == lv.device for g in grads)
        flat = torch.cat([g.reshape(-1) for g in grads] + ([lv] if same else []))
        self.all_reduce_(flat)
        if not same:
            lv = self.all_reduce_(lv.clone())
        pos = 0
        for p, g in zip(params, grads, strict=True):
            k = g.numel()
            if p.grad is None:
                p.grad = g
            p.grad.copy_(flat[pos:pos + k].view_as(g))
            pos += k
        return (flat[pos] if same else lv[0]).clone()

    def broadcast_(self, t: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Overwrite ``t`` with rank ``src``'s value (in place)."""
        return broadcast_(t, src, self.group)


class _AllReduceSum(torch.autograd.Function):
    r""":math:`y = \sum_r x_r` on every rank; the gradient of :math:`\sum_r L_r` with respect
    to :math:`x_r` is :math:`\sum_{r'} \partial L_{r'} / \partial y`: the backward is the same
    all-reduce of the incoming gradients."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        y = x.clone(memory_format=torch.contiguous_format)
        _dist().all_reduce(y, group=group)
        return y

    @staticmethod
    def backward(ctx, g):
        g = g.clone(memory_format=torch.contiguous_format)
        _dist().all_reduce(g, group=ctx.group)
        return g, None


def broadcast_(t: torch.Tensor, src: int = 0, group=None) -> torch.Tensor:
    """Overwrite ``t`` with rank ``src``'s value, in place (a no-op without a process group)."""
    if world()[1] > 1:
        _dist().broadcast(t, src=src, group=group)
    return t


def current_shard() -> Shard | None:
    """The shard of the data-parallel fit running in this context, or ``None``."""
    return _CURRENT.get()


@contextlib.contextmanager
def use_shard(shard: Shard | None) -> Iterator[Shard | None]:
    """Make ``shard`` the current one inside the block (``None``: no sharding)."""
    token = _CURRENT.set(shard)
    try:
        yield shard
    finally:
        _CURRENT.reset(token)


def process_group_shard(device: torch.device | str | None = None) -> Shard | None:
    """This process's :class:`Shard` when a process group of more than one process is
    initialised, else ``None``. Its generator is seeded from one draw of torch's global stream
    (the same on every rank of a seeded fit) and the rank, so that ranks draw differently."""
    rank, size = world()
    if size <= 1:
        return None
    base = int(torch.randint(0, 2**62, (1,), generator=fit_generator()))
    gen = torch.Generator(device=device or "cpu")
    gen.manual_seed(hash((base, rank)) & (2**63 - 1))
    return Shard(rank, size, gen)


def process_group_rows(n: int) -> tuple[int, int] | None:
    """This rank's block of ``n`` rows when a process group of more than one process is
    initialised (the input side: neighbour queries, calibrations), else ``None``."""
    rank, size = world()
    return None if size <= 1 else Shard(rank, size).block(n)


def all_gather_rows(*blocks: torch.Tensor, n: int) -> tuple[torch.Tensor, ...]:
    """Concatenate every rank's row block (the blocks of :func:`process_group_rows`) of each
    tensor, in rank order: every rank gets the ``n`` full rows. Blocks are padded to the largest
    size for the collective and trimmed after."""
    dist = _dist()
    rank, size = world()
    bounds = [_block(n, r, size) for r in range(size)]
    width = max(e - s for s, e in bounds)
    out = []
    for b in blocks:
        pad = b.new_zeros((width, *b.shape[1:]))
        pad[: b.shape[0]] = b
        parts = [torch.empty_like(pad) for _ in range(size)]
        dist.all_gather(parts, pad)
        out.append(torch.cat([p[: e - s] for p, (s, e) in zip(parts, bounds, strict=True)]))
    return tuple(out)
