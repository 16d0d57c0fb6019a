"""The ``probdr`` command line: ``probdr embed --data cells.csv --labels cell_type --out emb.csv
--plot emb.png`` reads a data file (``.npy``; ``.csv``, ``.tsv``, whitespace-separated ``.txt``,
with or without a header row; ``.h5ad``) or a bundled data set, fits an embedding, writes it and a
plot, and prints one JSON report on standard output; progress bars, notes and warnings go to
standard error. Every path is checked before the fit (exit code 2). See ``docs/cli.md``.

The module imports only the standard library (and :mod:`probdr.cli_files`, which does too): the
argument parser and the checks of the options and paths run before numpy, torch, scikit-learn
or Pyro are imported, so ``probdr --help``, ``--version`` and bad arguments answer at once; the
fit imports what it needs after them. Run as the ``probdr`` command (or ``python -m probdr.cli``),
``import probdr`` does not import the estimators either (see :mod:`probdr`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import Any

from ._version import __version__
from .cli_files import (  # noqa: F401
    BUNDLED,
    DATA_SUFFIXES,
    OUT_SUFFIXES,
    TABLES,
    UNLABELLED,
    Labels,
    _check_path,
    _is_bundled,
    _is_number,
    _suffix,
    load_data,
    write_embedding,
)

METHODS = ("sne", "tsne", "largevis", "umap", "tsnekhorn", "snekhorn")
#: the methods fitted data-parallel over the processes of ``--nproc`` (the graph couplings)
PARALLEL_METHODS = ("sne", "tsne", "largevis", "umap")
#: the distance names of the estimators' ``metric=``
METRICS = ("euclidean", "sqeuclidean", "cosine", "correlation", "manhattan", "chebyshev",
           "minkowski", "hamming", "jaccard", "haversine")

def _check_options(args) -> None:
    """The options and every path the command reads or writes, before anything is loaded."""
    for bad, message in (
            (args.nproc < 1, "--nproc must be at least 1"),
            (args.nproc > 1 and args.method not in PARALLEL_METHODS,
             f"--nproc runs {', '.join(PARALLEL_METHODS)} data-parallel; {args.method} runs "
             "in one process"),
            (args.nproc > 1 and args.inference != "map", "--nproc applies to MAP fits"),
            (args.metric_param and args.metric is None, "--metric-param needs --metric"),
            (args.target_weight is not None and not args.supervised,
             "--target-weight needs --supervised"),
            (args.supervised and args.labels is None and not _is_bundled(args.data),
             "--supervised needs --labels"),
            (args.inference == "map" and args.uncertainty_plot,
             "--uncertainty-plot needs --inference svi or mcmc"),
            (args.use_rep is not None and _suffix(args.data) != ".h5ad",
             "--use-rep applies to .h5ad data only")):
        if bad:
            raise ValueError(message + ".")
    paths = [(args.out, "--out"), (args.plot, "--plot"), (
        _uncertainty_path(args) if args.inference != "map" else None, "--uncertainty-plot")]
    for path, option in paths:
        _check_path(path, option)
        suffix = _suffix(path or "")
        if path and option == "--out" and suffix not in OUT_SUFFIXES:
            raise ValueError(f"--out {path!r}: the embedding is written as .npy, .csv or .tsv, "
                             f"chosen by the file name's suffix (got {suffix or 'none'!r}).")
        if path and option != "--out":
            from matplotlib.backend_bases import FigureCanvasBase

            kinds = FigureCanvasBase.get_supported_filetypes()
            if suffix[1:] not in kinds:
                raise ValueError(f"{option} {path!r}: the figure format is chosen by the file "
                                 f"name's suffix, one of {', '.join('.' + k for k in kinds)} "
                                 f"(got {suffix or 'none'!r}).")
            if args.n_components < 2:
                raise ValueError(f"{option} needs --n-components 2 or more.")
    if not _is_bundled(args.data):
        if not os.path.exists(args.data):
            raise ValueError(f"--data {args.data!r}: no such file, and not a bundled data set "
                             f"({', '.join(BUNDLED)}).")
        _check_path(args.data, "--data", write=False)
        suffix = _suffix(args.data, compressed=True)
        if suffix not in DATA_SUFFIXES:
            raise ValueError(f"--data {args.data!r}: unknown format {suffix or '(no suffix)'!r}; "
                             f"probdr reads {', '.join(DATA_SUFFIXES)} (tables also compressed, "
                             "e.g. .csv.gz).")
        paths.append((args.data, "--data"))
    if args.labels and (_is_bundled(args.data) or _suffix(args.data) == ".npy"):
        _check_path(args.labels, "--labels", write=False)  # a file: no columns to name
    named = [(os.path.abspath(p), o) for p, o in paths if p]
    for i, (path, option) in enumerate(named):
        for other in (o for q, o in named[:i] if q == path):
            raise ValueError(f"{other} and {option} name the same file {path!r}.")


def _make(method: str, args):
    from . import estimators as est

    cls = {"sne": est.SNE, "tsne": est.TSNE, "largevis": est.LargeVis, "umap": est.UMAP,
           "tsnekhorn": est.TSNEkhorn, "snekhorn": est.SNEkhorn}[method]
    common = dict(n_components=args.n_components, random_state=args.random_state,
                  device=getattr(args, "device", "auto"), verbose=not getattr(args, "quiet", False) and _rank() == 0,
                  **bayes_estimator_kwargs(args))
    # metric and supervision only when asked for: the default works with any estimator
    for option, param in (("metric", "metric"), ("supervised", "target_weight")):
        if getattr(args, option, None) and param not in cls._get_param_names():
            raise ValueError(f"--{option}: {cls.__name__} in this version of probdr has no "
                             f"{param} parameter.")
    if getattr(args, "metric", None):
        common["metric"] = args.metric
        if args.metric_param:
            common["metric_params"] = dict(args.metric_param)
    if getattr(args, "supervised", False) and args.target_weight is not None:
        common["target_weight"] = args.target_weight
    if method == "umap":
        return cls(n_neighbors=args.n_neighbors, n_epochs=args.n_iter, **common)
    if method in ("tsnekhorn", "snekhorn") and getattr(args, "inference", "map") != "map":
        raise ValueError(f"--inference {args.inference} is not available for {method}: the "
                         "SNEkhorn presets are fitted by MAP only.")
    kw = dict(perplexity=args.perplexity, **common)
    if args.n_iter is not None:
        kw["n_iter"] = args.n_iter
        if method in ("sne", "tsne", "tsnekhorn"):
            kw["early_exaggeration_iter"] = min(250, args.n_iter // 3)
    return cls(**kw)


def _save_figure(ax, path: str) -> None:
    import matplotlib.pyplot as plt

    ax.figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(ax.figure)


def embed(args) -> int:
    """Run ``probdr embed``: the JSON report on standard output, everything else on standard
    error. Raises ``ValueError`` (or ``ImportError``, ``OSError``) on bad input, before the fit
    when the input can be checked before it."""
    stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # anything a library prints: stderr
        report = _embed(args)
    if report is not None:  # rank 0 of a data-parallel run reports
        stdout.write(json.dumps(report, indent=2) + "\n")
        stdout.flush()
    return 0


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _embed(args) -> dict[str, Any] | None:
    _check_options(args)  # before the heavy imports (main has checked already)
    import numpy as np
    import scipy.sparse as sp

    from . import metrics, plotting

    quiet = args.quiet or _rank() != 0
    note = (lambda m: None) if quiet else (lambda m: print(f"probdr: {m}", file=sys.stderr))
    X, labels, info = load_data(args)
    est = _make(args.method, args)
    n, p = int(X.shape[0]), info.pop("p")
    note(f"{args.data}: {n} rows x {p} features" + (
        f" (header row: {'yes' if info['header'] else 'no'})" if "header" in info else "") + (
        f"; labels: {labels.source}, {labels.n_classes} classes, "
        f"{int((~labels.known).sum())} unknown" if labels is not None else ""))
    t0 = time.perf_counter()
    Z = est.fit_transform(X, labels.codes) if args.supervised else est.fit_transform(X)
    elapsed, Z = time.perf_counter() - t0, np.asarray(Z)
    if _rank() != 0:  # every rank holds the same embedding; rank 0 measures and writes it
        return None
    world = _world_size()
    report = {"method": args.method, "data": args.data, **info, "n": n, "p": p,
              "nproc": world if world > 1 else None,
              "pca": args.pca, "metric": args.metric or "euclidean",
              "metric_params": dict(args.metric_param) or None,
              "labels": labels and labels.source, "n_classes": labels and labels.n_classes,
              "supervised": args.supervised or None, "seconds": round(elapsed, 2)}
    report = {k: v for k, v in report.items() if v is not None}
    # trustworthiness (Euclidean distances in the input) needs k < n / 2: 15, or fewer
    k, sample, Xm, Zm = min(15, (n - 1) // 2), 5000 if n > 5000 else None, X, Z
    if sp.issparse(X):  # dense rows only for the points it is measured on
        idx = np.random.default_rng(0).choice(n, sample, replace=False) if sample else \
            slice(None)
        Xm, Zm, sample = X[idx].toarray(), Z[idx], None
    report[f"trustworthiness@{k}"] = round(metrics.trustworthiness(
        Xm, Zm, k, sample_size=sample), 4) if k >= 1 else None
    if labels is not None and labels.known.sum() > 5 and labels.n_classes > 1:
        m = labels.known
        report["knn_accuracy@5"] = round(metrics.knn_accuracy(Z[m], labels.codes[m], 5), 4)
    if labels is not None and not labels.known.all():
        report["labelled"] = int(labels.known.sum())
    report["loss"] = round(est.loss(Z), 4) if n <= 20_000 else None

    outputs: dict[str, str] = {}
    if args.out:
        write_embedding(args.out, Z, labels)
        note(f"embedding written to {args.out}")
        outputs["embedding"] = args.out
    y_plot = labels.for_plot() if labels is not None else None
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        _save_figure(plotting.plot_embedding(
            Z, y_plot, title=f"{args.method} on {os.path.basename(args.data)}"), args.plot)
        note(f"plot written to {args.plot}")
        outputs["plot"] = args.plot
    summary = run_bayes_outputs(est, args, y_plot, report=report)
    if "uncertainty_plot" in summary:  # listed with the other outputs
        outputs["uncertainty_plot"] = summary.pop("uncertainty_plot")
    return {**report, "outputs": outputs} if outputs else report


def _metric_param(text: str) -> tuple[str, Any]:
    key, eq, value = (s.strip() for s in text.partition("="))
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, float(value) if _is_number(value) else value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="probdr", description="Dimensionality reduction as "
                                "probabilistic programs on Pyro.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    e = p.add_subparsers(dest="command", required=True).add_parser(
        "embed", help="fit an embedding of a data file, print a JSON report, write it and a plot",
        description="Fit an embedding of a data file or a bundled data set. Standard output "
                    "carries only the JSON report; progress and notes go to standard error.")
    io = e.add_argument_group("input and output")
    io.add_argument("--data", default="digits", help="a .npy, .csv, .tsv, .txt (whitespace) or "
                    f".h5ad file, or a bundled data set: {', '.join(BUNDLED)} (default: digits)")
    io.add_argument("--labels", default=None, metavar="COLUMN|FILE",
                    help="a column of the table (by name; by 0-based position without a header "
                         "row), an obs column of the .h5ad, or a file of labels (one per line, "
                         "or .npy): colours the plot and gives knn_accuracy@5")
    io.add_argument("--header", choices=("auto", "yes", "no"), default="auto",
                    help="whether a table's first row names its columns (auto: it does when a "
                         "cell of it is not a number)")
    io.add_argument("--use-rep", default=None, metavar="KEY",
                    help=".h5ad: embed obsm[KEY], or X (default: X_pca if present, else X)")
    io.add_argument("--out", default=None, help="where to write the embedding: .npy, or .csv / "
                                                ".tsv (columns z1, z2, ..., and label)")
    io.add_argument("--plot", default=None, help="where to write a scatter plot (.png, .pdf, "
                                                 ".svg, ...)")
    io.add_argument("--nproc", type=int, default=1, metavar="N",
                    help="fit data-parallel in N local processes (gloo; torch's launcher): "
                         f"{', '.join(PARALLEL_METHODS)}; rank 0 writes and reports")
    io.add_argument("--device", default="auto", metavar="DEVICE",
                    help="where to compute: auto (CUDA if available, else CPU; with --nproc "
                         "each rank its own GPU), cpu, cuda, cuda:1, mps")
    m = e.add_argument_group("model")
    m.add_argument("--method", choices=METHODS, default="tsne")
    m.add_argument("--n-components", type=int, default=2)
    m.add_argument("--perplexity", type=float, default=30.0)
    m.add_argument("--n-neighbors", type=int, default=15, help="UMAP's neighbours")
    m.add_argument("--metric", choices=METRICS, default=None, metavar="NAME",
                   help=f"input distance: {', '.join(METRICS)} (default: Euclidean)")
    m.add_argument("--metric-param", type=_metric_param, action="append", default=[],
                   metavar="KEY=VALUE", help="a parameter of --metric, e.g. p=3 (repeatable)")
    m.add_argument("--supervised", action="store_true",
                   help="fit on the labels too (labels -1 or empty are unknown)")
    m.add_argument("--target-weight", type=float, default=None,
                   help="with --supervised: the labels' weight (the estimator's target_weight)")
    m.add_argument("--n-iter", type=int, default=None, help="optimisation steps / epochs")
    m.add_argument("--pca", type=int, default=None, help="project the data on k PCs first")
    m.add_argument("--random-state", type=int, default=0)
    v = e.add_mutually_exclusive_group()
    v.add_argument("--quiet", action="store_true", help="no progress bar, no notes on stderr")
    v.add_argument("--verbose", action="store_true", help="progress bar (the default)")
    add_bayes_arguments(e)
    return p


def main(argv=None) -> int:
    """Run the ``probdr`` command; returns its exit code (2 on bad input). The arguments, options
    and paths are checked with the standard library alone, before anything heavy is imported."""
    args = build_parser().parse_args(argv)
    try:
        _check_options(args)  # bad input fails here, before torch loads or any process starts
        if args.nproc > 1 and "TORCHELASTIC_RUN_ID" not in os.environ:
            return _launch(args.nproc, sys.argv[1:] if argv is None else list(argv))
        with _process_group():
            return embed(args)
    except (ValueError, ImportError, OSError, MemoryError) as exc:
        print(f"probdr: error: {exc}", file=sys.stderr)
        return 2


# data-parallel runs (--nproc, torchrun) -------------------------------------------------------
def _world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


@contextlib.contextmanager
def _process_group():
    """Join the process group of a launcher (``--nproc``, ``torchrun``: ``WORLD_SIZE`` > 1 in
    the environment) for the duration of the command: NCCL with one GPU per rank where CUDA
    is available (the estimators' ``device="auto"``), else gloo."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        yield
        return
    import torch
    import torch.distributed as dist

    backend = "gloo"
    if torch.cuda.is_available() and dist.is_nccl_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        backend = "nccl"
    dist.init_process_group(backend)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _launch(nproc: int, argv: list[str]) -> int:
    """Run this command in ``nproc`` local processes through torch's elastic launcher (what
    ``torchrun --standalone --nproc-per-node N`` does): each joins a gloo group, the fit is
    data-parallel, rank 0 writes the outputs and prints the report. Returns the exit code."""
    import uuid

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc,
                          run_id=f"probdr-{uuid.uuid4().hex[:8]}", rdzv_backend="c10d",
                          rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.1)
    threads = max(1, (os.cpu_count() or 1) // nproc)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # the cores shared by the ranks
    try:
        elastic_launch(config, sys.executable)("-m", "probdr.cli", *argv)
    except ChildFailedError as exc:
        codes = [f.exitcode for f in exc.failures.values()]
        return max(codes) if codes else 1
    return 0


# posterior inference options (--inference) ---------------------------------------------------
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
    if value == "auto" or _is_number(value):
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
    params = dict(num_chains=args.num_chains, warmup=args.warmup, num_samples=args.num_samples)
    return dict(inference="mcmc", inference_params=params, repulsion="exact",
                coupling_weight=args.coupling_weight)


def _uncertainty_path(args) -> str | None:
    plot = getattr(args, "plot", None)
    if getattr(args, "uncertainty_plot", None) or not plot:
        return getattr(args, "uncertainty_plot", None)
    stem, dot, ext = plot.rpartition(".")
    return f"{stem}_uncertainty.{ext}" if dot else f"{plot}_uncertainty.png"


def run_bayes_outputs(est, args: argparse.Namespace, y=None, *,
                      report: dict[str, Any] | None = None) -> dict[str, Any]:
    """After a fit with ``--inference svi|mcmc``: the posterior summary, and the uncertainty
    plot. The summary goes into ``report["posterior"]`` when a report is given (``probdr embed``
    prints one JSON document), and is printed as JSON otherwise. Returns it (empty for MAP)."""
    if getattr(args, "inference", "map") == "map":
        return {}
    import numpy as np

    from .plotting import plot_uncertainty

    post, diag = est.posterior_, est.posterior_.diagnostics
    sd = post.point_std()
    summary: dict[str, Any] = {"inference": post.method, "draws": int(post.samples.shape[0]),
                               "point_std_median": round(float(np.median(sd)), 4),
                               "point_std_max": round(float(sd.max()), 4),
                               "seconds": round(float(diag.get("seconds", 0.0)), 2)}
    if post.method == "mcmc":
        summary.update(r_hat_max=round(diag["r_hat_max"], 4), ess_min=round(diag["ess_min"], 1),
                       divergences=int(sum(diag["divergences"])))
    path = _uncertainty_path(args)
    if path:
        import matplotlib

        matplotlib.use("Agg")
        _save_figure(plot_uncertainty(post, y, title=f"{getattr(args, 'method', '')} posterior "
                                      f"({post.method}), 2-sd ellipses"), path)
        if not getattr(args, "quiet", False):
            print(f"probdr: uncertainty plot written to {path}", file=sys.stderr)
        summary["uncertainty_plot"] = path
    if report is not None:
        report["posterior"] = summary
    else:
        print(json.dumps({"posterior": summary}, indent=2))
    return summary


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
