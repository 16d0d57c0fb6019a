"""The default posterior against NUTS, for the four models of the calibration study at several
temperatures: the public estimator's ``inference="hmc"`` (its default start, mode search and
sampler) on data simulated from the model, compared with pooled independent NUTS chains on the
same model and data.

Each setting draws true positions Z* ~ N(0, s^2 I) (200 points in 2-D) and the average of m
graphs of the model's latent law given Z* (``calibration_user.simulate``), fits

    GraphCoupling(**calibration_user.LAWS[law], affinity="precomputed", coupling_weight=m,
                  z_prior=s, inference="hmc", random_state=seed).fit(W)

and runs ``--chains`` NUTS chains (``probdr.infer.posterior.fit_posterior(method="mcmc")``:
Pyro's NUTS on the exact likelihood of the model the estimator fitted, ``model_kwargs_``), each
of 200 warm-up and ``--draws`` kept draws from the estimator's mode with its own seed. The chains
are aligned on their own means and pooled (``calibration_nuts.pooled_reference``, which also
reports how far the chains' means are apart: the reference's own error). Reported: the median
over points of the estimator's per-point sd over NUTS's (target 0.87-1.15) and of the distance
between the two means in NUTS sds (target <= 0.1), with the sampler's diagnostics and the
seconds of each part. ``--variant JSON`` scores the sampler with other ``inference_params``
against the same chains (e.g. more draws: is a difference the draws' noise or a bias?).

    python benchmarks/nuts_agreement.py --law tsne umap dd tsne-dof0.5 --weights 2 20
    python benchmarks/nuts_agreement.py --law dd --weights 2 --variant '{"num_samples": 1200}'

Results append to ``benchmarks/results/nuts_agreement.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from calibration_nuts import SAMPLER_KEYS, compare, point_sd, pooled_reference
from calibration_user import LAWS, code_commit, simulate

import probdr
from probdr.estimators.coupling import _OPTIMISER_KEYS
from probdr.infer.posterior import fit_posterior
from probdr.models.coupling import graph_coupling_model

RESULTS = Path(__file__).parent / "results" / "nuts_agreement.jsonl"


def fit_default(law: str, m: float, s: float, W: np.ndarray, seed: int, params=None):
    """The public estimator with its default posterior (``inference="hmc"``), its
    ``inference_params`` ``params`` (default: none)."""
    est = probdr.GraphCoupling(**LAWS[law], affinity="precomputed", coupling_weight=float(m),
                               z_prior=s, inference="hmc", inference_params=params,
                               random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(W)
    return est


def nuts_chain(est, draws: int, seed: int) -> np.ndarray:
    """One NUTS chain on the estimator's model and data, from its mode."""
    # the model's arguments: model_kwargs_ without the optimiser's settings
    kw = {k: v for k, v in est.model_kwargs_.items() if k not in _OPTIMISER_KEYS}
    kw["kernel"] = est.kernel_
    mode = torch.as_tensor(est.mode_embedding_, dtype=torch.float64)
    post = fit_posterior(graph_coupling_model, kw, mode, method="mcmc", num_chains=1,
                         warmup=200, num_samples=draws, max_params=10 ** 6,
                         generator=torch.Generator().manual_seed(seed))
    return np.asarray(post.samples, dtype=np.float64)


def scored(est, ref: np.ndarray, sn: np.ndarray, seconds: float, params) -> dict:
    """The estimator's posterior against the reference: per-point sds and means, its sampler's
    diagnostics and its seconds."""
    draws = np.asarray(est.posterior_samples_, dtype=np.float64)
    diag = est.posterior_.diagnostics
    return dict(inference_params=params, **compare(draws, ref, sn, 1.0),
                **{k: diag[k] for k in (*SAMPLER_KEYS, "num_samples", "blocks_added")
                   if k in diag}, fit_seconds=round(seconds, 1))


def settings(law: str, m: float, s: float, a) -> list[dict]:
    """One row per posterior: the default, then each ``--variant``, against the same NUTS
    chains (run from the default fit's mode)."""
    _, W = simulate(law, a.n, m, s, a.seed)
    t0 = time.perf_counter()
    est = fit_default(law, m, s, W, a.seed)
    t1 = time.perf_counter()
    chains = [nuts_chain(est, a.draws, 1000 * (a.seed + 1) + c) for c in range(a.chains)]
    t2 = time.perf_counter()
    nuts, stats = pooled_reference(chains, np.asarray(est.mode_embedding_, dtype=np.float64))
    ref, sn = nuts.mean(0), point_sd(nuts)
    common = dict(law=law, m=m, s=s, n=a.n, seed=a.seed, nuts_draws_per_chain=a.draws, **stats,
                  nuts_seconds=round(t2 - t1, 1), probdr=probdr.__version__,
                  commit=code_commit())
    rows = [scored(est, ref, sn, t1 - t0, None)]
    for params in a.variant:
        t0 = time.perf_counter()
        other = fit_default(law, m, s, W, a.seed, params)
        rows.append(scored(other, ref, sn, time.perf_counter() - t0, params))
    return [{k: (float(v) if isinstance(v, np.floating) else v)
             for k, v in {**common, **row}.items()} for row in rows]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--law", nargs="+", choices=sorted(LAWS), default=["tsne"])
    ap.add_argument("--weights", nargs="+", type=float, default=[2.0, 20.0])
    ap.add_argument("--scale", type=float, default=3.0, help="prior scale s")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draws", type=int, default=500, help="NUTS draws a chain after 200 warm-up")
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--variant", action="append", default=[], type=json.loads, metavar="JSON",
                    help='the sampler with these inference_params too, against the same '
                         'chains, e.g. \'{"num_samples": 1200}\'')
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    torch.set_default_dtype(torch.float64)
    for law in a.law:
        for m in a.weights:
            for row in settings(law, m, a.scale, a):
                print(json.dumps(row), flush=True)
                with open(a.out, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
