"""Fits on a busy machine: each one idle and beside one CPU-bound process, in one run.

A user's machine is rarely idle (a browser, a notebook kernel, another fit). This study runs each
fit of :mod:`suite` (its own process, warm, at the defaults, on all cores) twice: on the idle
machine, then with ``python -c "while True: pass"`` running beside it, and reports the ratio of
the two times. ``--fixed-threads`` runs probdr with ``PROBDR_ADAPTIVE_THREADS=0`` (always
``n_jobs`` threads: the library before :mod:`probdr._compute.threads`). ``--commands`` times
what a user types instead: the README's first command, a 300-row CSV through the command line
and ``probdr.anndata.embed`` on scanpy's ``pbmc68k_reduced``.

    python benchmarks/contention.py --data digits --methods probdr-tsne opentsne
    python benchmarks/contention.py --data mnistdef70k --methods probdr-tsne opentsne probdr-umap umap-learn
    python benchmarks/contention.py --commands

Results are appended to ``benchmarks/results/contention.jsonl``. The idle runs wait for a load
average below 1.5 (reported with each run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import suite

RESULTS = suite.HERE / "results" / "contention.jsonl"
README_COMMAND = ["probdr", "embed", "--method", "tsne", "--data", "digits"]
ANNDATA = ("import time, scanpy as sc, probdr.anndata as pa; a = sc.datasets.pbmc68k_reduced(); "
           "t = time.perf_counter(); pa.embed(a, 'umap', neighbors_key='neighbors'); "
           "print('RESULT', time.perf_counter() - t)")


@contextmanager
def busy(on: bool):
    """One CPU-bound process for the duration of the block (when ``on``)."""
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if on else None
    try:
        if p is not None:
            time.sleep(1.0)
        yield
    finally:
        if p is not None:
            p.kill()
            p.wait()


def wait_idle(limit: float = 1.5, patience: float = 300.0) -> float:
    """The 1-minute load average once it is below ``limit`` (or after ``patience`` seconds)."""
    t0 = time.monotonic()
    while os.getloadavg()[0] >= limit and time.monotonic() - t0 < patience:
        time.sleep(5.0)
    return os.getloadavg()[0]


def _timed(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if out.returncode:
        raise RuntimeError(f"{cmd}: {out.stderr.strip()[-400:]}")
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    return float(line.split()[1]) if line else wall


def commands(env: dict) -> dict[str, list[str]]:
    """What a user types: the README's first command, a CSV through the CLI, AnnData."""
    folder = Path(tempfile.mkdtemp(prefix="probdr-contention-"))
    from sklearn.datasets import load_digits

    X = load_digits().data[:300]
    csv = folder / "rows300.csv"
    csv.write_text("\n".join(",".join(f"{v:g}" for v in row) for row in X) + "\n")
    return {"readme-command-1": README_COMMAND + ["--out", str(folder / "z.npy"), "--plot",
                                                  str(folder / "z.png"), "--quiet"],
            "cli-csv-300": ["probdr", "embed", "--data", str(csv), "--out",
                            str(folder / "c.npy"), "--quiet"],
            "anndata-pbmc68k-umap": [sys.executable, "-c", ANNDATA]}


def record(r: dict) -> None:
    print(json.dumps(r), flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with open(RESULTS, "a") as f:
        f.write(json.dumps(r) + "\n")


def run_fits(a, meta: dict) -> None:
    opts = argparse.Namespace(timeout=a.timeout, max_rss=16.0, sample=5000)
    for data in a.data:
        suite.load(data)  # generated and cached before any timed fit
        for method in a.methods:
            times = {}
            for loaded in (False, True):
                load = wait_idle() if not loaded else os.getloadavg()[0]
                with busy(loaded):
                    r = suite.run_child(method, data, 0, opts)
                times[loaded] = r.get("wall_s")
                record({**meta, "data": data, "method": method, "busy": loaded,
                        "load_before": load, **{k: r.get(k) for k in
                                                ("status", "wall_s", "trust15", "knn5")}})
            if times[False] and times[True]:
                print(f"{data} {method}: idle {times[False]:.1f} s, busy {times[True]:.1f} s, "
                      f"ratio {times[True] / times[False]:.2f}", flush=True)


def run_commands(a, meta: dict, env: dict) -> None:
    for name, cmd in commands(env).items():
        times = {}
        for loaded in (False, True):
            load = wait_idle() if not loaded else os.getloadavg()[0]
            with busy(loaded):
                times[loaded] = _timed(cmd, env)
            record({**meta, "command": name, "busy": loaded, "load_before": load,
                    "wall_s": times[loaded]})
        print(f"{name}: idle {times[False]:.1f} s, busy {times[True]:.1f} s, "
              f"ratio {times[True] / times[False]:.2f}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", nargs="+", default=["digits"], choices=list(suite.DATASETS))
    ap.add_argument("--methods", nargs="+", default=["probdr-tsne", "opentsne"],
                    choices=list(suite.METHODS))
    ap.add_argument("--commands", action="store_true", help="time the user's commands instead")
    ap.add_argument("--fixed-threads", action="store_true",
                    help="probdr on n_jobs threads whatever the load (PROBDR_ADAPTIVE_THREADS=0)")
    ap.add_argument("--timeout", type=float, default=1800.0)
    a = ap.parse_args(argv)
    if a.fixed_threads:
        os.environ["PROBDR_ADAPTIVE_THREADS"] = "0"
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    meta = {"date": time.strftime("%Y-%m-%d"), "machine": suite.machine(),
            "probdr": suite.versions()["probdr"], "adaptive_threads": not a.fixed_threads}
    if a.commands:
        run_commands(a, meta, env)
    else:
        run_fits(a, meta)


if __name__ == "__main__":
    main()
