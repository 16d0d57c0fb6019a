r"""Plots and command-line outputs of the Bayesian workflow.

* :func:`plot_uncertainty` -- the posterior mean embedding as a labelled scatter, with one
  ellipse per point: the ``n_std``-standard-deviation contour of the point's posterior
  covariance :math:`\Sigma_i` estimated from Procrustes-aligned draws.
* :func:`plot_predictive_check` -- the graph statistics of :func:`probdr.diagnostics.
  posterior_predictive_check`, latent versus input draws.
* :func:`add_bayes_arguments`, :func:`bayes_estimator_kwargs`, :func:`run_bayes_outputs` --
  the ``--inference`` options of ``probdr embed``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from .diagnostics import _posterior_of

__all__ = ["plot_uncertainty", "plot_predictive_check", "add_bayes_arguments",
           "bayes_estimator_kwargs", "run_bayes_outputs"]


def _ellipse_params(C: np.ndarray, n_std: float):
    """Widths, heights (full axes) and angles (degrees) of the n_std contours of 2x2 covariances."""
    vals, vecs = np.linalg.eigh(C)  # ascending
    vals = np.clip(vals, 0.0, None)
    widths = 2.0 * n_std * np.sqrt(vals[:, 1])
    heights = 2.0 * n_std * np.sqrt(vals[:, 0])
    angles = np.degrees(np.arctan2(vecs[:, 1, 1], vecs[:, 0, 1]))
    return widths, heights, angles


def plot_uncertainty(posterior, y=None, ax=None, *, n_std: float = 2.0, alpha: float = 0.15,
                     points=None, s: float = 4.0, cmap: str = "tab10", title: str | None = None,
                     legend: bool = True):
    r"""Posterior mean embedding with per-point uncertainty ellipses.

    Each ellipse is :math:`\{z : (z - \bar z_i)^\top \Sigma_i^{-1} (z - \bar z_i) = c^2\}`,
    :math:`c` = ``n_std``, where :math:`\bar z_i` and :math:`\Sigma_i` are the mean and
    covariance of point i's aligned posterior draws (first two latent dimensions). Their size
    depends on the temperature (``coupling_weight``): read them relative to each other.

    Parameters
    ----------
    posterior : fitted estimator with ``posterior_`` or a :class:`~probdr.infer.posterior.Posterior`
    y : array (n,), optional
        Labels for colours.
    ax : matplotlib Axes, optional
    n_std : float
        Contour in standard deviations (2 covers about 86% of a 2-D Gaussian, 1 about 39%).
    alpha : float
        Ellipse face opacity.
    points : array of int, optional
        Draw ellipses for these points only (all points are scattered).

    Returns
    -------
    matplotlib Axes
    """
    import matplotlib as mpl
    from matplotlib.collections import EllipseCollection

    from .plotting import plot_embedding

    post = _posterior_of(posterior)
    if not (isinstance(n_std, (int, float)) and n_std > 0):
        raise ValueError(f"n_std must be positive, got {n_std!r}.")
    mean = post.mean
    if mean.shape[1] < 2:
        raise ValueError("plot_uncertainty needs an embedding with at least 2 dimensions.")
    n = mean.shape[0]
    if y is not None:
        y = np.asarray(y)
        if y.shape != (n,):
            raise ValueError(f"y must have shape ({n},), got {y.shape}.")
    C = post.point_covariances()[:, :2, :2]
    ax = plot_embedding(mean[:, :2], y, ax=ax, title=title, s=s, cmap=cmap, legend=legend)
    idx = np.arange(n) if points is None else np.asarray(points, dtype=int)
    w, h, a = _ellipse_params(C[idx], float(n_std))
    if y is None:
        colors = np.tile(np.array([[0.3, 0.3, 0.3, 1.0]]), (len(idx), 1))
    else:
        classes, yi = np.unique(y, return_inverse=True)
        cm = mpl.colormaps[cmap].resampled(max(len(classes), 2))
        colors = np.asarray(cm(yi[idx]))
    face = colors.copy()
    face[:, 3] = alpha
    ec = EllipseCollection(w, h, a, units="xy", offsets=mean[idx, :2],
                           offset_transform=ax.transData, facecolors=face,
                           edgecolors=colors, linewidths=0.3, zorder=0)
    # keep the view on the points (plot_embedding set it); huge ellipses are clipped, not zoomed
    ax.add_collection(ec, autolim=False)
    return ax


def plot_predictive_check(check: dict, axes=None):
    """Histograms of ``edge_precision`` and ``n_components`` for latent and input graph draws
    (the output of :func:`probdr.diagnostics.posterior_predictive_check`). Returns the axes."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(9, 3))
    for ax, key, label in ((axes[0], "edge_precision", f"edge precision vs {check['k']}-NN"),
                           (axes[1], "n_components", "connected components")):
        for name, color in (("input", "0.5"), ("latent", "C0")):
            ax.hist(check[name][key], bins=15, alpha=0.6, color=color,
                    label=r"$W_X$ draws" if name == "input" else r"$W_Z$ posterior predictive")
        ax.set_xlabel(label)
    axes[0].legend(frameon=False, fontsize=8)
    return axes


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------
def add_bayes_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--inference`` and its options to the ``probdr embed`` parser."""
    g = parser.add_argument_group("posterior inference")
    g.add_argument("--inference", choices=("map", "svi", "mcmc"), default="map",
                   help="MAP (the classical method), or a posterior by SVI or NUTS (small n)")
    g.add_argument("--num-samples", type=int, default=200,
                   help="posterior draws (per chain for mcmc)")
    g.add_argument("--num-steps", type=int, default=1000, help="SVI steps")
    g.add_argument("--guide", choices=("normal", "lowrank"), default="normal", help="SVI guide")
    g.add_argument("--num-chains", type=int, default=2, help="NUTS chains")
    g.add_argument("--warmup", type=int, default=300, help="NUTS warm-up steps per chain")
    g.add_argument("--coupling-weight", type=float, default=1.0,
                   help="inverse temperature of the coupling likelihood (sets the spread)")
    g.add_argument("--uncertainty-plot", default=None,
                   help="where to write the uncertainty-ellipse plot (.png); default: next to "
                        "--plot with suffix _uncertainty")
    return parser


def bayes_estimator_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Estimator keyword arguments from the parsed ``--inference`` options (empty for MAP)."""
    inference = getattr(args, "inference", "map")
    if inference == "map":
        return {}
    if inference == "svi":
        params = {"num_steps": args.num_steps, "num_samples": args.num_samples,
                  "guide": args.guide}
        return {"inference": "svi", "inference_params": params,
                "coupling_weight": args.coupling_weight}
    params = {"num_chains": args.num_chains, "warmup": args.warmup,
              "num_samples": args.num_samples}
    return {"inference": "mcmc", "inference_params": params, "repulsion": "exact",
            "coupling_weight": args.coupling_weight}


