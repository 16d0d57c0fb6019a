"""Seconds of t-SNE's FFT normaliser (forward and backward) as the embedding grows.

The points are the first two principal coordinates of a benchmark data set, scaled to a given
span (t-SNE's embedding of a million points grows from a few units to a few hundred during the
fit), in their own order and sorted by grid cell. For each span: the grid side G, then the time of
one ``cauchy_log_total`` forward and backward and of its parts (the interpolation stencil, the
charge grids with their FFTs, the gather of the potentials), the best of ``--repeat``, with
glibc's heap reused as in a fit's loop (:func:`probdr._compute.alloc.heap_reuse`)::

    python benchmarks/fft_cost.py --data mnistdef1m --spans 10 100 300 --threads 2
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import probdr._compute.fft as F
from probdr._compute.alloc import heap_reuse


def best(fn, repeat: int) -> float:
    fn()
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="mnistdef1m")
    ap.add_argument("--spans", type=float, nargs="+", default=[10.0, 100.0, 300.0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    from run import load  # benchmarks/run.py: the benchmark data sets

    X, _ = load(a.data)
    torch.set_num_threads(a.threads)
    Z0 = torch.from_numpy(np.ascontiguousarray(X[:, :2], dtype=np.float32))
    Z0 = Z0 - Z0.mean(0)
    print(f"{len(Z0)} points, {a.threads} threads")
    with heap_reuse():  # as in a fit's loop: temporaries reuse the heap, no fresh pages
        for span in a.spans:
            measure(Z0, span, a.repeat)


def measure(Z0: torch.Tensor, span: float, repeat: int) -> None:
    """Print the times at one span, in the data's order and sorted by grid cell."""
    Z = Z0 * (span / float((Z0.max(0).values - Z0.min(0).values).max()))
    grid = F.Grid2D(Z)
    cell = torch.floor((Z - Z.min(0).values) / grid.h).long()
    by_cell = Z[torch.argsort(cell[:, 0] * grid.G + cell[:, 1])]
    for order, Zo in (("data order", Z), ("by grid cell", by_cell)):
        Zo = Zo.contiguous()
        c = Zo.mean(0)
        g = F.Grid2D(Zo)
        grids = F._potential_grids(g, Zo, c)

        def step(Zo=Zo):
            Zg = Zo.clone().requires_grad_()
            F.cauchy_log_total(Zg).backward()

        parts = {"stencil": lambda Zo=Zo: F.Grid2D(Zo),
                 "grids": lambda g=g, Zo=Zo, c=c: F._potential_grids(g, Zo, c),
                 "gather": lambda g=g, grids=grids: g.gather(grids)}
        print(f"span {span:6.0f}  G {grid.G:5d}  {order:12s}  total {best(step, repeat):.3f} s  "
              + "  ".join(f"{k} {best(f, repeat):.3f}" for k, f in parts.items()), flush=True)


if __name__ == "__main__":
    main()
