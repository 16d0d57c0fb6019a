"""The command line on real tables: an ID column left out (``--drop-columns``), features of
very different scales standardised (``--scale standard``) or warned about, and a ``loss_is``
that says what each method's fit optimised."""

import json

import numpy as np
import pytest
from sklearn.datasets import load_wine

from probdr.cli import command as cli

pd = pytest.importorskip("pandas")
FAST = ["--quiet", "--perplexity", "10", "--n-iter", "150", "--n-jobs", "1"]


@pytest.fixture(scope="module")
def wine_csv(tmp_path_factory):
    """scikit-learn's wine table in raw units, an ID column first, the cultivar last."""
    data = load_wine(as_frame=True)
    df = data.frame.rename(columns={"target": "cultivar"})
    df.insert(0, "sample_id", [f"w{i:03d}" for i in range(len(df))])
    path = tmp_path_factory.mktemp("wine") / "wine.csv"
    df.to_csv(path, index=False)
    return path


def _run(capsys, *argv):
    rc = cli.main(["embed", *argv])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if rc == 0 else None), out.err


def test_id_column_refused_with_the_flag_to_drop_it(wine_csv, capsys):
    rc, _, err = _run(capsys, "--data", str(wine_csv), "--labels", "cultivar", *FAST)
    assert rc == 2 and "'sample_id'" in err and "--drop-columns" in err


def test_raw_units_warn_and_scale_standard_fixes_the_neighbours(wine_csv, capsys):
    base = ["--data", str(wine_csv), "--labels", "cultivar", "--drop-columns", "sample_id",
            "--quiet", "--n-jobs", "1"]  # the defaults: raw units 0.67, standardised 0.96
    rc, raw, _ = _run(capsys, *base)
    assert rc == 0 and raw["p"] == 13 and "scale" not in raw
    assert len(raw["warnings"]) == 1 and "--scale standard" in raw["warnings"][0]
    rc, scaled, _ = _run(capsys, *base, "--scale", "standard")
    assert rc == 0 and scaled["scale"] == "standard" and "warnings" not in scaled
    assert scaled["knn_accuracy@5"] > 0.9 > raw["knn_accuracy@5"]


def test_drop_columns_checks_its_names(wine_csv, capsys):
    rc, _, err = _run(capsys, "--data", str(wine_csv), "--drop-columns", "sample_idd", *FAST)
    assert rc == 2 and "--drop-columns 'sample_idd'" in err and "sample_id" in err
    rc, _, err = _run(capsys, "--data", "digits", "--drop-columns", "0", *FAST)
    assert rc == 2 and "applies to .csv, .tsv and .txt tables" in err


def test_scale_standard_matches_scikit_learn():
    from sklearn.preprocessing import StandardScaler

    from probdr.cli.files import scale_features

    X = load_wine().data
    Xs, warning = scale_features(X, "standard")
    np.testing.assert_allclose(Xs, StandardScaler().fit_transform(X), atol=1e-12)
    assert warning is None and scale_features(X, "none")[1] is not None
    digits = pytest.importorskip("probdr").datasets.load("digits")[0]
    assert scale_features(digits, "none")[1] is None  # pixels: one scale, no warning


@pytest.mark.parametrize("method, n, says", [
    ("umap", 300, "negative-sampling surrogate"),
    ("tsne", 300, "every pair summed exactly, its attraction multiplied by 12 during the first 50"),
    ("tsne", 1200, "interpolated on a grid (FFT)"),
])
def test_loss_is_says_what_the_fit_optimised(method, n, says, tmp_path, capsys):
    from probdr import datasets

    path = tmp_path / "X.npy"
    np.save(path, datasets.load("digits", n_samples=n)[0])
    rc, report, _ = _run(capsys, "--method", method, "--data", str(path), *FAST)
    assert rc == 0 and report["loss_is"].startswith("the coupling cross-entropy")
    assert says in report["loss_is"]
