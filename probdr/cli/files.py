"""Reading the data files of ``probdr embed`` and writing its embeddings and figures: ``.npy``;
``.csv``, ``.tsv``, whitespace ``.txt`` (compressed too), with the header row detected; ``.h5ad``;
the labels (a column, an ``obs`` column or a file); the checks of the paths. The module imports
only the standard library: numpy, pandas, anndata and matplotlib are imported by the functions
that read and write, so the command checks its paths before loading them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..datasets import NAMES as BUNDLED

if TYPE_CHECKING:
    import numpy as np

#: delimited text formats and their separators (compressed ones, ``.csv.gz`` etc., read too)
TABLES = {".csv": ",", ".tsv": "\t", ".txt": r"\s+"}
COMPRESSIONS = (".gz", ".bz2", ".xz", ".zip", ".zst")
DATA_SUFFIXES = (".npy", *TABLES, ".h5ad")
OUT_SUFFIXES = (".npy", ".csv", ".tsv")
UNLABELLED = "(unlabelled)"  # the plot's legend entry for unknown labels


def is_bundled(data: str) -> bool:
    """Whether ``--data`` names a bundled data set (and no file of that name)."""
    return data in BUNDLED and not os.path.exists(data)


def file_suffix(path: str, compressed: bool = False) -> str:
    """The lower-cased suffix of ``path`` (``.csv`` for ``x.csv.gz`` when ``compressed``)."""
    name = os.path.basename(path).lower()
    if compressed:
        name = next((name[: -len(c)] for c in COMPRESSIONS if name.endswith(c)), name)
    return os.path.splitext(name)[1]


def is_number(text: str) -> bool:
    """Whether ``text`` reads as a number."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def check_path(path: str | None, option: str, write: bool = True) -> None:
    """Fail before the fit if an output file cannot be written (or an input file read)."""
    if not path:
        return
    target = os.path.abspath(path)
    parent = os.path.dirname(target)
    if os.path.isdir(target):
        raise ValueError(f"{option} {path!r} is a directory; give a file name.")
    checks = [(not os.path.exists(target), "no such file"),
              (not os.access(target, os.R_OK), "the file is not readable")] if not write else [
        (not os.path.isdir(parent), f"the directory {parent!r} does not exist"),
        (not os.access(parent, os.W_OK), f"the directory {parent!r} is not writable"),
        (os.path.exists(target) and not os.access(target, os.W_OK), "the file is not writable")]
    for bad, problem in checks:
        if bad:
            raise ValueError(f"{option} {path!r}: {problem}.")


@dataclass
class Labels:
    """One label per row: ``names`` (numbers or text as read, ``""`` where unknown), ``codes``
    (0..k-1, -1 where unknown: empty, NaN, or -1 with ``--supervised``) and their source."""

    names: np.ndarray
    codes: np.ndarray
    source: str

    @classmethod
    def from_raw(cls, raw, source: str, minus_one_unknown: bool = False) -> Labels:
        import numpy as np

        arr = np.asarray(raw, dtype=object)
        arr = arr.ravel() if arr.ndim == 2 and 1 in arr.shape else arr
        if arr.ndim != 1:
            raise ValueError(f"labels ({source}): one label per row, got shape {arr.shape}.")
        names = [str(v).strip() for v in arr]
        names = ["" if v in ("None", "nan", "NaN", "<NA>") else v for v in names]
        if all(is_number(v) for v in names if v):  # numbers, integers when they are
            names = [v and (int(float(v)) if float(v).is_integer() else float(v)) for v in names]
        names = np.array(names, dtype=object)
        known = np.array([v != "" and not (minus_one_unknown and v == -1) for v in names], bool)
        codes = np.full(len(names), -1, dtype=np.int64)
        codes[known] = np.unique(names[known], return_inverse=True)[1]
        return cls(names, codes, source)

    known = property(lambda self: self.codes >= 0)
    n_classes = property(lambda self: int(self.codes.max()) + 1)

    def for_plot(self) -> np.ndarray:
        import numpy as np

        return self.names if self.known.all() else np.array(
            [str(v) if c >= 0 else UNLABELLED for v, c in zip(self.names, self.codes,
                                                              strict=True)], dtype=object)


def _pandas():
    try:
        import pandas
    except ImportError as exc:  # pragma: no cover - pandas comes with arviz
        raise ImportError("tables (.csv, .tsv, .txt) need pandas: pip install pandas") from exc
    return pandas


