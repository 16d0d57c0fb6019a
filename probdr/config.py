"""Library-wide settings.

``memory_budget_gb`` bounds every dense n x n allocation probdr makes (dense graph laws, dense
samples, Laplacians, dense kernel matrices): a request above it fails at once with a message
saying how much was needed and what to use instead. Default: 4 GiB, or the environment variable
``PROBDR_MEMORY_BUDGET_GB``; ``None`` disables the check.

``heap_reuse`` (default on; environment variable ``PROBDR_HEAP_REUSE=0`` turns it off) keeps freed
memory on the glibc heap during optimisation loops instead of returning it to the system after every
step (see :mod:`probdr._compute.alloc`); peak memory is then the largest step's, held until the loop
ends. The first step of each phase is the exception: it builds the graph's caches, and what it frees
is returned to the system after it.

``adaptive_threads`` (default on; environment variable ``PROBDR_ADAPTIVE_THREADS=0`` turns it
off) keeps a computation's threads at the cores that other processes leave free, at most
``n_jobs`` and at least one, measured four times a second during the fit
(:mod:`probdr._compute.threads`): on a machine shared with busy processes, torch's threads would
otherwise wait at every operation's barrier for a descheduled thread. It changes the time of a fit,
never its numbers. Off, a fit runs on ``n_jobs`` threads (the process's setting when ``None``).

``compile`` (default on; environment variable ``PROBDR_COMPILE=0`` turns it off) lets the edge sums
of large graphs (t-SNE's attraction at scale, :mod:`probdr._compute.edge_layout`) run as one loop
compiled by :func:`torch.compile`; off, or where torch cannot compile (no C++ compiler: warned
once), they keep the edge-list path, slower at scale. The numbers agree to rounding.

``loss_every`` says how often a long MAP fit evaluates and records its loss. The gradient of every
step is exact either way; what a step between two records skips is the value of the edge sums
(one pass of logarithms over the edge list, about 50 ms of a t-SNE step at a million points).
``None`` (default, or the environment variable ``PROBDR_LOSS_EVERY``): every
``LOSS_EVERY_LARGE``-th step (and the first and last step of every phase; openTSNE and
scikit-learn's t-SNE also evaluate the KL divergence every 50 iterations only), at any size. On
small data a record is a large share of a step: on the 569 points of breast cancer, t-SNE's fit
took 0.84 s recording every step and 0.58 s recording every 50th (the same embedding). Phases
with a stopping rule, L-BFGS and callbacks see the loss at every step they need. ``1`` records
every step.

``sync_free`` keeps the host out of the optimisation loop's way on accelerators: a step then makes
no host synchronisation (no ``.item()``, no data-dependent shapes, no Python branch on a tensor's
value), so the host queues the next steps while the device computes. The losses stay on the device
and are read every ``SYNC_EVERY`` steps (and at the end of a phase, and at every step a callback or
a stopping rule needs), where a non-finite loss is still reported with the step it appeared at.
What changes in that mode: the FFT grid of t-SNE has a fixed side (``MAX_GRID``) and a spacing
computed on the device, and negative sampling evaluates every edge with a 0/1 weight instead of
selecting the edges of the step (the same law of the draws, another random stream). ``None``
(default, or ``PROBDR_SYNC_FREE=auto``): on for every device but the CPU, where a synchronisation
costs nothing and the selected edges are fewer operations; ``True``/``False`` force it.

``fused_step`` (default on; environment variable ``PROBDR_FUSED=0`` turns it off) lets a plain MAP
fit of a graph coupling whose likelihood has a fused form (negative sampling of the B law: UMAP,
LargeVis; the E law with its exact or FFT normaliser: t-SNE) take each step from explicit
gradient formulas -- the loss and its gradient on Z computed directly, with the same edges, the
same random draws and the same optimiser step -- instead of a Pyro trace and autograd
(:class:`probdr.infer.map.MAPFit`). Off, every step runs the Pyro program. The numbers agree to
rounding.
"""

from __future__ import annotations

import os
from numbers import Integral

_budget: float | None = float(os.environ.get("PROBDR_MEMORY_BUDGET_GB", "4"))
_heap_reuse: bool = os.environ.get("PROBDR_HEAP_REUSE", "1").strip().lower() not in ("0", "false", "no")
_compile: bool = os.environ.get("PROBDR_COMPILE", "1").strip().lower() not in ("0", "false", "no", "off")
#: ``loss_every=None``: every ``LOSS_EVERY_LARGE``-th step, at any size
LOSS_EVERY_LARGE = 50


def _loss_every_env() -> int | None:
    raw = os.environ.get("PROBDR_LOSS_EVERY", "").strip()
    if not raw or raw.lower() in ("none", "auto"):
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"PROBDR_LOSS_EVERY must be a positive integer or 'auto', got {raw!r}.")
    return int(raw)


_loss_every: int | None = _loss_every_env()
#: in sync-free mode, the host reads the losses every this many steps
SYNC_EVERY = 50


