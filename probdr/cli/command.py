"""``probdr embed``: the argument parser, the checks of the options and paths, the fit and its
JSON report (see :mod:`probdr.cli`). Imports only the standard library at module level, with
the command's other modules (:mod:`~probdr.cli.files`, :mod:`~probdr.cli.bayes`,
:mod:`~probdr.cli.parallel`), which do too; the fit imports what it needs after the checks."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import Any

from .._version import __version__
from .bayes import add_bayes_arguments, bayes_estimator_kwargs, run_bayes_outputs, uncertainty_path
from .files import (
    BUNDLED,
    DATA_SUFFIXES,
    OUT_SUFFIXES,
    check_path,
    file_suffix,
    is_bundled,
    is_number,
    load_data,
    save_figure,
    write_embedding,
)
from .parallel import launch, process_group, rank, world_size

METHODS = ("sne", "tsne", "largevis", "umap", "tsnekhorn", "snekhorn")
#: the methods fitted data-parallel over the processes of ``--nproc`` (the graph couplings)
PARALLEL_METHODS = ("sne", "tsne", "largevis", "umap")
#: the distance names of the estimators' ``metric=``
METRICS = ("euclidean", "sqeuclidean", "cosine", "correlation", "manhattan", "chebyshev",
           "minkowski", "hamming", "jaccard", "haversine")

#: the methods' names as the documentation writes them (plot titles)
DISPLAY = {"sne": "SNE", "tsne": "t-SNE", "largevis": "LargeVis", "umap": "UMAP",
           "tsnekhorn": "t-SNEkhorn", "snekhorn": "SNEkhorn"}
#: what the JSON report's ``loss`` is
LOSS_IS = ("the coupling cross-entropy H(P_X, P_Z) of the final embedding, exact over all pairs, "
           "without early exaggeration")
#: what the optimised objective (the progress bar's ``loss=``) is, by the fit's repulsion
OPTIMISED_IS = {
    "exact": "the same cross-entropy, every pair summed exactly",
    "fft": "the cross-entropy with its normaliser interpolated on a grid (FFT), an approximation",
    "sampled": "a Monte Carlo estimate of the cross-entropy, its normaliser from sampled pairs",
    "negative_sampling": "umap-learn's negative-sampling surrogate (sampled non-edges, "
                         "down-weighted), not the cross-entropy itself",
}


def loss_is(est) -> str:
    """The report's ``loss_is``: what ``loss`` is, and what the fit optimised (by its repulsion,
    with early exaggeration where the fit had some)."""
    from ..estimators.fitted import early_exaggeration_steps

    repulsion = (getattr(est, "model_kwargs_", None) or {}).get("repulsion",
                                                               getattr(est, "repulsion", None))
    optimised = OPTIMISED_IS.get(repulsion, "the method's objective")
    ee, n_iter = float(getattr(est, "early_exaggeration", 1.0)), getattr(est, "n_iter", None)
    if ee != 1.0 and n_iter is not None:
        steps = early_exaggeration_steps(est.early_exaggeration_iter, n_iter)
        optimised += f", its attraction multiplied by {ee:g} during the first {steps} steps"
    return f"{LOSS_IS}; the fit optimised (the progress bar's loss) {optimised}"


#: options that apply to some methods or inferences only: dest -> (applies, what ignores it)
SCOPED = {
    "perplexity": (lambda a: a.method != "umap", lambda a: "--method umap (it uses --n-neighbors)"),
    "n_neighbors": (lambda a: a.method == "umap",
                    lambda a: f"--method {a.method} (it uses --perplexity)"),
    "num_samples": (lambda a: a.inference != "map", lambda a: "--inference map"),
    "coupling_weight": (lambda a: a.inference != "map", lambda a: "--inference map"),
    "num_steps": (lambda a: a.inference == "svi", lambda a: f"--inference {a.inference}"),
    "guide": (lambda a: a.inference == "svi", lambda a: f"--inference {a.inference}"),
    "num_chains": (lambda a: a.inference in ("hmc", "mcmc"),
                   lambda a: f"--inference {a.inference}"),
    "warmup": (lambda a: a.inference in ("hmc", "mcmc"), lambda a: f"--inference {a.inference}"),
}
_UNSET = object()  # the default of every option in the parser that finds the options given


def given_options(argv) -> set[str]:
    """The options (their ``dest``) written on the command line ``argv``, not defaults."""
    probe = build_parser(defaults=False)
    return {k for k, v in vars(probe.parse_args(argv)).items() if v is not _UNSET and v != []}


def ignored_options(args, given) -> list[str]:
    """One warning for each option given that the chosen method or inference does not use."""
    return [f"--{dest.replace('_', '-')} does not apply to {where(args)}; ignored."
            for dest, (applies, where) in SCOPED.items() if dest in given and not applies(args)]


def _check_options(args) -> None:
    """The options and every path the command reads or writes, before anything is loaded."""
    for bad, message in (
            (args.nproc < 1, "--nproc must be at least 1"),
            (args.n_jobs == 0, "--n-jobs must be a positive number of threads or negative "
                               "(-1: every core, -2: all but one)"),
            (args.nproc > 1 and args.method not in PARALLEL_METHODS,
             f"--nproc runs {', '.join(PARALLEL_METHODS)} data-parallel; {args.method} runs "
             "in one process"),
            (args.nproc > 1 and args.inference != "map", "--nproc applies to MAP fits"),
            (args.metric_param and args.metric is None, "--metric-param needs --metric"),
            (args.target_weight is not None and not args.supervised,
             "--target-weight needs --supervised"),
            (args.supervised and args.labels is None and not is_bundled(args.data),
             "--supervised needs --labels"),
            (args.inference == "map" and args.uncertainty_plot,
             "--uncertainty-plot needs --inference svi, laplace or mcmc"),
            (args.use_rep is not None and file_suffix(args.data) != ".h5ad",
             "--use-rep applies to .h5ad data only"),
            (args.drop_columns and (is_bundled(args.data) or file_suffix(args.data) in
                                    (".npy", ".h5ad")),
             "--drop-columns applies to .csv, .tsv and .txt tables")):
        if bad:
            raise ValueError(message + ".")
    paths = [(args.out, "--out"), (args.plot, "--plot"), (
        uncertainty_path(args) if args.inference != "map" else None, "--uncertainty-plot")]
    for path, option in paths:
        check_path(path, option)
        suffix = file_suffix(path or "")
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
    if not is_bundled(args.data):
        if not os.path.exists(args.data):
            raise ValueError(f"--data {args.data!r}: no such file, and not a bundled data set "
                             f"({', '.join(BUNDLED)}).")
        check_path(args.data, "--data", write=False)
        suffix = file_suffix(args.data, compressed=True)
        if suffix not in DATA_SUFFIXES:
            raise ValueError(f"--data {args.data!r}: unknown format {suffix or '(no suffix)'!r}; "
                             f"probdr reads {', '.join(DATA_SUFFIXES)} (tables also compressed, "
                             "e.g. .csv.gz).")
        paths.append((args.data, "--data"))
    if args.labels and (is_bundled(args.data) or file_suffix(args.data) == ".npy"):
        check_path(args.labels, "--labels", write=False)  # a file: no columns to name
    named = [(os.path.abspath(p), o) for p, o in paths if p]
    for i, (path, option) in enumerate(named):
        for other in (o for q, o in named[:i] if q == path):
            raise ValueError(f"{other} and {option} name the same file {path!r}.")


def _make(method: str, args):
    from .. import estimators as est

    cls = {"sne": est.SNE, "tsne": est.TSNE, "largevis": est.LargeVis, "umap": est.UMAP,
           "tsnekhorn": est.TSNEkhorn, "snekhorn": est.SNEkhorn}[method]
    common = dict(n_components=args.n_components, random_state=args.random_state,
                  device=getattr(args, "device", "auto"), n_jobs=getattr(args, "n_jobs", None),
                  verbose=not getattr(args, "quiet", False) and rank() == 0,
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
    if args.n_iter is not None:  # early exaggeration: the estimators' "auto" share of n_iter
        kw["n_iter"] = args.n_iter
    return cls(**kw)




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




def _embed(args) -> dict[str, Any] | None:
    _check_options(args)  # before the heavy imports (main has checked already)
    import numpy as np
    import scipy.sparse as sp

    from .. import metrics, plotting

    quiet = args.quiet or rank() != 0
    note = (lambda m: None) if quiet else (lambda m: print(f"probdr: {m}", file=sys.stderr))
    X, labels, info = load_data(args)
    for warning in info.get("warnings", []):
        note(f"warning: {warning}")
    est = _make(args.method, args)
    n, p = int(X.shape[0]), info.pop("p")
    note(f"{args.data}: {n} rows x {p} features" + (
        f" (header row: {'yes' if info['header'] else 'no'})" if "header" in info else "") + (
        f"; labels: {labels.source}, {labels.n_classes} classes, "
        f"{int((~labels.known).sum())} unknown" if labels is not None else ""))
    t0 = time.perf_counter()
    Z = est.fit_transform(X, labels.codes) if args.supervised else est.fit_transform(X)
    elapsed, Z = time.perf_counter() - t0, np.asarray(Z)
    if rank() != 0:  # every rank holds the same embedding; rank 0 measures and writes it
        return None
    world = world_size()
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
    if n <= 20_000:
        report.update(loss=round(est.loss(Z), 4), loss_is=loss_is(est))

    outputs: dict[str, str] = {}
    if args.out:
        posterior = None if getattr(est, "posterior_", None) is None else {
            "sd": est.posterior_sd_, "reliability": est.reliability_, "stability": est.stability_}
        write_embedding(args.out, Z, labels, posterior)
        note(f"embedding written to {args.out}")
        outputs["embedding"] = args.out
    y_plot = labels.for_plot() if labels is not None else None
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        save_figure(plotting.plot_embedding(
            Z, y_plot, title=f"{DISPLAY[args.method]} on {os.path.basename(args.data)}"),
            args.plot)
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
    return key, float(value) if is_number(value) else value


class _HelpWithDefaults(argparse.HelpFormatter):
    """``--help`` with each option's default, where it has one worth showing."""

    def _get_help_string(self, action):
        text, default = action.help or "", action.default
        if "default" in text or any(default is d for d in (None, False, _UNSET)) or \
                default in ([], argparse.SUPPRESS) or not action.option_strings:
            return text
        return text + " (default: %(default)s)"


