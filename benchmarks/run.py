"""Side-by-side benchmark: probdr presets vs openTSNE and umap-learn.

Each (method, data set, seed) runs in its own subprocess so that wall time and peak memory (peak
RSS of that process, imports included) are its own. Quality: trustworthiness@15 (on a 5000-point
subsample when n > 5000), leave-one-out 5-NN accuracy, R_n(K) at K = 15 and n/4 and the labels'
silhouette in the embedding (cluster separation; on a 5000-point subsample when n > 5000).
``tsne-dof0.5`` is t-SNE with a heavier-tailed kernel, ``tsne-learn`` learns the kernel's dof
by MAP (the learned value is in the table's dof column); both are compared with ``tsne``. Results are printed as a Markdown table, with ratios to the reference
library of the same method, and optionally written to a Markdown file.

    python benchmarks/run.py --data digits --methods tsne opentsne umap umap-learn --seeds 0 1 2 \
        --out docs/benchmarks.md

``mnistdef70k``, ``mnistdef1m`` (any size: ``mnistdef<N>``, ``k``/``m`` suffixes): deformed MNIST
projected to 50 PCs (:func:`probdr.datasets.mnist_deformed`), generated once by the parent and
cached as ``.npy`` in ``$PROBDR_BENCH_CACHE`` (default ``/tmp/probdr-bench``). Each child also
reports whether numba was imported in its process (probdr's path must not need it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
from hardware import cpu_name

METHODS = ("tsne", "umap", "largevis", "sne", "opentsne", "umap-learn", "tsne-h3",
           "tsne-dof0.5", "tsne-learn")
REFERENCE = {"tsne": "opentsne", "tsne-h3": "opentsne", "umap": "umap-learn", "largevis": "umap-learn",
             "tsne-dof0.5": "tsne", "tsne-learn": "tsne"}


def _size(text: str) -> int:
    mult = {"k": 1000, "m": 1_000_000}.get(text[-1:].lower(), 1)
    return int(float(text[:-1] if mult > 1 else text) * mult)


def _cached_mnistdef(name: str):
    cache = os.environ.get("PROBDR_BENCH_CACHE", "/tmp/probdr-bench")
    fx, fy = os.path.join(cache, name + "_X.npy"), os.path.join(cache, name + "_y.npy")
    if not os.path.exists(fy):
        from probdr import datasets

        os.makedirs(cache, exist_ok=True)
        X, y = datasets.load("mnist_deformed", n_samples=_size(name[len("mnistdef"):]))
        np.save(fx, np.ascontiguousarray(X, dtype=np.float32))
        np.save(fy, y)
    return np.load(fx).astype(np.float64), np.load(fy)


def load(name: str, seed: int = 0):
    from probdr import datasets

    if name.startswith("mnistdef"):
        return _cached_mnistdef(name)
    if name == "digits":
        return datasets.load("digits")
    if name == "mnist5k":
        return datasets.load("mnist5k", pca=50)
    if name.startswith("blobs"):  # blobs20k, blobs100k: 50-D Gaussian mixture, 10 clusters;
        size, _, data_seed = name[5:].partition("_s")  # blobs100k_s1: another draw (seed 1)
        n = int(float(size.replace("k", "")) * 1000)
        return datasets.load("blobs", n_samples=n, n_features=50, centers=10, cluster_std=4.0,
                             random_state=int(data_seed or 0))
    raise ValueError(name)


def fit(method: str, X, seed: int):
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    if method == "opentsne":
        from openTSNE import TSNE

        return np.asarray(TSNE(n_jobs=threads, random_state=seed, verbose=False).fit(X))
    if method == "umap-learn":
        import umap

        # a random_state makes umap-learn single-threaded; pass none when threads > 1
        return umap.UMAP(random_state=seed if threads == 1 else None,
                         n_jobs=threads).fit_transform(X)
    import probdr

    if method == "tsne-h3":  # TSNE with the FFT grid at openTSNE's node spacing (1/3)
        import probdr._compute.fft

        probdr._compute.fft.GRID_SPACING = 1 / 3
        method = "tsne"
    if method.startswith("tsne-"):  # tsne-dof0.5: a heavier tail; tsne-learn: dof by MAP
        dof = method[len("tsne-"):].removeprefix("dof")
        est = probdr.TSNE(random_state=seed, dof=dof if dof == "learn" else float(dof))
        Z = est.fit_transform(X)
        print("DOF " + json.dumps(float(est.kernel_.dof)))
        return Z
    cls = {"tsne": probdr.TSNE, "umap": probdr.UMAP, "largevis": probdr.LargeVis,
           "sne": probdr.SNE}[method]
    return cls(random_state=seed).fit_transform(X)


def child(method: str, data: str, seed: int, trust_sample: int = 5000) -> None:
    import resource

    from sklearn.metrics import silhouette_score

    X, y = load(data)
    t0 = time.perf_counter()
    Z = fit(method, X, seed)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # GiB (ru_maxrss in KiB)
    from probdr import metrics

    n = len(X)
    numba = "numba" in sys.modules  # before the metrics (they never need it either)
    sub = np.random.default_rng(0).choice(n, min(n, trust_sample), replace=False)
    Xs, Zs = X[sub], Z[sub]
    out = {"method": method, "data": data, "seed": seed, "n": n, "wall_s": wall,
           "peak_rss_gib": peak, "numba": numba,
           "trust15": metrics.trustworthiness(Xs, Zs, 15),
           "knn5": metrics.knn_accuracy(Z, y, 5),
           "rnx15": metrics.rnx(Xs, Zs, 15),
           "rnx_n4": metrics.rnx(Xs, Zs, len(sub) // 4),
           "silhouette": float(silhouette_score(Zs, y[sub]))}
    print("RESULT " + json.dumps(out))


def run_one(method, data, seed, timeout, threads=1, trust_sample=5000):
    cmd = [sys.executable, __file__, "--child", method, data, str(seed),
           "--trust-sample", str(trust_sample)]
    t = str(threads)
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS=t, MKL_NUM_THREADS=t,
               NUMBA_NUM_THREADS=t, OPENBLAS_NUM_THREADS=t)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    dof = None
    for line in p.stdout.splitlines():
        if line.startswith("DOF "):
            dof = json.loads(line[4:])
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:]), dof=dof)
    raise RuntimeError(f"{method} on {data} failed:\n{p.stderr[-3000:]}")


def machine() -> str:
    import torch

    cpu = cpu_name()
    return (f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
            f"torch {torch.__version__}")


def _dofs(rows) -> str:
    """The Student kernel's dof of the TSNE variants (the learned values), else blank."""
    dofs = [r.get("dof") for r in rows if r.get("dof") is not None]
    return ", ".join(f"{d:.3g}" for d in dofs)


