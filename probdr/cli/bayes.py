"""The posterior inference options of ``probdr embed`` (``--inference svi|laplace|mcmc``): the
arguments, the estimator's keyword arguments they give, and the outputs after the fit (the
posterior summary, the uncertainty plot). Imports only the standard library at module level."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .files import is_number, save_figure


def add_bayes_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--inference`` and its options to the ``probdr embed`` parser."""
    g = parser.add_argument_group("posterior inference")
    g.add_argument("--inference", choices=("map", "svi", "laplace", "hmc", "mcmc"),
                   default="map",
                   help="MAP (the classical method), or a posterior by SVI, the per-point "
                        "Laplace approximation (the cheap option), HMC (the sampler that "
                        "scales) or NUTS (small n)")
    g.add_argument("--num-samples", type=int, default=200,
                   help="posterior draws (per chain for hmc and mcmc)")
    g.add_argument("--num-steps", type=int, default=1000, help="SVI steps")
    g.add_argument("--guide", choices=("normal", "lowrank"), default="normal", help="SVI guide")
    g.add_argument("--num-chains", type=int, default=2, help="HMC and NUTS chains")
    g.add_argument("--warmup", type=int, default=300,
                   help="HMC and NUTS warm-up steps per chain")
    g.add_argument("--coupling-weight", type=_weight, default="auto",
                   help="inverse temperature of the coupling likelihood (sets the spread); "
                        "'auto' (default): the tail rule, at most 4 for 2-D t-SNE")
    g.add_argument("--uncertainty-plot", default=None,
                   help="where to write the uncertainty-ellipse plot (.png); default: next to "
                        "--plot with suffix _uncertainty")
    return parser


def _weight(value: str):
    if value == "auto" or is_number(value):
        return value if value == "auto" else float(value)
    raise argparse.ArgumentTypeError(f"expected 'auto' or a number, got {value!r}")


def bayes_estimator_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Estimator keyword arguments from the parsed ``--inference`` options (empty for MAP)."""
    inference = getattr(args, "inference", "map")
    if inference == "map":
        return {}
    if inference == "svi":
        params = dict(num_steps=args.num_steps, num_samples=args.num_samples, guide=args.guide)
        return dict(inference="svi", inference_params=params, coupling_weight=args.coupling_weight)
    if inference == "laplace":
        return dict(inference="laplace", inference_params=dict(num_samples=args.num_samples),
                    coupling_weight=args.coupling_weight)
    params = dict(num_chains=args.num_chains, warmup=args.warmup, num_samples=args.num_samples)
    if inference == "hmc":
        return dict(inference="hmc", inference_params=params,
                    coupling_weight=args.coupling_weight)
    return dict(inference="mcmc", inference_params=params, repulsion="exact",
                coupling_weight=args.coupling_weight)


def uncertainty_path(args) -> str | None:
    """Where the uncertainty plot goes: ``--uncertainty-plot``, or next to ``--plot``."""
    plot = getattr(args, "plot", None)
    if getattr(args, "uncertainty_plot", None) or not plot:
        return getattr(args, "uncertainty_plot", None)
    stem, dot, ext = plot.rpartition(".")
    return f"{stem}_uncertainty.{ext}" if dot else f"{plot}_uncertainty.png"


def run_bayes_outputs(est, args: argparse.Namespace, y=None, *,
                      report: dict[str, Any] | None = None) -> dict[str, Any]:
    """After a fit with ``--inference svi|laplace|mcmc``: the posterior summary, and the uncertainty
    plot. The summary goes into ``report["posterior"]`` when a report is given (``probdr embed``
    prints one JSON document), and is printed as JSON otherwise. Returns it (empty for MAP)."""
    if getattr(args, "inference", "map") == "map":
        return {}
    import numpy as np

    from ..plotting import plot_uncertainty

    post, diag = est.posterior_, est.posterior_.diagnostics
    sd = post.point_std()
    summary: dict[str, Any] = {"inference": post.method, "draws": post.num_chains * post.num_draws,
                               "point_std_median": round(float(np.median(sd)), 4),
                               "point_std_max": round(float(sd.max()), 4),
                               "reliability_median": round(float(np.median(est.reliability_)), 4),
                               "reliability_p10": round(float(np.quantile(est.reliability_,
                                                                          0.1)), 4),
                               "stability_median": round(float(np.median(est.stability_)), 4),
                               "unstable_points": int((est.stability_ < 0.5).sum()),
                               "seconds": round(float(diag.get("seconds", 0.0)), 2)}
    if "inflation" in diag:  # the variance factor of SVI and Laplace, and where it came from
        cal = diag.get("calibration")
        summary.update(inflation=round(float(diag["inflation"]), 3),
                       calibration=cal["method"] if isinstance(cal, dict) else cal)
    if post.method in ("mcmc", "hmc"):
        summary.update(r_hat_max=round(diag["r_hat_max"], 4), ess_min=round(diag["ess_min"], 1),
                       divergences=int(sum(diag["divergences"])))
    path = uncertainty_path(args)
    if path:
        import matplotlib

        matplotlib.use("Agg")
        save_figure(plot_uncertainty(post, y, title=f"{getattr(args, 'method', '')} posterior "
                                      f"({post.method}), 2-sd ellipses"), path)
        if not getattr(args, "quiet", False):
            print(f"probdr: uncertainty plot written to {path}", file=sys.stderr)
        summary["uncertainty_plot"] = path
    if report is not None:
        report["posterior"] = summary
    else:
        print(json.dumps({"posterior": summary}, indent=2))
    return summary
