"""GW-MDS reproduction: Tables I-II protocol of Eufrazio, Montesuma & Cavalcante (Pearson
correlation, eq. (7), between input and embedding pairwise distances over pairs i<j).

Table I (Euclidean d_X): PCA, scikit-learn metric MDS (SMACOF, random init, 4 restarts -- the
long-standing scikit-learn default), GW-MDS (PCA init, [G]'s learning rate 0.1).
Table II (geodesic d_X, shortest paths on the symmetrised kNN graph): Isomap and geodesic
GW-MDS with the same k; rho is computed against the geodesic distances.

Data (no downloads): the severed sphere of scikit-learn's manifold example, make_s_curve and
make_swiss_roll (raw coordinates, which reproduce [G]'s PCA value 0.970 on the S-curve), and
load_digits (/16) as the stand-in for MNIST. [G] does not give sample sizes; n points each.

    python benchmarks/ot_gwmds.py --n 300 --n-iter 150 --seeds 0
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ot_common import command_line, machine, table, write_section  # noqa: E402

PUBLISHED_I = {"digits": ("MNIST", 0.643, 0.646, 0.523), "sphere": ("Sphere", 0.781, 0.826, 0.817),
               "s_curve": ("S-Curve", 0.949, 0.966, 0.970), "swiss_roll": ("-", None, None, None)}
PUBLISHED_II = {"digits": ("MNIST", 0.7887, 0.7697), "swiss_roll": ("Swiss roll", 0.9993, 0.9986),
                "s_curve": ("S-Curve", 0.9993, 0.9988)}


def severed_sphere(n: int, seed: int) -> np.ndarray:
    """scikit-learn's 'severed sphere' example: poles cut off and a thin slice removed."""
    rng = np.random.RandomState(seed)
    out = []
    while sum(len(o) for o in out) < n:
        p = rng.rand(4 * n) * (2 * np.pi - 0.55)
        t = rng.rand(4 * n) * np.pi
        keep = (t < np.pi - np.pi / 8) & (t > np.pi / 8)
        out.append(np.c_[np.sin(t[keep]) * np.cos(p[keep]), np.sin(t[keep]) * np.sin(p[keep]),
                         np.cos(t[keep])])
    return np.concatenate(out)[:n]


def load(name: str, n: int, seed: int) -> np.ndarray:
    from sklearn import datasets

    if name == "sphere":
        return severed_sphere(n, seed)
    if name == "s_curve":
        return datasets.make_s_curve(n, random_state=seed)[0]
    if name == "swiss_roll":
        return datasets.make_swiss_roll(n, random_state=seed)[0]
    if name == "digits":
        X = datasets.load_digits().data / 16.0
        idx = np.random.default_rng(seed).choice(len(X), n, replace=False)
        return X[idx]
    raise ValueError(name)


def rho(D, Z):
    from probdr.input.graph import euclidean_distance_matrix
    from probdr.ot.costs import pearson_distance_correlation

    return pearson_distance_correlation(D, euclidean_distance_matrix(Z))


def run_euclidean(name, n, seed, n_iter):
    from sklearn.decomposition import PCA
    from sklearn.manifold import MDS

    from probdr.estimators.gwmds import GWMDS
    from probdr.input.graph import euclidean_distance_matrix

    X = load(name, n, seed)
    D = euclidean_distance_matrix(X)
    res = {}
    t = time.time()
    res["PCA"] = (rho(D, PCA(2).fit_transform(X)), time.time() - t)
    t = time.time()
    Z = MDS(2, n_init=4, init="random", max_iter=300, random_state=seed).fit_transform(X)
    res["MDS"] = (rho(D, Z), time.time() - t)
    t = time.time()
    m = GWMDS(n_iter=n_iter, learning_rate=0.1, random_state=seed)
    m.fit(X)
    res["GW-MDS"] = (m.distance_correlation_, time.time() - t)
    return res


def run_geodesic(name, n, seed, n_iter, k):
    from sklearn.manifold import Isomap

    from probdr.estimators.gwmds import GWMDS
    from probdr.input.graph import geodesic_distances

    X = load(name, n, seed)
    D, _ = geodesic_distances(X, k)
    res = {}
    t = time.time()
    res["Isomap"] = (rho(D, Isomap(n_neighbors=k).fit_transform(X)), time.time() - t)
    t = time.time()
    m = GWMDS(geodesic=True, n_neighbors=k, n_iter=n_iter, random_state=seed)
    m.fit(X)
    res["GW-MDS (geodesic)"] = (m.distance_correlation_, time.time() - t)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--n-iter", type=int, default=150)
    ap.add_argument("--k", type=int, default=5,
                    help="kNN graph for the geodesic table (sklearn Isomap's default)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--euclidean", nargs="*", default=["sphere", "s_curve", "swiss_roll",
                                                       "digits"])
    ap.add_argument("--geodesic", nargs="*", default=["swiss_roll", "s_curve", "digits"])
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.time()

    def agg(runs, method):
        v = np.array([r[method][0] for r in runs])
        s = np.array([r[method][1] for r in runs])
        return v.mean(), (v.std() if len(v) > 1 else float("nan")), s.mean()

    rows1 = []
    for name in args.euclidean:
        runs = [run_euclidean(name, args.n, s, args.n_iter) for s in args.seeds]
        pub = PUBLISHED_I[name]
        for method, pidx in (("PCA", 3), ("MDS", 1), ("GW-MDS", 2)):
            m, sd, sec = agg(runs, method)
            p = pub[pidx]
            rows1.append([name, method, m, sd if len(args.seeds) > 1 else "-", f"{sec:.1f}",
                          f"{pub[0]}: {p}" if p is not None else "-"])
            print(rows1[-1], flush=True)
    rows2 = []
    for name in args.geodesic:
        runs = [run_geodesic(name, args.n, s, args.n_iter, args.k) for s in args.seeds]
        pub = PUBLISHED_II[name]
        for method, pidx in (("Isomap", 2), ("GW-MDS (geodesic)", 1)):
            m, sd, sec = agg(runs, method)
            rows2.append([name, method, m, sd if len(args.seeds) > 1 else "-", f"{sec:.1f}",
                          f"{pub[0]}: {pub[pidx]}"])
            print(rows2[-1], flush=True)

    hdr = ["data", "method", "rho (mean)", "rho (s.d.)", "wall (s)", "published [G]"]
    body = f"""## GW-MDS (Tables I-II protocol)

Command: `{command_line()}` (total {time.time() - t0:.0f} s; {machine()}).

n = {args.n} points per data set, seeds {args.seeds}; GW-MDS: {args.n_iter} iterations of
(exact GW plan by POT's conditional gradient, warm-started; one gradient step, learning rate 0.1
on the per-point gradient), PCA initialisation, alignment by the final plan. rho: Pearson
correlation of the pairwise distances over pairs i<j. MNIST -> scikit-learn digits (/16);
the Faces data set is not available offline and is omitted.

### Table I: Euclidean distances

{table(hdr, rows1)}

### Table II: geodesic distances (k = {args.k} neighbours for both methods; rho against geodesic d_X)

{table(hdr, rows2)}
"""
    print(body)
    if not args.no_write:
        write_section("ot_gwmds", body)


if __name__ == "__main__":
    main()
