"""The machine a benchmark ran on, in words, for its record."""

from __future__ import annotations

import platform


def cpu_name() -> str:
    """The CPU's model name from ``/proc/cpuinfo``, else what :mod:`platform` knows."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        return names[0] if names else cpu
    except OSError:
        return cpu
