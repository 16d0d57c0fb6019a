"""How many threads a computation uses on a machine it shares with other processes.

torch runs an operation on several threads as one OpenMP parallel region, whose end is a
barrier. When another process holds one of the cores, one of the region's threads is often
descheduled, and every region then waits up to a scheduler time slice (milliseconds) for it. A
fit made of many small operations pays that wait at each of them: the digits t-SNE beside one
busy process took 35 s on two threads, 12.7 s on one and 10.7 s on an idle machine
(``benchmarks/contention.py``).

:class:`Governor` therefore keeps the thread count at the cores no other process is using, at
most its cap (the estimator's ``n_jobs``, or the process's setting), and at least one. It
measures the other processes' use of this process's cores from the machine's CPU time
(``/proc/stat``, the cores of this process's affinity) minus this process's own
(:func:`time.process_time`), every :data:`POLL_SECONDS` of the loops that call :func:`poll`
(every optimisation step does, :class:`probdr._compute.step.StepContext`). At entry, before any
interval has passed, it counts the other processes' running threads instead. A core counts as
taken from :data:`TAKEN_FROM` of a core's use by others on.

Fits running at once in several threads of one process share the free cores: each takes
its share (the free cores divided by the governed blocks open in the process, at least one
thread). torch's thread count is kept per thread once a thread has run a parallel operation,
and new threads start from the process's value, which the last block to end sets back.

The numbers do not depend on the thread count (the operations whose rounding did are run on one
thread: ``tests/compute/test_threads.py``), so the governor changes the time of a fit, never its
result. Where the machine has no ``/proc/stat`` (macOS, Windows) or
:func:`probdr.config.set_adaptive_threads` turned it off, the thread count is the cap.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import math
import os
import threading
import time

import torch

from .. import config

__all__ = ["Governor", "governed", "poll", "CoreClock"]

#: seconds between two measurements of the other processes' use of the cores
POLL_SECONDS = 0.25
#: the other processes' use of the cores (in cores, rounded up from this fraction) that takes one
TAKEN_FROM = 0.35
#: the thread counts a governor remembers (a day's fit polls some 350,000 times)
HISTORY = 1000

_current: contextvars.ContextVar[Governor | None] = contextvars.ContextVar("probdr_governor",
                                                                          default=None)
#: governed blocks open in this process (one per thread at most) and torch's thread count before
#: the first of them: torch's count is read per thread, but the value new threads start from is
#: the process's, and it is set back when the last block ends
_blocks_lock = threading.Lock()
_open_blocks = 0
_process_threads: int | None = None


def _cores() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


class CoreClock:
    """CPU seconds spent on this process's cores by every process, and by this one.

    :meth:`read` returns ``(wall, everyone, own)`` in seconds, or ``None`` where the machine has
    no ``/proc/stat``. Busy time is user, nice, system, interrupt and steal time (a hypervisor's
    steal is a core this process cannot have)."""

    def __init__(self):
        self.cores = _cores()
        self._names = {f"cpu{c}".encode() for c in self.cores}
        self._tick = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        self.available = os.path.exists("/proc/stat")

    def _stat(self) -> bytes | None:
        try:
            with open("/proc/stat", "rb") as f:
                return f.read()
        except OSError:
            return None

    def read(self) -> tuple[float, float, float] | None:
        data = self._stat() if self.available else None
        if data is None:
            return None
        busy = 0
        for line in data.split(b"\n"):
            if not line.startswith(b"cpu"):
                break
            fields = line.split()
            if fields[0] in self._names:  # user nice system idle iowait irq softirq steal
                busy += sum(int(v) for v in fields[1:4]) + sum(int(v) for v in fields[6:9])
        return time.monotonic(), busy / self._tick, time.process_time()

    def others_running(self, samples: int = 3, spacing: float = 1e-3) -> int | None:
        """Threads of other processes running or ready to run now: the fewest of ``samples``
        counts ``spacing`` seconds apart (a thread busy for a moment is not a busy process) of
        ``procs_running`` less this process's running threads. ``None`` where unknown, or where
        this process may use only some of the machine's cores (the count is the machine's)."""
        if not self.available or len(self.cores) != (os.cpu_count() or 0):
            return None
        counts = []
        for i in range(samples):
            if i:
                time.sleep(spacing)
            data = self._stat()
            at = -1 if data is None else data.find(b"procs_running ")
            if at < 0:
                return None
            running = int(data[at + 14:data.index(b"\n", at)])
            counts.append(max(0, running - _own_running()))
        return min(counts)


def _own_running() -> int:
    """This process's threads in the running state (at least this one)."""
    n = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 1
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        n += stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] == b"R"
    return max(1, n)