def table(rows):
    keys = ["wall_s", "peak_rss_gib", "trust15", "knn5", "rnx15", "rnx_n4", "silhouette"]
    agg = {}
    for r in rows:
        agg.setdefault((r["data"], r["method"]), []).append(r)
    lines = ["| data | n | method | seeds | wall (s) | time ratio | peak RSS (GiB) | trust@15 "
             "| 5-NN acc | R_n(15) | R_n(n/4) | silhouette | dof | numba |", "|" + "---|" * 14]
    means = {k: {kk: float(np.mean([r[kk] for r in v])) for kk in keys} for k, v in agg.items()}
    for (data, method), v in agg.items():
        m = means[(data, method)]
        ref = REFERENCE.get(method)
        ratio = (f"{m['wall_s'] / means[(data, ref)]['wall_s']:.2f}x {ref}"
                 if ref and (data, ref) in means else "")
        sd = float(np.std([r["trust15"] for r in v]))
        lines.append(f"| {data} | {v[0]['n']} | {method} | {len(v)} | {m['wall_s']:.1f} | {ratio} "
                     f"| {m['peak_rss_gib']:.2f} | {m['trust15']:.4f} ± {sd:.4f} | {m['knn5']:.4f} "
                     f"| {m['rnx15']:.3f} | {m['rnx_n4']:.3f} | {m['silhouette']:.3f} "
                     f"| {_dofs(v)} | {'yes' if any(r.get('numba') for r in v) else 'no'} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", nargs=3, metavar=("METHOD", "DATA", "SEED"))
    ap.add_argument("--data", nargs="+", default=["digits"])
    ap.add_argument("--methods", nargs="+", default=["tsne", "opentsne", "umap", "umap-learn"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--threads", type=int, default=1,
                    help="threads for every method (torch, openTSNE n_jobs, umap-learn n_jobs)")
    ap.add_argument("--out", default=None, help="append the table to this Markdown file")
    ap.add_argument("--json", default=None, help="write raw results (JSON lines) here")
    ap.add_argument("--trust-sample", type=int, default=5000,
                    help="points sampled for trustworthiness and R_n (5-NN accuracy uses all)")
    a = ap.parse_args()
    if a.child:
        child(a.child[0], a.child[1], int(a.child[2]), a.trust_sample)
        return
    rows = []
    for data in a.data:
        load(data)  # a generated data set is made (and cached) once, before the timed children
        for seed in a.seeds:
            for method in a.methods:  # interleaved: load drifts hit every method alike
                r = run_one(method, data, seed, a.timeout, a.threads, a.trust_sample)
                print(json.dumps(r), flush=True)
                rows.append(r)
    t = table(rows)
    cmd = "python benchmarks/run.py " + " ".join(sys.argv[1:])
    loadavg = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    text = (f"\n### {', '.join(a.data)} ({time.strftime('%Y-%m-%d')})\n\nMachine: {machine()}; "
            f"{a.threads} thread(s) for every method; load average at the end {loadavg:.1f}.\n"
            f"Command: `{cmd}`\n\n{t}\n")
    print(text)
    if a.json:
        with open(a.json, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    if a.out:
        with open(a.out, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
