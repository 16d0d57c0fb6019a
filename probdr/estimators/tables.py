"""Input checks that name what is wrong in a table: the non-numeric columns and the columns with
missing values of a pandas DataFrame, and probdr's own message for NaN or infinite entries of any
dense input (in place of scikit-learn's advice on estimators that accept NaN)."""

from __future__ import annotations

from typing import Any

#: what to do about missing values, the end of every NaN message
IMPUTE = ("drop those rows (e.g. df.dropna()), or impute them, e.g. with "
          "sklearn.impute.SimpleImputer in a sklearn.pipeline.Pipeline before the estimator")


def _names(columns, limit: int = 10) -> str:
    shown = ", ".join(repr(str(c)) for c in columns[:limit])
    return shown + (f", ... ({len(columns)} in all)" if len(columns) > limit else "")


def check_table(X: Any, who: str) -> None:
    """Raise a clear error if ``X`` is a pandas DataFrame with non-numeric columns (their
    names, and a value of the first) or with missing values (the columns that hold them).

    Parameters
    ----------
    X : object
        The input; anything other than a DataFrame passes unchecked.
    who : str
        The estimator's name, for the message.

    Raises
    ------
    ValueError
        Naming the offending columns.
    """
    if not (hasattr(X, "columns") and hasattr(X, "dtypes") and hasattr(X, "isna")):
        return
    from pandas.api.types import is_numeric_dtype

    bad = [c for c, d in zip(X.columns, X.dtypes, strict=True) if not is_numeric_dtype(d)]
    if bad:
        first = X[bad[0]].dropna()
        value = f" (e.g. {first.iloc[0]!r})" if len(first) else ""
        raise ValueError(
            f"{who} needs numeric features; the DataFrame's column(s) {_names(bad)} are not "
            f"numeric{value}. Drop them (df.drop(columns=[...])), pass labels as y, or encode "
            "them as numbers (e.g. sklearn.preprocessing.OneHotEncoder).")
    holes = X.isna().sum()
    holes = holes[holes > 0]
    if len(holes):
        where = ", ".join(f"{str(c)!r} ({int(k)})" for c, k in list(holes.items())[:10])
        raise ValueError(f"{who}: the DataFrame has missing values (NaN) in column(s) {where}"
                         f"{', ...' if len(holes) > 10 else ''}; {IMPUTE}.")


def reword_nonfinite(exc: ValueError, who: str) -> ValueError:
    """probdr's message for scikit-learn's "Input X contains NaN / infinity" error; other
    errors are returned unchanged."""
    text = str(exc)
    if "contains NaN" in text:
        return ValueError(f"{who}: X contains NaN (missing values); {IMPUTE}.")
    if "contains infinity" in text:
        return ValueError(f"{who}: X contains infinity (or values too large for "
                          "float64); remove those rows or clip the values.")
    return exc
