"""Heap reuse during optimisation loops (glibc).

A MAP step on a large edge list allocates and frees temporaries of tens to hundreds of MB. glibc
serves each one above its mmap threshold (128 KiB, adjusted dynamically up to 32 MiB) with a
fresh ``mmap``, so every step pays for zero-filling new pages, and element-wise passes over
large edge lists run several times slower than on reused memory (``docs/benchmarks.md``).
:func:`heap_reuse` raises the mmap and trim thresholds for the duration of a loop, so freed
blocks stay on the heap and are reused by the next step, then lowers them to where glibc's own
dynamic rule takes them (which setting them turns off: :data:`_AFTER_MMAP`) and returns the free
memory to the system (``malloc_trim``). Elsewhere (macOS, Windows, musl) it
does nothing. ``probdr.config.set_heap_reuse(False)`` or ``PROBDR_HEAP_REUSE=0`` turn it off.
The thresholds are the process's: with loops running in several threads, the first to start
raises them and the last to end lowers them (the rest of the process, the user's own arrays
included, keeps its freed blocks on the heap meanwhile; no number changes).

Freed blocks of different sizes still fragment the heap, which then grows by fresh pages now and
then (measured at one million points: tens of thousands of page faults per step, each several
microseconds on a virtual machine). :func:`scratch` goes further for the few largest
temporaries of a step, the edge-list buffers: inside it, :func:`buffer` hands the same memory
back at every step. :func:`release_free` returns what a loop's first step freed (its caches'
temporaries), which heap reuse would otherwise hold until the loop ends.
"""

from __future__ import annotations

import ctypes
import platform
import threading
from contextlib import contextmanager

import torch

from .. import config

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: where a block leaves glibc's thresholds. glibc starts with a dynamic mmap threshold (128 KiB,
#: raised to the size of every mmapped block freed, up to 32 MiB on 64-bit systems; the trim
#: threshold twice it), and setting either threshold turns that rule off for good: leaving them
#: at 128 KiB made every later temporary above it a fresh mmap, zero-filled page by page (the
#: neighbour search of 70,000 points after a first fit in the process: 5.0 s against 2.7 s).
#: So a block leaves them where the dynamic rule takes them in any process that frees large
#: tensors: the largest mmap threshold it reaches, and twice that for the trim threshold.
_AFTER_MMAP = 32 * 1024 * 1024
_AFTER_TRIM = 2 * _AFTER_MMAP
_depth = 0
#: guards the count of open blocks, which threads open and close at once
_depth_lock = threading.Lock()
#: whether an open :func:`heap_reuse` raised glibc's thresholds
_raised = False
_libc = None


def _glibc():
    global _libc
    if _libc is None:
        _libc = False
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
            try:
                lib = ctypes.CDLL("libc.so.6")
                lib.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
                lib.malloc_trim.argtypes = [ctypes.c_size_t]
                _libc = lib
            except (OSError, AttributeError):  # pragma: no cover - unusual libc
                _libc = False
    return _libc


@contextmanager
def heap_reuse(threshold: int = 1 << 30):
    """Keep freed blocks below ``threshold`` bytes on the heap while the block runs (glibc).
    Yields whether they are kept (by this block or an outer one): false where the heap is not
    glibc's or heap reuse is off (:func:`probdr.config.set_heap_reuse`)."""
    global _depth, _raised
    lib = _glibc() if config.get_heap_reuse() else False
    with _depth_lock:
        first = bool(lib) and _depth == 0
        _depth += 1
        if first:
            lib.mallopt(_M_MMAP_THRESHOLD, int(threshold))
            lib.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)
            _raised = True
        raised = _raised
    try:
        yield raised
    finally:
        with _depth_lock:
            _depth -= 1
            last = _raised and _depth == 0
            if last:
                _raised = False
                lib_ = _glibc()
                lib_.mallopt(_M_MMAP_THRESHOLD, _AFTER_MMAP)
                lib_.mallopt(_M_TRIM_THRESHOLD, _AFTER_TRIM)
        if last:
            release_free()


def release_free() -> bool:
    """Return the heap's free memory to the system (glibc's ``malloc_trim``; elsewhere nothing);
    returns whether it was asked. Inside :func:`heap_reuse`, after a loop's first step: that step
    builds the loop's caches (a graph's folded edge list, its row segments) and frees their
    temporaries, gigabytes at a million points, which the heap would otherwise keep for the
    whole loop."""
    lib = _glibc()
    if lib:
        lib.malloc_trim(0)
    return bool(lib)


_scratch = threading.local()


@contextmanager
def scratch():
    """Reusable buffers for the duration of a loop, per thread (:func:`buffer`); released on exit."""
    outer = getattr(_scratch, "buffers", None)
    _scratch.buffers = {}
    try:
        yield
    finally:
        _scratch.buffers = outer


def buffer(name: str, shape: tuple, dtype: torch.dtype, device) -> torch.Tensor:
    """An uninitialised tensor. Inside :func:`scratch` on a CPU, the one handed out under this
    ``name`` at the previous call when shape and dtype agree: the caller must be done with it
    before the next call (a function that uses it and returns other tensors)."""
    buffers = getattr(_scratch, "buffers", None)
    if buffers is None or torch.device(device).type != "cpu":
        return torch.empty(shape, dtype=dtype, device=device)
    hit = buffers.get(name)
    if hit is None or hit.shape != tuple(shape) or hit.dtype != dtype:
        buffers.pop(name, None)  # released before the new one is taken
        hit = buffers[name] = torch.empty(shape, dtype=dtype, device=device)
    return hit
