"""The one door of an optimisation loop into the engine room.

A MAP fit (:class:`probdr.infer.map.MAPFit`) pulls these levers of the engine room, each at its
own level:

* for the whole fit, the rank's shard of a data-parallel fit, made current
  (:func:`~probdr._compute.distributed.use_shard`): the weights then evaluate its share;
* for each loop of steps (a phase), heap reuse (:func:`~probdr._compute.alloc.heap_reuse`) and
  the edge sums' scratch buffers (:func:`~probdr._compute.alloc.scratch`);
* after a loop's first step, which builds the loop's caches, the heap's free memory back to the
  system (:func:`~probdr._compute.alloc.release_free`);
* for a step whose loss is not recorded, the edge sums' values deferred
  (:func:`~probdr._compute.edges.values_deferred`): its gradient only;
* for the whole fit, torch's threads kept at the cores other processes leave free, within an
  estimator's ``n_jobs`` (:func:`~probdr._compute.threads.governed`), measured again before a
  step when a measurement is due (:func:`~probdr._compute.threads.poll`).

:class:`StepContext` holds them: entered once per fit, :meth:`StepContext.loop` once per loop and
:meth:`StepContext.step` once per step, which yields the :class:`Step`, the record of what the
engine room does around that step. None of them changes a number.
"""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack, contextmanager, nullcontext

import torch

from .alloc import heap_reuse, release_free, scratch
from .distributed import Shard, process_group_shard, use_shard
from .edges import values_deferred
from .threads import governed, poll

__all__ = ["Step", "StepContext"]


@dataclasses.dataclass
class Step:
    """What the engine room did around one step of a loop."""

    #: the step's number in its loop, from 1
    number: int
    #: the edge sums returned 0 as their values and computed their gradients only
    values_deferred: bool
    #: freed blocks stayed on the heap for the next step (glibc's heap, heap reuse on)
    heap_reused: bool
    #: this rank's shard of a data-parallel fit (``None``: the whole loss)
    shard: Shard | None = None
    #: after the step, the heap's free memory went back to the system (set when the step ends:
    #: the loop's first step, on glibc's heap)
    released: bool = False


class StepContext:
    """The engine room's levers for the loops of one fit (see the module docstring).

    Parameters
    ----------
    data_parallel : bool
        The model evaluates its share of the loss in a data-parallel fit: when a process group
        of more than one process is initialised, :attr:`shard` is this rank's
        (:func:`~probdr._compute.distributed.process_group_shard`), current inside the context.
    device : torch.device or str, optional
        The device of the fit (the shard's random stream).
    """

    def __init__(self, data_parallel: bool = False, device: torch.device | str | None = None):
        #: this rank's shard of a data-parallel fit, or ``None``
        self.shard: Shard | None = process_group_shard(device) if data_parallel else None
        self._stack: ExitStack | None = None
        self._loop: list | None = None  # [heap reused, steps so far] of the open loop

    def __enter__(self) -> StepContext:
        self._stack = ExitStack()
        self._stack.enter_context(governed(None))
        if self.shard is not None:
            self._stack.enter_context(use_shard(self.shard))
        return self

    def __exit__(self, *exc) -> bool:
        stack, self._stack = self._stack, None
        return bool(stack.__exit__(*exc))

    @contextmanager
    def loop(self):
        """One loop of steps: heap reuse and the scratch buffers for its duration."""
        outer = self._loop
        with heap_reuse() as reused, scratch():
            self._loop = [reused, 0]
            try:
                yield self
            finally:
                self._loop = outer

    @contextmanager
    def step(self, record: bool = True):
        """One step of the open loop, its loss recorded or not (``record``: without, the edge
        sums' values are deferred). Yields its :class:`Step`. After the loop's first step the heap's free memory goes back to the
        system."""
        if self._loop is None:
            raise RuntimeError("StepContext.step runs inside StepContext.loop().")
        self._loop[1] += 1
        poll()
        step = Step(self._loop[1], values_deferred=not record, heap_reused=self._loop[0],
                    shard=self.shard)
        with nullcontext() if record else values_deferred():
            yield step
        if step.number == 1:  # the first step's cache-building temporaries: back to the system
            step.released = release_free()
