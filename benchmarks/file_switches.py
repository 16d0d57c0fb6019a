"""How many times one fit switches files inside ``probdr/estimators/``: a reader following
``UMAP().fit_transform(X)`` by hand through the estimator layer (at most 10; the test
``tests/estimators/test_reading_path.py`` holds it).

Every Python call made during the fit (``sys.setprofile``, "call" events) whose code lives in a
file of ``probdr/estimators/`` is one stop of the reader; calls elsewhere (laws, models, the
driver, scikit-learn) are not. A switch is a stop in another file than the previous stop. The
count does not depend on the data's size or the number of optimiser steps unless estimator code
runs inside the optimisation loop (callbacks, hooks): then it grows with the steps, and the
path lists them.

    python benchmarks/file_switches.py                 # UMAP, 200 digits
    python benchmarks/file_switches.py --estimator TSNE --path

Prints the count and, with ``--path``, the files in the order the reader visits them.
"""

from __future__ import annotations

import argparse
import os
import sys

import probdr
from probdr import datasets


def visited_files(fn) -> list[str]:
    """The files of ``probdr/estimators/`` whose functions ``fn()`` calls, in call order,
    consecutive repeats merged (the reader's path)."""
    root = os.path.join(os.path.dirname(probdr.__file__), "estimators") + os.sep
    path: list[str] = []

    def profile(frame, event, arg):
        if event != "call":
            return
        name = frame.f_code.co_filename
        if name.startswith(root):
            short = name[len(root):]
            if not path or path[-1] != short:
                path.append(short)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--estimator", default="UMAP")
    ap.add_argument("--n", type=int, default=200, help="digits fitted")
    ap.add_argument("--path", action="store_true", help="print the files in visiting order")
    args = ap.parse_args(argv)
    X, _ = datasets.load("digits", n_samples=args.n)
    est = getattr(probdr, args.estimator)(random_state=0)
    path = visited_files(lambda: est.fit_transform(X))
    if args.path:
        print(" -> ".join(p.removesuffix(".py") for p in path))
    print(f"{args.estimator}().fit_transform(X): {len(path) - 1} switches between "
          f"{len(set(path))} files of probdr/estimators/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
