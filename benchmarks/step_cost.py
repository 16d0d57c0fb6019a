"""Seconds per optimisation step of TSNE at scale, the input graph built once.

The estimator is fitted up to its optimisation (neighbours, affinities, initialisation); then
``--steps E M`` steps are timed: E with early exaggeration and M without, from the same start,
in one ``run_map`` call, as ``fit`` runs them. Repeat with ``--repeat`` (the graph is reused).
To compare two versions of the code on the same machine, run it from each checkout in turn::

    python benchmarks/step_cost.py --data mnistdef1m --steps 60 60
    PYTHONPATH=/path/to/other/checkout python benchmarks/step_cost.py --data mnistdef1m --steps 60 60

Page faults (``ru_minflt``) are reported with the time: fresh pages cost several microseconds
each on a virtual machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import time

import torch

import probdr
import probdr.estimators.coupling as coupling
from probdr.infer import run_map
from probdr.models.coupling import graph_coupling_model


class _Captured(Exception):
    pass


def capture(X, threads: int):
    """The model's arguments, start and phases of ``TSNE().fit(X)`` (stops before optimising)."""
    got = {}

    def stop(model, kwargs, Z0, phases, **opts):
        got.update(kwargs=kwargs, Z0=Z0, phases=phases,
                   opts={k: v for k, v in opts.items() if k != "observe"})
        raise _Captured

    real = coupling.run_map
    coupling.run_map = stop
    try:
        probdr.TSNE(random_state=0, n_jobs=threads).fit(X)
    except _Captured:
        pass
    finally:
        coupling.run_map = real
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="mnistdef1m")
    ap.add_argument("--steps", type=int, nargs=2, default=[60, 60])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    from run import load  # benchmarks/run.py: the benchmark data sets

    X, _ = load(a.data)
    torch.set_num_threads(a.threads)
    t = time.perf_counter()
    got = capture(X, a.threads)
    print(f"probdr from {probdr.__file__}; {X.shape[0]} points; graph and start "
          f"{time.perf_counter() - t:.1f} s")
    ex, main_ = got["phases"]
    phases = [dataclasses.replace(ex, n_iter=a.steps[0]),
              dataclasses.replace(main_, n_iter=a.steps[1])]
    n = sum(a.steps)
    torch.set_num_threads(a.threads)
    for _ in range(a.repeat):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t = time.perf_counter()
        run_map(graph_coupling_model, got["kwargs"], got["Z0"], phases, **got["opts"])
        dt = time.perf_counter() - t
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
        print(f"{n} steps: {dt / n:.3f} s per step, {faults / n:.0f} page faults per step")


if __name__ == "__main__":
    main()