def _sync_free_env() -> bool | None:
    raw = os.environ.get("PROBDR_SYNC_FREE", "auto").strip().lower()
    if raw in ("", "auto", "none"):
        return None
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"PROBDR_SYNC_FREE must be 1, 0 or 'auto', got {raw!r}.")


_sync_free: bool | None = _sync_free_env()
_fused_step: bool = os.environ.get("PROBDR_FUSED", "1").strip().lower() not in (
    "0", "false", "no", "off")
_adaptive_threads: bool = os.environ.get("PROBDR_ADAPTIVE_THREADS", "1").strip().lower() not in (
    "0", "false", "no", "off")


def get_adaptive_threads() -> bool:
    """Whether fits use only the cores other processes leave free (at most ``n_jobs``)."""
    return _adaptive_threads


def set_adaptive_threads(on: bool) -> None:
    """Let fits use only the free cores, at most ``n_jobs`` (``True``, default), or always
    ``n_jobs`` threads (``False``)."""
    global _adaptive_threads
    if not isinstance(on, bool):
        raise ValueError(f"adaptive_threads must be True or False, got {on!r}.")
    _adaptive_threads = on


def get_heap_reuse() -> bool:
    """Whether optimisation loops keep freed memory on the heap (glibc only)."""
    return _heap_reuse


def set_heap_reuse(on: bool) -> None:
    """Turn heap reuse during optimisation loops on or off."""
    global _heap_reuse
    _heap_reuse = bool(on)


def get_compile() -> bool:
    """Whether the edge sums of large graphs may run as a loop compiled by ``torch.compile``."""
    return _compile


def set_compile(on: bool) -> None:
    """Let the edge sums of large graphs run compiled (``True``, default) or not."""
    global _compile
    if not isinstance(on, bool):
        raise ValueError(f"compile must be True or False, got {on!r}.")
    _compile = bool(on)


def get_loss_every() -> int | None:
    """How often long MAP fits record their loss: every k-th step, or ``None`` (by size)."""
    return _loss_every


def set_loss_every(k: int | None) -> None:
    """Record the loss of MAP fits every ``k``-th step (``1``: every step), or ``None``: every
    ``LOSS_EVERY_LARGE``-th step."""
    global _loss_every
    if k is not None and (isinstance(k, bool) or not isinstance(k, Integral) or k < 1):
        raise ValueError(f"loss_every must be a positive integer or None, got {k!r}.")
    _loss_every = None if k is None else int(k)


def loss_every() -> int:
    """The recording interval the setting gives a MAP fit."""
    return LOSS_EVERY_LARGE if _loss_every is None else _loss_every


def get_sync_free() -> bool | None:
    """Whether optimisation loops avoid host synchronisation: ``True``, ``False`` or ``None``
    (automatic: on every device but the CPU)."""
    return _sync_free


def set_sync_free(on: bool | None) -> None:
    """Make optimisation loops free of host synchronisation (``True``), not (``False``), or
    decide by device (``None``, the default: on every device but the CPU)."""
    global _sync_free
    if on is not None and not isinstance(on, bool):
        raise ValueError(f"sync_free must be True, False or None, got {on!r}.")
    _sync_free = on


def sync_free_for(device) -> bool:
    """Whether a loop on ``device`` (a ``torch.device`` or its name) runs free of host
    synchronisation under the current setting."""
    if _sync_free is not None:
        return _sync_free
    import torch

    return torch.device(device).type != "cpu"


def get_fused_step() -> bool:
    """Whether plain MAP fits whose model offers a fused step take it (``True``, default)."""
    return _fused_step


def set_fused_step(on: bool) -> None:
    """Let plain MAP fits of models with a fused form step by explicit gradients (``True``,
    default), or run every step through the Pyro program and autograd (``False``)."""
    global _fused_step
    if not isinstance(on, bool):
        raise ValueError(f"fused_step must be True or False, got {on!r}.")
    _fused_step = on


def get_memory_budget() -> float | None:
    """Current memory budget for n x n allocations, in GiB (None: unlimited)."""
    return _budget


def set_memory_budget(gb: float | None) -> None:
    """Set the memory budget for n x n allocations, in GiB (None: unlimited)."""
    global _budget
    if gb is not None and not gb > 0:
        raise ValueError(f"memory budget must be positive or None, got {gb}.")
    _budget = None if gb is None else float(gb)


def check_dense(n: int, what: str, alternative: str, itemsize: int = 8, copies: int = 1) -> None:
    """Raise MemoryError before allocating ``copies`` n x n arrays above the budget."""
    if _budget is None:
        return
    need = n * n * itemsize * copies / 2**30
    if need > _budget:
        raise MemoryError(
            f"{what} needs {need:.2f} GiB for dense {n} x {n} matrices, above probdr's memory "
            f"budget of {_budget:.2f} GiB. {alternative} (Raise the budget with "
            "probdr.config.set_memory_budget(gb) if you have the memory.)")