def _parse(pd, path: str, **kw):
    """``pandas.read_csv`` with its parser's errors named by the file and explained."""
    try:
        return pd.read_csv(path, **kw)
    except pd.errors.EmptyDataError:
        raise ValueError(f"--data {path!r} is empty.") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"--data {path!r} is not UTF-8 text (byte {exc.object[exc.start]:#04x} "
                         f"at position {exc.start}); is it a binary file? probdr reads "
                         ".csv/.tsv/.txt text tables, .npy arrays and .h5ad files.") from None
    except pd.errors.ParserError as exc:
        why = str(exc).strip().removeprefix("Error tokenizing data. C error: ")
        raise ValueError(f"--data {path!r} could not be read as a table: {why}. Every row needs "
                         "the same number of fields, separated by the file type's separator "
                         "(comma for .csv, tab for .tsv, spaces for .txt), with quotes closed."
                         ) from None


def _read_table(path: str, header: str, spec: str | None, minus_one: bool, drop=()):
    """A delimited table: numeric feature columns and, optionally, the label column ``spec``;
    the columns ``drop`` (names, or 0-based positions without a header row) left out."""
    import numpy as np

    pd = _pandas()
    sep = TABLES[file_suffix(path, compressed=True)]
    kw = dict(sep=sep, skipinitialspace=sep != r"\s+")
    first = _parse(pd, path, header=None, nrows=1, dtype=str, keep_default_na=False, **kw)
    cells = [str(c).strip() for c in first.iloc[0]]
    # auto: a first row with a cell that is not a number is a header
    has_header = any(c and not is_number(c) for c in cells) if header == "auto" else \
        header == "yes"
    # an empty first header cell (pandas' to_csv with its index, R's write.csv): row names
    row_names = has_header and len(cells) > 1 and cells[0] == ""
    df = _parse(pd, path, header=0 if has_header else None, index_col=0 if row_names else None,
                **kw)
    if len(df) == 0:
        raise ValueError(f"--data {path!r} has no data rows.")
    first_line = 2 if has_header else 1
    doubt = ""  # a header guessed from text cells over text columns only: say so
    if header == "auto" and has_header and all(not pd.api.types.is_numeric_dtype(df[c])
                                               for c in df.columns if not is_number(str(c))):
        doubt = " (the first row was read as a header, as it holds text; if it is data, give " \
                "--header no)"
    name = (lambda c: repr(c)) if has_header else (lambda c: f"{c} (0-based)")
    labels = col = None
    if spec is not None:
        if spec in df.columns:
            col = spec
        elif not has_header and spec.lstrip("-").isdigit() and \
                -df.shape[1] <= int(spec) < df.shape[1]:
            col = df.columns[int(spec)]
        if col is not None:
            labels = Labels.from_raw(df[col].to_numpy(), f"column {name(col)}", minus_one)
        elif not os.path.exists(spec):
            what = (f"a column of {path!r} ({column_choices(spec, df.columns)})" if has_header
                    else f"a column position of {path!r} (it has no header row; "
                    f"0..{df.shape[1] - 1})")
            raise ValueError(f"--labels {spec!r} is neither {what} nor a file{doubt}.")
    dropped = [_column(df, c, has_header, path, doubt) for c in drop]
    feats = df.drop(columns=([col] if col is not None else []) + dropped)
    if feats.shape[1] == 0:
        raise ValueError(f"--data {path!r} has no feature column besides the labels.")
    bad = []
    for c in feats.columns:
        if not (pd.api.types.is_bool_dtype(feats[c]) or pd.api.types.is_numeric_dtype(feats[c])):
            text = feats[c].notna() & pd.to_numeric(feats[c], errors="coerce").isna()
            i = int(np.flatnonzero(text.to_numpy())[0])
            bad.append(f"{name(c)} ({feats[c].iloc[i]!r} on line {first_line + i})")
    if bad:
        hint = "give its position with --labels N (no header row), or leave it out with " \
            "--drop-columns N" if not has_header and spec is None else "name the label " \
            "column with --labels COLUMN and leave other text columns out with --drop-columns " \
            "NAME[,NAME...]"
        raise ValueError(f"--data {path!r}: non-numeric column{'s' * (len(bad) > 1)} "
                         f"{', '.join(bad)}; probdr embeds numeric features only: {hint}"
                         f"{doubt}.")
    X = feats.to_numpy(dtype=np.float64)
    missing = ~np.isfinite(X)
    if missing.any():
        i, j = np.argwhere(missing)[0]
        raise ValueError(f"--data {path!r}: {int(missing.sum())} missing or infinite value(s), "
                         f"the first on line {first_line + i} (column {name(feats.columns[j])})"
                         "; fill or drop them first.")
    info = {"format": file_suffix(path, compressed=True)[1:], "header": has_header}
    return X, labels, {**info, "row_names": True} if row_names else info


