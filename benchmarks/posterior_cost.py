"""What a posterior costs next to the MAP fit it starts from, in one run.

Each fit runs in its own process on the same data (the benchmark suite's data sets and
preprocessing), at the estimator's defaults: ``inference="map"``, ``"laplace"`` and ``"svi"``.
The time of ``fit`` is reported, and its ratio to the MAP fit's of the same run.

    python benchmarks/posterior_cost.py --data mnistdef70k --methods tsne umap
    python benchmarks/posterior_cost.py --data mnistdef70k --methods tsne --inference map laplace
    python benchmarks/posterior_cost.py --data mnistdef1m --methods tsne --inference map laplace \
        --new 1000
    python benchmarks/posterior_cost.py --data mnistdef70k --methods tsne --inference map hmc \
        --params '{"warmup": 100, "num_samples": 100, "num_chains": 1}'
    python benchmarks/posterior_cost.py --data mnistdef70k --methods umap --inference map hmc \
        --timeout 1800

``--new N`` holds N points out of every fit (drawn with seed 0); after a posterior fit they get
``sample_transform`` (200 draws), timed, with their median spread beside the training points',
and the fitted estimator is saved, loaded and its per-point spreads and reliabilities compared.
``fit_peak_gib`` is the peak memory at the end of ``fit``; ``peak_gib`` includes what follows.
``--params`` passes ``inference_params`` to the posterior fits; the samplers' chain diagnostics
(median and smallest ESS, R-hat, acceptance, leapfrog steps, gradient evaluations) are reported.

Results append to ``benchmarks/results/posterior_cost.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "posterior_cost.jsonl"
CHILD = """
import json, resource, sys, tempfile, time
import numpy as np
sys.path.insert(0, {here!r})
from suite import load
import probdr
import probdr.serialize
X, y = load({data!r})
held = np.zeros(len(X), dtype=bool)
held[np.random.default_rng(0).choice(len(X), {new}, replace=False)] = True
X, X_new = X[~held], X[held]
cls = {{"tsne": probdr.TSNE, "umap": probdr.UMAP}}[{method!r}]
t = time.perf_counter()
try:
    params = {params!r} if {inference!r} != "map" else None
    est = cls(random_state=0, inference={inference!r}, inference_params=params).fit(X)
    out = dict(seconds=time.perf_counter() - t, n=len(X))
    if {inference!r} != "map":
        out["posterior_seconds"] = est.posterior_.diagnostics["seconds"]
        out["inflation"] = est.posterior_.diagnostics.get("inflation")
        out["median_sd"] = float(np.median(est.posterior_sd_))
        d = est.posterior_.diagnostics
        for k in ("ess_median", "ess_min", "r_hat_max", "ess_min_distances", "accept_prob",
                  "leapfrog_mean", "gradient_evaluations", "step_size", "num_samples",
                  "blocks_added", "r_hat_max_distances"):
            if k in d:
                out[k] = d[k]
    with open("/proc/self/status") as f:  # the fit's peak, before the new points
        out["fit_peak_gib"] = [int(l.split()[1]) for l in f if l.startswith("VmHWM")][0] / 2**20
    if {inference!r} != "map" and len(X_new):
        t = time.perf_counter()
        draws = est.sample_transform(X_new, num_samples=200, random_state=0)
        out["new_seconds"] = time.perf_counter() - t
        out["new_shape"] = list(draws.shape)
        sd_new = np.sqrt(draws.var(0, ddof=1).mean(-1))
        out["new_median_sd"] = float(np.median(sd_new))
        with tempfile.TemporaryDirectory() as d:
            est.save(d + "/fit")
            back = probdr.serialize.load(d + "/fit")
        out["load_same"] = bool(np.array_equal(back.posterior_sd_, est.posterior_sd_)
                                and np.array_equal(back.reliability_, est.reliability_)
                                and np.array_equal(back.embedding_, est.embedding_)
                                and np.array_equal(back.posterior_.sample(0),
                                                   est.posterior_.sample(0)))
except ValueError as err:
    out = dict(refused=str(err)[:200])
with open("/proc/self/status") as f:
    out["peak_gib"] = [int(l.split()[1]) for l in f if l.startswith("VmHWM")][0] / 2**20
print(json.dumps(out))
"""


def run(data: str, method: str, inference: str, new: int = 0, params=None,
        timeout: float | None = None) -> dict:
    code = CHILD.format(here=str(Path(__file__).parent), data=data, method=method,
                        inference=inference, new=int(new), params=params)
    try:
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(timed_out=timeout)
    if res.returncode:
        return dict(error=res.stderr[-500:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="digits")
    ap.add_argument("--methods", nargs="+", default=["tsne", "umap"])
    ap.add_argument("--inference", nargs="+", default=["map", "laplace", "svi"],
                    choices=["map", "laplace", "svi", "hmc"], help="the fits to run (map first)")
    ap.add_argument("--params", type=json.loads, default=None,
                    help="inference_params of the posterior fits, as JSON")
    ap.add_argument("--new", type=int, default=0,
                    help="points held out of the fits and given to sample_transform")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds after which a fit is stopped and recorded as timed out")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    load = os.getloadavg()[0]
    for method in a.methods:
        base = None
        for inference in a.inference:
            row = dict(data=a.data, method=method, inference=inference,
                       load_before=round(os.getloadavg()[0], 2), run_load=round(load, 2),
                       date=time.strftime("%Y-%m-%d"), held_out=a.new,
                       params=a.params, **run(a.data, method, inference, a.new, a.params,
                                              a.timeout))
            if inference == "map":
                base = row.get("seconds")
            if base and "seconds" in row:
                row["ratio_to_map"] = round(row["seconds"] / base, 2)
            a.out.parent.mkdir(parents=True, exist_ok=True)
            with open(a.out, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
