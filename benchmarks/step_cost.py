"""Seconds per optimisation step of TSNE at scale, the input graph built once.

The estimator is fitted up to its optimisation (neighbours, affinities, initialisation); then
``--steps E M`` steps are timed: E with early exaggeration and M without, from the same start,
in one ``run_map`` call, as ``fit`` runs them. Repeat with ``--repeat`` (the graph is reused).
To compare two versions of the code on the same machine, run it from each checkout in turn::

    python benchmarks/step_cost.py --data mnistdef1m --steps 60 60
    PYTHONPATH=/path/to/other/checkout python benchmarks/step_cost.py --data mnistdef1m --steps 60 60

Page faults (``ru_minflt``) are reported with the time: fresh pages cost several microseconds
each on a virtual machine. ``--parts`` also times the pieces of the step (the edge pass and its
gathers and sums, the FFT normaliser and its stencil, grids and gather), each with its page faults
(the pieces nest: the edge pass contains its gathers and sums).
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import time

import torch

import probdr
import probdr._compute.edges as edges
import probdr._compute.fft as fft
import probdr.estimators.coupling as coupling
from probdr.infer import run_map
from probdr.models.coupling import graph_coupling_model


class _Captured(Exception):
    pass


def capture(X, threads: int, dof="1"):
    """The model's arguments, start and phases of ``TSNE(dof=dof).fit(X)`` (stops before
    optimising); ``dof="learn"`` learns the kernel's degrees of freedom."""
    got = {}

    def stop(model, kwargs, Z0, phases, **opts):
        got.update(kwargs=kwargs, Z0=Z0, phases=phases,
                   opts={k: v for k, v in opts.items() if k != "observe"})
        raise _Captured

    real = coupling.run_map
    coupling.run_map = stop
    try:
        probdr.TSNE(random_state=0, n_jobs=threads,
                    dof=dof if dof == "learn" else float(dof)).fit(X)
    except _Captured:
        pass
    finally:
        coupling.run_map = real
    return got


#: (module, name) of the pieces ``--parts`` times; ``Class.method`` for autograd functions
PARTS = [(edges, "_EdgeLogKernelSum.forward"), (edges, "edge_diffs"),
         (edges, "edge_value"), (edges, "_row_and_col_sums"),
         (fft, "_KernelLogTotalFFT.forward"), (fft, "_stencil"), (fft, "_potential_grids"),
         (fft, "Grid2D.gather")]


def time_parts(totals: dict) -> None:
    """Wrap the pieces of ``PARTS`` so that each call adds its seconds and page faults to
    ``totals[name]``."""
    def wrap(f, name):
        def timed(*args, **kwargs):
            f0, t = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
            out = f(*args, **kwargs)
            acc = totals.setdefault(name, [0.0, 0])
            acc[0] += time.perf_counter() - t
            acc[1] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
            return out
        return timed

    for module, name in PARTS:
        owner, _, attr = name.rpartition(".")
        obj = getattr(module, owner) if owner else module
        f = getattr(obj, attr)
        wrapped = wrap(f, name)
        setattr(obj, attr, staticmethod(wrapped) if attr in ("forward", "backward") else wrapped)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="mnistdef1m")
    ap.add_argument("--steps", type=int, nargs=2, default=[60, 60])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--parts", action="store_true", help="time the pieces of the step too")
    ap.add_argument("--dof", default="1", help="the Student kernel's dof, or 'learn'")
    a = ap.parse_args()
    from run import load  # benchmarks/run.py: the benchmark data sets

    X, _ = load(a.data)
    torch.set_num_threads(a.threads)
    t = time.perf_counter()
    got = capture(X, a.threads, a.dof)
    print(f"probdr from {probdr.__file__}; {X.shape[0]} points; graph and start "
          f"{time.perf_counter() - t:.1f} s")
    ex, main_ = got["phases"]
    phases = [dataclasses.replace(ex, n_iter=a.steps[0]),
              dataclasses.replace(main_, n_iter=a.steps[1])]
    n = sum(a.steps)
    torch.set_num_threads(a.threads)
    totals: dict = {}
    if a.parts:
        time_parts(totals)
    for _ in range(a.repeat):
        totals.clear()
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t = time.perf_counter()
        run_map(graph_coupling_model, got["kwargs"], got["Z0"], phases, **got["opts"])
        dt = time.perf_counter() - t
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
        print(f"{n} steps: {dt / n:.3f} s per step, {faults / n:.0f} page faults per step")
        for name, (sec, flt) in totals.items():
            print(f"  {name:28s} {sec / n:.3f} s per step, {flt / n:.0f} page faults per step")


if __name__ == "__main__":
    main()
