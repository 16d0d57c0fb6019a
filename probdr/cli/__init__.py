"""The ``probdr`` command line: ``probdr embed --data cells.csv --labels cell_type --out emb.csv
--plot emb.png`` reads a data file (``.npy``; ``.csv``, ``.tsv``, whitespace-separated ``.txt``,
with or without a header row; ``.h5ad``) or a bundled data set, fits an embedding, writes it and a
plot, and prints one JSON report on standard output; progress bars, notes and warnings go to
standard error. Every path is checked before the fit (exit code 2). See ``docs/cli.md``.

:mod:`~probdr.cli.command` holds the parser, the checks and the fit; :mod:`~probdr.cli.files`
reads the data and writes the outputs; :mod:`~probdr.cli.bayes` the posterior options and
outputs; :mod:`~probdr.cli.parallel` the data-parallel runs (``--nproc``). Every one of them
imports only the standard library at module level: the argument parser and the checks of the
options and paths run before numpy, torch, scikit-learn or Pyro are imported, so ``probdr
--help``, ``--version`` and bad arguments answer at once; the fit imports what it needs after
them. Run as the ``probdr`` command (or ``python -m probdr``, ``python -m probdr.cli``),
``import probdr`` does not import the estimators either (see :mod:`probdr`).
"""

from .command import main

__all__ = ["main"]
