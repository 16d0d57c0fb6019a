"""The ``probdr`` command line.

``probdr embed --method tsne --data digits --out emb.npy --plot emb.png`` fits a model on a
bundled data set (or a ``.npy`` / ``.csv`` file), prints quality metrics, and writes the
embedding and a plot.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np

from .plotting import plot_uncertainty

METHODS = ("sne", "tsne", "largevis", "umap", "tsnekhorn", "snekhorn")


def _make(method: str, args):
    from . import estimators as est

    common = dict(n_components=args.n_components, random_state=args.random_state,
                  verbose=args.verbose)
    common.update(bayes_estimator_kwargs(args))
    if method == "umap":
        return est.UMAP(n_neighbors=args.n_neighbors, n_epochs=args.n_iter, **common)
    if method in ("tsnekhorn", "snekhorn") and getattr(args, "inference", "map") != "map":
        raise ValueError(f"--inference {args.inference} is not available for {method}: the "
                         "SNEkhorn presets are fitted by MAP only.")
    cls = {"sne": est.SNE, "tsne": est.TSNE, "largevis": est.LargeVis,
           "tsnekhorn": est.TSNEkhorn, "snekhorn": est.SNEkhorn}[method]
    kw = dict(perplexity=args.perplexity, **common)
    if args.n_iter is not None:
        kw["n_iter"] = args.n_iter
        if method in ("sne", "tsne", "tsnekhorn"):
            kw["early_exaggeration_iter"] = min(250, args.n_iter // 3)
    return cls(**kw)


def _load(data: str, pca: int | None, random_state: int):
    from . import datasets

    if data.endswith(".npy"):
        X = np.load(data)
        y = None
    elif data.endswith(".csv"):
        X = np.loadtxt(data, delimiter=",")
        y = None
    else:
        X, y = datasets.load(data, random_state=random_state)
    if pca is not None:
        X = datasets._pca(np.asarray(X, dtype=np.float64), pca)
    return X, y


def _check_output_path(path: str | None, option: str) -> None:
    """Fail before the fit if an output file cannot be written."""
    if not path:
        return
    target = os.path.abspath(path)
    parent = os.path.dirname(target) or "."
    if os.path.isdir(target):
        raise ValueError(f"{option} {path!r} is a directory; give a file name.")
    if not os.path.isdir(parent):
        raise ValueError(f"{option} {path!r}: the directory {parent!r} does not exist.")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"{option} {path!r}: the directory {parent!r} is not writable.")


def embed(args) -> int:
    from . import metrics, plotting

    for path, option in ((args.out, "--out"), (args.plot, "--plot"),
                         (getattr(args, "uncertainty_plot", None), "--uncertainty-plot")):
        _check_output_path(path, option)
    X, y = _load(args.data, args.pca, args.random_state or 0)
    est = _make(args.method, args)
    t0 = time.perf_counter()
    Z = est.fit_transform(X)
    elapsed = time.perf_counter() - t0
    # trustworthiness needs k < n / 2 (scikit-learn's definition): 15, or fewer on small data
    k = min(15, (len(X) - 1) // 2)
    report = {"method": args.method, "data": args.data, "n": int(X.shape[0]),
              "p": int(X.shape[1]), "seconds": round(elapsed, 2),
              f"trustworthiness@{k}": round(metrics.trustworthiness(
                  X, Z, k, sample_size=5000 if len(X) > 5000 else None), 4) if k >= 1 else None,
              "loss": round(est.loss(Z), 4) if len(X) <= 20_000 else None}
    if y is not None:
        report["knn_accuracy@5"] = round(metrics.knn_accuracy(Z, y, 5), 4)
    print(json.dumps(report, indent=2))
    if args.out:
        np.save(args.out, Z)
        print(f"embedding written to {args.out}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        ax = plotting.plot_embedding(Z, y, title=f"{args.method} on {args.data}")
        ax.figure.savefig(args.plot, dpi=120, bbox_inches="tight")
        plt.close(ax.figure)
        print(f"plot written to {args.plot}")

    run_bayes_outputs(est, args, y)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="probdr", description="Dimensionality reduction as "
                                "probabilistic programs on Pyro.")
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("embed", help="fit an embedding, print metrics, write it and a plot")
    e.add_argument("--method", choices=METHODS, default="tsne")
    e.add_argument("--data", default="digits",
                   help="digits, mnist5k, blobs, s_curve, swiss_roll, or a .npy/.csv file")
    e.add_argument("--out", default=None, help="where to write the embedding (.npy)")
    e.add_argument("--plot", default=None, help="where to write a scatter plot (.png)")
    e.add_argument("--n-components", type=int, default=2)
    e.add_argument("--perplexity", type=float, default=30.0)
    e.add_argument("--n-neighbors", type=int, default=15)
    e.add_argument("--n-iter", type=int, default=None, help="optimisation steps / epochs")
    e.add_argument("--pca", type=int, default=None, help="project the data on k PCs first")
    e.add_argument("--random-state", type=int, default=0)
    e.add_argument("--verbose", action="store_true")

    add_bayes_arguments(e)
    args = p.parse_args(argv)
    try:
        return embed(args)
    except (ValueError, ImportError, FileNotFoundError, MemoryError) as exc:
        print(f"probdr: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


# --------------------------------------------------------------------------------------------
# posterior inference options (--inference)
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
    g.add_argument("--coupling-weight", type=_weight, default="auto",
                   help="inverse temperature of the coupling likelihood (sets the spread); "
                        "'auto' (default): the tail rule, 4 for 2-D t-SNE")
    g.add_argument("--uncertainty-plot", default=None,
                   help="where to write the uncertainty-ellipse plot (.png); default: next to "
                        "--plot with suffix _uncertainty")
    return parser


def _weight(value: str):
    if value == "auto":
        return value
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a number, got {value!r}") from None


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