def _column(df, spec: str, has_header: bool, path: str, doubt: str = ""):
    """The column of ``--drop-columns`` named (or, without a header row, numbered) ``spec``."""
    if spec in df.columns:
        return spec
    if not has_header and spec.lstrip("-").isdigit() and -df.shape[1] <= int(spec) < df.shape[1]:
        return df.columns[int(spec)]
    what = column_choices(spec, df.columns) if has_header else \
        f"it has no header row: give positions 0..{df.shape[1] - 1}"
    raise ValueError(f"--drop-columns {spec!r} is not a column of {path!r} ({what}){doubt}.")


def _read_h5ad(path: str, use_rep: str | None, spec: str | None, minus_one: bool):
    try:
        import anndata
    except ImportError as exc:
        raise ImportError("reading .h5ad files needs anndata: pip install anndata") from exc
    import numpy as np
    import scipy.sparse as sp

    try:
        adata = anndata.read_h5ad(path)
    except (OSError, KeyError, ValueError) as exc:
        raise ValueError(f"--data {path!r} is not a readable .h5ad file ({exc}).") from exc
    rep = use_rep or ("X_pca" if "X_pca" in adata.obsm else "X")
    keys = ", ".join(adata.obsm.keys()) or "(none)"
    if (rep != "X" and rep not in adata.obsm) or (rep == "X" and adata.X is None):
        raise ValueError(f"--use-rep {rep!r} is not a key of obsm in {path!r}; keys: {keys}, "
                         "or X." if rep != "X" else f"--data {path!r} has no X; choose "
                         f"--use-rep from obsm: {keys}.")
    X = adata.X if rep == "X" else adata.obsm[rep]
    X = X.to_numpy() if hasattr(X, "to_numpy") else X
    X = X.tocsr() if sp.issparse(X) else np.asarray(X)  # a sparse X is passed on as it is
    labels = None
    if spec is not None and spec in adata.obs.columns:
        labels = Labels.from_raw(adata.obs[spec].to_numpy(object), f"obs[{spec!r}]", minus_one)
    elif spec is not None and not os.path.exists(spec):
        raise ValueError(f"--labels {spec!r} is neither an obs column of {path!r} "
                         f"({column_choices(spec, adata.obs.columns)}) nor a file.")
    return X, labels, {"format": "h5ad", "use_rep": rep, "sparse": bool(sp.issparse(X))}


#: up to this many columns, a message lists them all; beyond, the closest ten
LIST_ALL = 50


def column_choices(spec: str, columns) -> str:
    """The columns a ``--labels`` name could have meant, for its error message: "did you mean
    'x'?" for a close name (:func:`difflib.get_close_matches`), then every column when there are
    at most :data:`LIST_ALL`, else the ten closest.

    Parameters
    ----------
    spec : str
        The name given.
    columns : sequence
        The table's column names.

    Returns
    -------
    str
        E.g. ``"did you mean 'species'? columns: 'a', 'b', 'species'"``.
    """
    import difflib

    names = [str(c) for c in columns]
    close = difflib.get_close_matches(spec, names, n=10, cutoff=0.5)
    hint = f"did you mean {close[0]!r}? " if close else ""
    if not names:
        return "it has no columns"
    if len(names) <= LIST_ALL:
        return hint + "columns: " + ", ".join(map(repr, names))
    near = close or difflib.get_close_matches(spec, names, n=10, cutoff=0.0)
    return hint + f"the closest of its {len(names)} columns: " + ", ".join(map(repr, near))


