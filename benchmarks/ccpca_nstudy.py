"""How many Monte Carlo graphs does ccPCA need? (spec graph-coupling-and-probdr.md §7.3: "[002]
suggests about 100 Monte Carlo graphs"; ``probdr.init.ccpca_embedding``'s docstring: "about 100
suffice for n = 10 000").

For each data set, the D-prior input graph law at perplexity 30
(``build_input_graph(X, "D", "entropic", perplexity=30)``) is sampled N times; the ccPCA matrix
M_N = (1/N) sum_l U^l U^l^T X (:func:`probdr.init.cc_mean_average`) gives the 2-D scores
Z_N = pca_scores(M_N, 2). Against a reference Z_ref from N_ref independent draws (own
generator), we report

* the relative Gram error  ||Z_N Z_N^T - Z_ref Z_ref^T||_F / ||Z_ref Z_ref^T||_F (sign- and
  rotation-free), mean and max over seeds;
* the largest principal angle (degrees) between span(Z_N) and span(Z_ref) in R^n;
* a fitted power law err ~ a N^-b (least squares on log-log, N >= 3) and, since the reference has
  its own Monte Carlo error, the "noise-corrected" error sqrt(max(err^2 - a^2/N_ref, 0)) (for a
  linear estimator err^2 ~ a^2 (1/N + 1/N_ref));
* the smallest N whose mean (corrected) error is below 5 % and 1 %.

Data: ``digits`` (1797 x 64) and ``mnist5k`` (5000 x 784, PCA to 50 dimensions as in
``benchmarks/ccpca_rnx.py``; ``--mnist-n`` subsamples).

    python benchmarks/ccpca_nstudy.py
    python benchmarks/ccpca_nstudy.py --datasets digits --seeds 0 1 2 3 4 --n-ref 10000
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ot_common import ROOT, command_line, machine, table, write_section  # noqa: E402

RESULTS = os.path.join(ROOT, "docs", "ccpca-results.md")


def load(name: str, n: int | None, seed: int = 0) -> np.ndarray:
    from probdr import datasets

    X, _ = datasets.load(name, n_samples=n, random_state=seed)
    X = np.asarray(X, dtype=np.float64)
    if X.shape[0] > (n or X.shape[0]):
        X = X[np.random.default_rng(seed).permutation(X.shape[0])[:n]]
    if name == "mnist5k" and X.shape[1] > 50:
        X = X - X.mean(0)
        U, S, _ = np.linalg.svd(X, full_matrices=False)
        X = U[:, :50] * S[:50]
    return X


def gram_error(Z: torch.Tensor, W: torch.Tensor) -> float:
    """||Z Z^T - W W^T||_F / ||W W^T||_F without forming n x n matrices."""
    zz = (Z.T @ Z).pow(2).sum()
    ww = (W.T @ W).pow(2).sum()
    zw = (Z.T @ W).pow(2).sum()
    return float(torch.sqrt((zz + ww - 2 * zw).clamp_min(0)) / torch.sqrt(ww))


def max_angle(Z: torch.Tensor, W: torch.Tensor) -> float:
    from scipy.linalg import subspace_angles

    return float(np.degrees(subspace_angles(Z.numpy(), W.numpy()).max()))


def running_scores(X, law, checkpoints, seed, q=2, chunk=50):
    """Z_N for each N in ``checkpoints`` from one stream of draws (generator seeded ``seed``);
    also the mean number of components per draw."""
    from probdr.init import cc_means, pca_scores
    from probdr.laws.components import sample_memberships

    g = torch.Generator().manual_seed(seed)
    acc = torch.zeros_like(X)
    out, done, ncomp = {}, 0, []
    for N in sorted(checkpoints):
        while done < N:
            m = sample_memberships(law, min(chunk, N - done), g)
            for r in m:
                acc += cc_means(X, r)
                ncomp.append(int(r.max()) + 1)
            done += m.shape[0]
        out[N] = pca_scores(acc / N, q)
    return out, float(np.mean(ncomp))


def study(X: np.ndarray, Ns, seeds, n_ref: int, perplexity: float = 30.0, ref_seed: int = 10_000):
    """Returns (rows per N: list of (errors, angles) over seeds), reference info."""
    from probdr.init import pca_scores
    from probdr.input.graph import build_input_graph

    Xt = torch.as_tensor(X, dtype=torch.float64)
    law = build_input_graph(Xt, "D", "entropic", perplexity=perplexity)
    ref, ncomp = running_scores(Xt, law, [n_ref], ref_seed)
    Zref = ref[n_ref]
    Zpca = pca_scores(Xt, 2)
    res = {N: ([], []) for N in Ns}
    for s in seeds:
        Zs, _ = running_scores(Xt, law, Ns, s)
        for N in Ns:
            res[N][0].append(gram_error(Zs[N], Zref))
            res[N][1].append(max_angle(Zs[N], Zref))
    extra = {"mean_components": ncomp, "pca_err": gram_error(Zpca, Zref),
             "pca_angle": max_angle(Zpca, Zref)}
    return res, extra


def fit_power(Ns, errs):
    Ns = np.asarray(Ns, float)
    e = np.asarray(errs, float)
    keep = Ns >= 3
    b, loga = np.polyfit(np.log(Ns[keep]), np.log(e[keep]), 1)
    return math.exp(loga), -b


def first_below(Ns, errs, thr):
    for N, e in zip(Ns, errs, strict=True):
        if e < thr:
            return str(N)
    return f"> {Ns[-1]}"


def report(name, X, res, extra, Ns, n_ref, seconds):
    mean = [float(np.mean(res[N][0])) for N in Ns]
    a, b = fit_power(Ns, mean)
    # reference noise: err^2 ~ c (1/N + 1/N_ref) with c fitted on the raw errors at N >= 3
    c = float(np.median([m ** 2 / (1 / N + 1 / n_ref) for N, m in zip(Ns, mean, strict=True) if N >= 3]))
    corr = [math.sqrt(max(m ** 2 - c / n_ref, 0.0)) for m in mean]
    rows = []
    for N, m, k in zip(Ns, mean, corr, strict=True):
        errs, angs = res[N]
        rows.append([N, 100 * m, 100 * float(np.max(errs)), 100 * k, float(np.mean(angs)),
                     float(np.max(angs))])
    body = [f"**{name}** ({X.shape[0]} x {X.shape[1]}; D prior, perplexity 30; "
            f"{len(res[Ns[0]][0])} seeds; reference N_ref = {n_ref} independent draws; "
            f"mean components per draw {extra['mean_components']:.1f}; {seconds:.0f} s)",
            "",
            table(["N", "Gram error % (mean)", "Gram error % (max)",
                   "noise-corrected % (mean)", "max principal angle deg (mean)",
                   "max principal angle deg (max)"], rows),
            "",
            f"Fit on the mean raw error (N >= 3): err ~ {a:.3f} N^-{b:.2f}. "
            f"Reference-noise floor sqrt(c/N_ref) = {100 * math.sqrt(c / n_ref):.2f} %. "
            f"First N below 5 %: raw {first_below(Ns, mean, 0.05)}, corrected "
            f"{first_below(Ns, corr, 0.05)}; below 1 %: raw {first_below(Ns, mean, 0.01)}, "
            f"corrected {first_below(Ns, corr, 0.01)}. For scale: plain PCA is at "
            f"{100 * extra['pca_err']:.1f} % Gram error ({extra['pca_angle']:.1f} deg) from "
            f"the ccPCA reference.", ""]
    return "\n".join(body), dict(a=a, b=b, mean=mean, corr=corr)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["digits", "mnist5k"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--N", nargs="+", type=int, default=[1, 3, 10, 30, 100, 300, 1000])
    ap.add_argument("--n-ref", type=int, default=3000)
    ap.add_argument("--mnist-N-max", type=int, default=300,
                    help="largest N for mnist5k (its draws cost ~25x digits')")
    ap.add_argument("--mnist-n-ref", type=int, default=1000)
    ap.add_argument("--mnist-n", type=int, default=None)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    parts, summary = [], []
    for name in args.datasets:
        t = time.time()
        if name == "mnist5k":
            X = load(name, args.mnist_n)
            Ns = [N for N in args.N if N <= args.mnist_N_max]
            n_ref = args.mnist_n_ref
        else:
            X = load(name, None)
            Ns, n_ref = list(args.N), args.n_ref
        res, extra = study(X, Ns, args.seeds, n_ref)
        text, fit = report(name, X, res, extra, Ns, n_ref, time.time() - t)
        print(text, flush=True)
        parts.append(text)
        summary.append((name, fit, Ns))
    verdict = []
    for name, fit, Ns in summary:
        i = Ns.index(100) if 100 in Ns else None
        if i is not None:
            verdict.append(f"{name}: at N = 100 the mean Gram error is {100 * fit['mean'][i]:.1f} % "
                           f"(noise-corrected {100 * fit['corr'][i]:.1f} %), decay exponent "
                           f"{fit['b']:.2f} (Monte Carlo rate 0.5)")
    body = "\n".join([
        "### How many Monte Carlo graphs ccPCA needs [ccpca-nstudy]", "",
        "Command: `" + command_line() + "`", "", "Machine: " + machine(), "",
        "Relative Gram error ||Z_N Z_N^T - Z_ref Z_ref^T||_F / ||Z_ref Z_ref^T||_F (in %) of "
        "the 2-D ccPCA scores from N graph draws against an independent large-N reference, "
        "and the largest principal angle between the two 2-D column spans. 'Noise-corrected' "
        "removes the reference's own Monte Carlo error, assuming err^2 = c (1/N + 1/N_ref). "
        "Script: `benchmarks/ccpca_nstudy.py`.", "",
        *parts,
        "Summary: " + "; ".join(verdict) + ".", ""])
    if not args.no_write:
        write_section("ccpca-nstudy", body, path=RESULTS)
    return summary


if __name__ == "__main__":
    main()
