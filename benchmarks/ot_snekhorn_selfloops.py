"""Diagnostic for t-SNEkhorn: an independent plain-PyTorch t-SNEkhorn, with and without
the self-loops that the thesis' code keeps in P^se and Q^ds, against probdr's TSNEkhorn and t-SNE
under the thesis protocol (benchmarks/ot_snekhorn.py --protocol thesis) on a digits subsample.

Reference: P^se from probdr.ot.sea.symmetric_entropic (exclude_self as chosen), Q^ds by
symmetric Sinkhorn (warm start, marginal error 1e-5) on the Student kernel, loss KL(P | Q),
envelope gradient (P - Q) . grad C, Adam 0.1 from the seed's N(0, 1) matrix, 3000-step cap. The
single-step rule "relative KL variation < 1e-5" is only checked after step 200: from step 1 it
fires at a turning point of the KL within the first ~80 steps.

    OMP_NUM_THREADS=1 python benchmarks/ot_snekhorn_selfloops.py 400 0
"""

import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ot_snekhorn import fit_thesis, load  # noqa: E402
from sklearn.manifold import trustworthiness  # noqa: E402
from sklearn.metrics import silhouette_score  # noqa: E402

from probdr.ot import symmetric_entropic, symmetric_sinkhorn  # noqa: E402

CAP = 3000


def reference(X, Z0, self_loops, perplexity=30.0):
    logP = symmetric_entropic(torch.as_tensor(X), perplexity, exclude_self=not self_loops,
                              tol=1e-5, return_log=True).double()
    P = logP.exp()
    m = P > 0
    Z = torch.tensor(Z0, requires_grad=True)
    opt = torch.optim.Adam([Z], lr=0.1)
    f, prev = None, None
    for k in range(CAP):
        logK = -torch.log1p(torch.cdist(Z, Z) ** 2)
        if not self_loops:
            logK = logK.masked_fill(torch.eye(len(Z), dtype=torch.bool), -float("inf"))
        with torch.no_grad():
            _, f, _, _ = symmetric_sinkhorn(logK.detach(), f, tol=1e-5)
        logQ = f[:, None] + f[None, :] + logK
        kl = (P[m] * (logP[m] - logQ[m])).sum()
        opt.zero_grad()
        (kl + logQ.exp().sum()).backward()  # gradient (P - Q) . grad C with f fixed
        opt.step()
        if k > 200 and abs(kl.item() - prev) < 1e-5 * abs(prev):
            break
        prev = kl.item()
    return Z.detach().numpy(), k + 1


def main():
    torch.set_num_threads(1)
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    X, y = load("digits", n, seed)
    Z0 = np.random.default_rng(seed).standard_normal((n, 2))

    def show(label, Z, steps, sec):
        print(f"{label}: silhouette {100 * silhouette_score(Z, y):.1f}, trustworthiness "
              f"{100 * trustworthiness(X, Z):.2f}, {steps} steps, {sec:.0f} s", flush=True)

    for label, loops in [("reference t-SNEkhorn, self-loops", True),
                         ("reference t-SNEkhorn, no self-loops", False)]:
        t = time.time()
        Z, steps = reference(X, Z0, loops)
        show(label, Z, steps, time.time() - t)
    for method in ["t-SNE (probdr.TSNE)", "t-SNEkhorn"]:
        Z, sec, steps, _ = fit_thesis(method, X, seed, f"digits{n}", 30.0, 0.1, CAP)
        show(f"probdr {method}", Z, steps, sec)


if __name__ == "__main__":
    main()
