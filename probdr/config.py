"""Library-wide settings.

``memory_budget_gb`` bounds every dense n x n allocation probdr makes (dense graph laws, dense
samples, Laplacians, dense kernel matrices): a request above it fails at once with a message
saying how much was needed and what to use instead. Default: 4 GiB, or the environment variable
``PROBDR_MEMORY_BUDGET_GB``; ``None`` disables the check.

``heap_reuse`` (default on; environment variable ``PROBDR_HEAP_REUSE=0`` turns it off) keeps
freed memory on the glibc heap during optimisation loops instead of returning it to the system
after every step (see ``probdr._alloc``); peak memory is then the largest step's, held until
the loop ends. The first step of each phase is the exception: it builds the graph's caches, and
what it frees is returned to the system after it.
"""

from __future__ import annotations

import os

_budget: float | None = float(os.environ.get("PROBDR_MEMORY_BUDGET_GB", "4"))
_heap_reuse: bool = os.environ.get("PROBDR_HEAP_REUSE", "1").strip().lower() not in ("0", "false", "no")


def get_heap_reuse() -> bool:
    """Whether optimisation loops keep freed memory on the heap (glibc only)."""
    return _heap_reuse


def set_heap_reuse(on: bool) -> None:
    """Turn heap reuse during optimisation loops on or off."""
    global _heap_reuse
    _heap_reuse = bool(on)


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