def load_data(args):
    """``--data`` with ``--labels``, ``--use-rep``, ``--pca``: ``(X, labels or None, info)``;
    ``X`` is an array, or scipy sparse from an ``.h5ad``."""
    import numpy as np
    import scipy.sparse as sp

    from .. import datasets

    minus_one, spec = bool(args.supervised), args.labels
    labels, info = None, {}
    if is_bundled(args.data):
        X, y = datasets.load(args.data, random_state=args.random_state or 0)
        labels = Labels.from_raw(y, "bundled", minus_one)
    elif file_suffix(args.data) == ".npy":
        X, info = np.load(args.data, allow_pickle=False), {"format": "npy"}
        if X.ndim != 2:
            raise ValueError(f"--data {args.data!r} holds an array of shape {X.shape}; probdr "
                             "needs a 2-D array (rows x features).")
    elif file_suffix(args.data) == ".h5ad":
        X, labels, info = _read_h5ad(args.data, args.use_rep, spec, minus_one)
    else:
        X, labels, info = _read_table(args.data, args.header, spec, minus_one,
                                      args.drop_columns)
    if spec is not None and (labels is None or labels.source == "bundled"):  # a labels file
        check_path(spec, "--labels", write=False)
        if file_suffix(spec) == ".npy":
            raw = np.load(spec, allow_pickle=False)
        else:
            with open(spec, encoding="utf-8") as f:
                raw = f.read().splitlines()
        labels = Labels.from_raw(raw, f"file {spec!r}", minus_one)
        if len(labels.names) != X.shape[0]:
            raise ValueError(f"--labels {spec!r} holds {len(labels.names)} labels for "
                             f"{X.shape[0]} rows of data (one label per line, no header).")
    if labels is not None and not labels.known.any():
        raise ValueError(f"no row has a known label ({labels.source}).")
    info["p"] = int(X.shape[1])
    X, warning = scale_features(X, args.scale)
    if args.scale != "none":
        info["scale"] = args.scale
    if warning:
        info["warnings"] = [warning]
    if args.pca is not None:
        if not 1 <= args.pca <= min(X.shape):
            raise ValueError(f"--pca must lie in [1, {min(X.shape)}] for these data.")
        if sp.issparse(X):  # centred PCA of a sparse matrix, without making it dense
            from sklearn.decomposition import PCA

            X = PCA(args.pca, svd_solver="arpack", random_state=0).fit_transform(X)
        else:
            X = datasets._pca(np.asarray(X, dtype=np.float64), args.pca)
    return X, labels, info


#: a warning when the largest feature's standard deviation is this many times the median one's
SCALE_WARN_RATIO = 100.0


def scale_features(X, how: str):
    """``X`` with ``--scale`` applied (``standard``: each feature to unit variance, centred where
    ``X`` is dense; a constant feature is left as it is) and, with ``none``, a warning when the
    features' standard deviations differ by :data:`SCALE_WARN_RATIO` or more (the largest
    then dominate the distances)."""
    import numpy as np
    import scipy.sparse as sp

    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
        sd = np.sqrt(np.maximum(np.asarray(X.multiply(X).mean(0)).ravel()
                                - np.asarray(X.mean(0)).ravel() ** 2, 0.0))
    else:
        X = np.asarray(X, dtype=np.float64)
        sd = X.std(0)
    live = sd[sd > 0]
    if how == "standard":
        unit = np.where(sd > 0, sd, 1.0)
        return (X.multiply(1.0 / unit).tocsr() if sp.issparse(X)
                else (X - X.mean(0)) / unit), None
    if live.size < 2 or live.max() < SCALE_WARN_RATIO * np.median(live):
        return X, None
    return X, (f"the features' standard deviations range from {live.min():.3g} to "
               f"{live.max():.3g} (the largest {live.max() / np.median(live):.0f} times the "
               "median): the largest dominate the distances; --scale standard gives every "
               "feature unit variance")


def write_embedding(path: str, Z: np.ndarray, labels: Labels | None = None,
                    extra: dict[str, np.ndarray] | None = None) -> None:
    """Write ``Z`` to exactly ``path``: ``.npy``, or ``.csv`` / ``.tsv`` with a header ``z1, z2,
    ...``, a ``label`` column when labels are given and the per-point columns of ``extra``
    (a posterior fit's ``sd``, ``reliability`` and ``stability``)."""
    import numpy as np

    suffix = file_suffix(path)
    if suffix not in OUT_SUFFIXES:
        raise ValueError(f"cannot write the embedding as {suffix!r}; use .npy, .csv or .tsv.")
    if suffix == ".npy":
        with open(path, "wb") as f:  # np.save(name) appends .npy to a name without it
            return np.save(f, Z)
    table = _pandas().DataFrame(Z, columns=[f"z{j + 1}" for j in range(Z.shape[1])])
    if labels is not None:
        table["label"] = labels.names
    for name, values in (extra or {}).items():
        table[name] = values
    # float32 values (the estimators' default dtype) are written with the 9 digits they need
    single = np.array_equal(Z, np.asarray(Z, dtype=np.float32))
    table.to_csv(path, sep="," if suffix == ".csv" else "\t", index=False,
                 float_format="%.9g" if single else None)


def save_figure(ax, path: str) -> None:
    """Write the figure of the axes ``ax`` to ``path`` (its format by the suffix) and close it."""
    import matplotlib.pyplot as plt

    ax.figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(ax.figure)