class Governor:
    """The thread count of one computation: the free cores, between 1 and ``cap``.

    Parameters
    ----------
    cap : int
        The most threads to use (``n_jobs``).
    clock : CoreClock, optional
        Where the CPU times come from (a fake one in tests).
    """

    def __init__(self, cap: int, clock: CoreClock | None = None):
        self.cap = max(1, int(cap))
        self.clock = clock or CoreClock()
        self._last = None
        self._due = 0.0
        #: the latest thread counts chosen (at most :data:`HISTORY`), in order, each with the
        #: other processes' use
        self.history: collections.deque[tuple[int, float]] = collections.deque(maxlen=HISTORY)

    def threads_for(self, others: float) -> int:
        """Threads for the other processes' use of the cores, ``others`` (in cores)."""
        taken = max(0, math.ceil(others - TAKEN_FROM))
        return max(1, min(self.cap, len(self.clock.cores) - taken))

    def start(self) -> int:
        """The thread count at entry (from the other processes' running threads) and the first
        measurement."""
        self._last = self.clock.read()
        self._due = time.monotonic() + POLL_SECONDS
        others = self.clock.others_running() if self._last is not None else None
        return self._choose(0.0 if others is None else float(others))

    def poll(self) -> int | None:
        """Every :data:`POLL_SECONDS`: the new thread count from the other processes' use of
        the cores since the last measurement (``None`` between measurements)."""
        now = time.monotonic()
        if now < self._due or self._last is None:
            return None
        sample = self.clock.read()
        wall, everyone, own = sample[0] - self._last[0], sample[1] - self._last[1], \
            sample[2] - self._last[2]
        self._last, self._due = sample, now + POLL_SECONDS
        if wall <= 0:
            return None
        return self._choose(max(0.0, (everyone - own) / wall))

    def _choose(self, others: float) -> int:
        # the fits running in other threads of this process share the free cores with this one
        threads = max(1, self.threads_for(others) // max(1, _open_blocks))
        self.history.append((threads, others))
        if threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        return threads


@contextlib.contextmanager
def governed(cap: int | None):
    """Run a block with torch's thread count kept at the free cores, at most ``cap`` (``None``:
    the process's thread count); restored afterwards, also on error. Inside a governed block, a
    block of the same cap or ``None`` is governed by the enclosing one. Yields the
    :class:`Governor`, or ``None`` when adaptive threads are off
    (:func:`probdr.config.get_adaptive_threads`; the count is then ``cap``)."""
    outer = _current.get()
    if outer is not None and cap in (None, outer.cap):  # the enclosing block's governor goes on
        yield outer
        return
    before = torch.get_num_threads()
    if cap is None:
        cap = before
    gov = Governor(cap) if config.get_adaptive_threads() else None
    token = _current.set(gov)
    _open_block(before)
    try:
        if gov is not None:
            gov.start()
        elif cap != before:
            torch.set_num_threads(cap)
        yield gov
    finally:
        _current.reset(token)
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
        _close_block()


def _open_block(before: int) -> None:
    global _open_blocks, _process_threads
    with _blocks_lock:
        if _open_blocks == 0:
            _process_threads = before
        _open_blocks += 1


def _close_block() -> None:
    """The last governed block of the process to end sets torch's count back to the one before
    the first began (the value threads started later read)."""
    global _open_blocks, _process_threads
    with _blocks_lock:
        _open_blocks -= 1
        if _open_blocks == 0:
            if _process_threads is not None and torch.get_num_threads() != _process_threads:
                torch.set_num_threads(_process_threads)
            _process_threads = None


def poll() -> None:
    """Let the block's :class:`Governor` (:func:`governed`) adjust the thread count if a
    measurement is due; nothing outside such a block or on another thread. Costs well under a
    microsecond between measurements."""
    gov = _current.get()
    if gov is not None:
        gov.poll()