def _uncertainty_path(args) -> str | None:
    if getattr(args, "uncertainty_plot", None):
        return args.uncertainty_plot
    plot = getattr(args, "plot", None)
    if plot:
        stem, dot, ext = plot.rpartition(".")
        return f"{stem}_uncertainty.{ext}" if dot else f"{plot}_uncertainty.png"
    return None


def run_bayes_outputs(est, args: argparse.Namespace, y=None) -> dict[str, Any]:
    """After a fit with ``--inference svi|mcmc``: print a posterior summary and write the
    uncertainty plot. Returns the summary (empty for MAP)."""
    import json

    if getattr(args, "inference", "map") == "map":
        return {}
    post = est.posterior_
    sd = post.point_std()
    summary: dict[str, Any] = {"inference": post.method, "draws": int(post.samples.shape[0]),
                               "point_std_median": round(float(np.median(sd)), 4),
                               "point_std_max": round(float(sd.max()), 4),
                               "seconds": round(float(post.diagnostics.get("seconds", 0.0)), 2)}
    if post.method == "mcmc":
        summary["r_hat_max"] = round(post.diagnostics["r_hat_max"], 4)
        summary["ess_min"] = round(post.diagnostics["ess_min"], 1)
        summary["divergences"] = int(sum(post.diagnostics["divergences"]))
    print(json.dumps({"posterior": summary}, indent=2))
    path = _uncertainty_path(args)
    if path:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        ax = plot_uncertainty(post, y, title=f"{getattr(args, 'method', '')} posterior "
                              f"({post.method}), 2-sd ellipses")
        ax.figure.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(ax.figure)
        print(f"uncertainty plot written to {path}")
        summary["uncertainty_plot"] = path
    return summary