def build_parser(defaults: bool = True) -> argparse.ArgumentParser:
    """The ``probdr`` parser; with ``defaults=False`` every option of ``embed`` defaults to a
    marker, so that a parse tells the options given from the defaults (:func:`given_options`)."""
    p = argparse.ArgumentParser(prog="probdr", description="Dimensionality reduction as "
                                "probabilistic programs on Pyro.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    e = p.add_subparsers(dest="command", required=True).add_parser(
        "embed", help="fit an embedding of a data file, print a JSON report, write it and a plot",
        description="Fit an embedding of a data file or a bundled data set. Standard output "
                    "carries only the JSON report; progress and notes go to standard error.",
        formatter_class=_HelpWithDefaults)
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
    io.add_argument("--drop-columns", type=lambda t: [c.strip() for c in t.split(",")],
                    action="extend", default=[], metavar="NAME[,NAME...]",
                    help="leave these columns of a table out (an ID or text column; by "
                         "0-based position without a header row); repeatable")
    io.add_argument("--scale", choices=("none", "standard"), default="none",
                    help="standard: give every feature zero mean and unit variance first "
                         "(sparse data: unit variance only); none warns when the features' "
                         "scales differ by 100 times or more")
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
    io.add_argument("--n-jobs", type=int, default=None, metavar="N",
                    help="at most N threads (per process with --nproc); -1 every core, -2 all "
                         "but one; fewer while other processes hold cores (default: every core "
                         "that is free)")
    m = e.add_argument_group("model")
    m.add_argument("--method", choices=METHODS, default="tsne", help="the method")
    m.add_argument("--n-components", type=int, default=2, help="embedding dimension")
    m.add_argument("--perplexity", type=float, default=30.0,
                   help="the neighbourhood size of every method but UMAP")
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
    m.add_argument("--random-state", type=int, default=0, help="seed of every random draw")
    v = e.add_mutually_exclusive_group()
    v.add_argument("--quiet", action="store_true", help="no progress bar, no notes on stderr")
    v.add_argument("--verbose", action="store_true", help="progress bar (the default)")
    add_bayes_arguments(e)
    if not defaults:
        e.set_defaults(**dict.fromkeys(
            (k for k, v in vars(e.parse_args([])).items() if v != []), _UNSET))
    return p


def main(argv=None) -> int:
    """Run the ``probdr`` command; returns its exit code (2 on bad input). The arguments, options
    and paths are checked with the standard library alone, before anything heavy is imported."""
    args = build_parser().parse_args(argv)
    try:
        _check_options(args)  # bad input fails here, before torch loads or any process starts
        if "TORCHELASTIC_RUN_ID" not in os.environ:  # once, not in every process of --nproc
            for warning in ignored_options(args, given_options(argv)):
                print(f"probdr: {warning}", file=sys.stderr)
        if args.nproc > 1 and "TORCHELASTIC_RUN_ID" not in os.environ:
            return launch(args.nproc, sys.argv[1:] if argv is None else list(argv))
        with process_group():
            return embed(args)
    except (ValueError, ImportError, OSError, MemoryError) as exc:
        print(f"probdr: error: {exc}", file=sys.stderr)
        return 2
