"""Fits in two threads of one process against the same fits one after the other, in one run.

A service answers two requests at once; a scheduler runs two tasks in one worker's threads. This
study fits a t-SNE and a UMAP (or two t-SNEs) of the same data in one process, first one after
the other, then in two threads started together, checks that every array is the same, and
reports the two wall times and their ratio (threads / sequential; 1 means the threads gained
nothing over running one after the other, 0.5 that they used the cores twice as well).

    python benchmarks/concurrency.py --data mnist5k
    python benchmarks/concurrency.py --data mnist5k --pair tsne tsne

Results are appended to ``benchmarks/results/concurrency.jsonl``. The run waits for a load
average below 1.5 (reported) and warms up with a small fit first.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

import numpy as np
import suite

import probdr

RESULTS = suite.HERE / "results" / "concurrency.jsonl"
MAKERS = {"tsne": lambda s: probdr.TSNE(random_state=s),
          "umap": lambda s: probdr.UMAP(random_state=s)}


def wait_idle(limit: float = 1.5, patience: float = 300.0) -> float:
    """The 1-minute load average once it is below ``limit`` (or after ``patience`` seconds)."""
    t0 = time.monotonic()
    while os.getloadavg()[0] >= limit and time.monotonic() - t0 < patience:
        time.sleep(5.0)
    return os.getloadavg()[0]


def in_threads(jobs):
    out = [None] * len(jobs)
    barrier = threading.Barrier(len(jobs))

    def run(i):
        barrier.wait()
        out[i] = jobs[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="mnist5k", help="a data set of benchmarks/suite.py")
    ap.add_argument("--pair", nargs=2, default=["tsne", "umap"], choices=sorted(MAKERS))
    args = ap.parse_args(argv)
    X, _ = suite.load(args.data)
    X = np.asarray(X, dtype=np.float64)
    jobs = [lambda m=m, s=s: MAKERS[m](s).fit_transform(X) for s, m in enumerate(args.pair)]
    probdr.UMAP(random_state=0).fit(X[:500])  # warm
    load = wait_idle()
    t0 = time.perf_counter()
    alone = [job() for job in jobs]
    t_seq = time.perf_counter() - t0
    t0 = time.perf_counter()
    together = in_threads(jobs)
    t_par = time.perf_counter() - t0
    same = all(np.array_equal(a, b) for a, b in zip(alone, together, strict=True))
    row = dict(data=args.data, n=int(X.shape[0]), pair=args.pair, load_before=round(load, 2),
               sequential_s=round(t_seq, 2), threads_s=round(t_par, 2),
               ratio=round(t_par / t_seq, 3), same_arrays=same, cores=os.cpu_count())
    print(json.dumps(row))
    with open(RESULTS, "a") as f:
        f.write(json.dumps(row) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
