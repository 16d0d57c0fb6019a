"""DistR on digits against the sequential pipelines: homogeneity of the induced clustering.

* DistR: SEA input affinity (perplexity 30, with self-loops, scaled to mean 1), Student
  prototype affinity, generalised-KL srGW, conditional-gradient T-steps, k-means-initialised
  coupling; clusters = argmax_k T_ik (dead prototypes simply receive no sample).
* Clustering -> DR: k-means (k = number of prototypes) on the data.
* DR -> clustering: k-means on probdr's t-SNE embedding (`probdr.TSNE`, perplexity 30).

Metrics (scikit-learn): homogeneity (every cluster holds one class: the DistR paper's main
clustering score), NMI and ARI against the digit classes. The thesis has no DistR table (its
ch. 5 has no experiments), so no published numbers are quoted.

    python benchmarks/ot_distr.py --prototypes 10 20 50 --seeds 0
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ot_common import cached_tsne, command_line, machine, table, write_section  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prototypes", type=int, nargs="+", default=[10, 20, 50])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--n-outer", type=int, default=30)
    ap.add_argument("--n", type=int, default=None, help="subsample of digits (default: all)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score, homogeneity_score
    from sklearn.metrics import normalized_mutual_info_score as nmi

    from probdr import datasets
    from probdr.estimators.distr import DistR

    t0 = time.time()
    X, y = datasets.load("digits", n_samples=args.n, random_state=0)
    scores: dict[tuple, list] = {}
    for seed in args.seeds:
        # the t-SNE embedding of the PCA-50 digits, shared with benchmarks/ot_snekhorn.py
        Xp = X - X.mean(0)
        U, S, _ = np.linalg.svd(Xp, full_matrices=False)
        Z_tsne, t_tsne = cached_tsne(U[:, :50] * S[:50], seed,
                                     f"digits{'' if args.n is None else args.n}")
        for k in args.prototypes:
            t = time.time()
            m = DistR(n_prototypes=k, perplexity=30, n_outer=args.n_outer, random_state=seed)
            m.fit(X)
            t_d = time.time() - t
            lab = {"DistR": (m.labels_, t_d, m.n_effective_)}
            t = time.time()
            km = KMeans(k, n_init=10, random_state=seed).fit_predict(X)
            lab["k-means on X (clustering -> DR)"] = (km, time.time() - t, len(set(km)))
            t = time.time()
            kt = KMeans(k, n_init=10, random_state=seed).fit_predict(Z_tsne)
            lab["k-means on t-SNE (DR -> clustering)"] = (kt, time.time() - t + t_tsne,
                                                          len(set(kt)))
            for name, (L, sec, neff) in lab.items():
                s = (homogeneity_score(y, L), nmi(y, L), adjusted_rand_score(y, L), neff, sec)
                scores.setdefault((k, name), []).append(s)
                print(k, seed, name, [round(v, 4) for v in s], flush=True)
    rows = []
    for (k, name), v in scores.items():
        a = np.array(v)
        def sd(c, a=a):
            return f" ± {a[:, c].std():.3f}" if len(a) > 1 else ""
        rows.append([k, name, f"{a[:, 0].mean():.3f}{sd(0)}", f"{a[:, 1].mean():.3f}{sd(1)}",
                     f"{a[:, 2].mean():.3f}{sd(2)}", f"{a[:, 3].mean():.0f}",
                     f"{a[:, 4].mean():.0f}"])
    hdr = ["prototypes", "method", "homogeneity", "NMI", "ARI", "clusters used", "wall (s)"]
    body = f"""## DistR on digits (homogeneity of the induced clustering)

Command: `{command_line()}` (total {time.time() - t0:.0f} s; {machine()}).

scikit-learn digits (n = {len(y)}, 64 features), seeds {args.seeds}; DistR: SEA (perplexity 30)
-> Student prototypes in R^2, generalised KL, {args.n_outer} BCD rounds of 20 Adam steps + one
conditional-gradient srGW solve, coupling initialised by k-means (one run). k-means baselines:
`KMeans(k, n_init=10)`. The t-SNE of the DR -> clustering pipeline is `probdr.TSNE` on the
PCA-50 digits (the run of `benchmarks/ot_snekhorn.py`, cached in `out/`; its fit time is
included). No published DistR numbers exist in the provided sources (thesis ch. 5 has no
experiments).

{table(hdr, rows)}
"""
    print(body)
    if not args.no_write:
        write_section("ot_distr", body)


if __name__ == "__main__":
    main()
