import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import probdr
from probdr.cli import command as cli
from probdr.cli.files import UNLABELLED, Labels

FAST = ["--quiet", "--perplexity", "10", "--n-iter", "150"]


def _report(capsys):
    """Standard output must be exactly one JSON document."""
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def table():
    """90 rows, 4 numeric features in 3 clusters, and a text label column."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    names = np.array(["setosa", "versicolor", "virginica"])
    y = np.repeat(np.arange(3), 30)
    X = rng.normal(size=(90, 4)) + 10.0 * np.eye(3, 4)[y]
    df = pd.DataFrame(X, columns=["sepal length", "sepal width", "petal length", "petal width"])
    df["species"] = names[y]
    return df


@pytest.fixture
def no_fit(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the fit ran before the input was checked")

    for cls in (probdr.TSNE, probdr.UMAP):
        monkeypatch.setattr(cls, "fit_transform", fail)


def test_cli_embed_writes_embedding_and_plot(tmp_path, capsys):
    out, png = tmp_path / "emb.npy", tmp_path / "emb.png"
    rc = cli.main(["embed", "--method", "umap", "--data", "digits", "--n-iter", "30",
                   "--out", str(out), "--plot", str(png)])
    assert rc == 0
    Z = np.load(out)
    assert Z.shape == (1797, 2) and np.isfinite(Z).all()
    assert png.stat().st_size > 1000
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert 0.5 < report["trustworthiness@15"] <= 1.0 and "knn_accuracy@5" in report
    assert report["n"] == 1797 and report["p"] == 64 and report["metric"] == "euclidean"
    assert report["outputs"] == {"embedding": str(out), "plot": str(png)}
    assert report["loss_is"].startswith("the coupling cross-entropy") and "loss" in report
    assert set(cli.DISPLAY) == set(cli.METHODS) and cli.DISPLAY["tsne"] == "t-SNE"
    # the notes and the progress bar (on by default) go to standard error
    assert f"embedding written to {out}" in captured.err and "UMAP" in captured.err


def test_cli_csv_with_header_and_text_labels(tmp_path, capsys, monkeypatch, table):
    import pandas as pd

    import probdr.plotting as plotting

    axes = []
    plot = plotting.plot_embedding
    monkeypatch.setattr(plotting, "plot_embedding",
                        lambda *a, **k: axes.append(plot(*a, **k)) or axes[-1])
    data, out, png = tmp_path / "flowers.csv", tmp_path / "x.csv", tmp_path / "x.png"
    table.to_csv(data, index=False)
    rc = cli.main(["embed", "--data", str(data), "--labels", "species", "--out", str(out),
                   "--plot", str(png), *FAST])
    assert rc == 0
    report = _report(capsys)
    assert report["header"] is True and (report["n"], report["p"]) == (90, 4)
    assert report["labels"] == "column 'species'" and report["n_classes"] == 3
    assert report["knn_accuracy@5"] > 0.9
    # the plot is coloured by the three labels: one colour and one legend entry each
    ax = axes[-1]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "setosa", "versicolor", "virginica"]
    assert len({tuple(c.get_facecolor()[0]) for c in ax.collections}) == 3
    assert png.stat().st_size > 1000
    # --out x.csv writes exactly x.csv: a header, the coordinates and the labels
    assert sorted(os.listdir(tmp_path)) == ["flowers.csv", "x.csv", "x.png"]
    emb = pd.read_csv(out)
    assert list(emb.columns) == ["z1", "z2", "label"] and emb.shape == (90, 3)
    assert (emb["label"] == table["species"]).all() and np.isfinite(emb[["z1", "z2"]]).all().all()


def test_cli_out_npy_writes_exactly_that_file(tmp_path, capsys):
    data, out = tmp_path / "d.npy", tmp_path / "x.npy"
    np.save(data, np.random.default_rng(0).normal(size=(40, 3)))
    assert cli.main(["embed", "--data", str(data), "--out", str(out), *FAST]) == 0
    assert np.load(out).shape == (40, 2)
    assert sorted(os.listdir(tmp_path)) == ["d.npy", "x.npy"]
    assert _report(capsys)["format"] == "npy"


@pytest.mark.parametrize("kind", ["tsv", "headerless", "txt"])
def test_cli_reads_tsv_headerless_csv_and_whitespace_text(kind, tmp_path, capsys, table):
    features = table.drop(columns="species")
    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(table["species"]) + "\n")
    if kind == "tsv":
        data = tmp_path / "d.tsv"
        table.to_csv(data, sep="\t", index=False)
        args = ["--labels", "species"]
    elif kind == "headerless":
        data = tmp_path / "d.csv"
        features.to_csv(data, header=False, index=False)
        args = ["--labels", str(labels)]
    else:
        data = tmp_path / "d.txt"
        features.to_csv(data, sep=" ", header=False, index=False)
        args = ["--labels", str(labels)]
    out = tmp_path / "z.tsv"
    assert cli.main(["embed", "--data", str(data), *args, "--out", str(out), *FAST]) == 0
    report = _report(capsys)
    assert (report["n"], report["p"], report["header"]) == (90, 4, kind == "tsv")
    assert report["n_classes"] == 3 and report["knn_accuracy@5"] > 0.9
    assert out.read_text().splitlines()[0] == "z1\tz2\tlabel"


def test_cli_headerless_label_column_by_position(tmp_path, capsys, table):
    """A headerless file whose label column is text: its first row looks like a header, the
    error says so, and --header no with a column position reads it."""
    data = tmp_path / "d.csv"
    table.to_csv(data, header=False, index=False)
    assert cli.main(["embed", "--data", str(data), *FAST]) == 2
    assert "--header no" in capsys.readouterr().err
    assert cli.main(["embed", "--data", str(data), "--header", "no", "--labels", "4",
                     *FAST]) == 0
    report = _report(capsys)
    assert report["n"] == 90 and report["p"] == 4 and report["n_classes"] == 3


def test_cli_stdout_is_one_json_document(tmp_path, table):
    data, out = tmp_path / "d.csv", tmp_path / "z.npy"
    table.to_csv(data, index=False)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    embed = subprocess.Popen(
        [sys.executable, "-m", "probdr.cli", "embed", "--data", str(data), "--labels",
         "species", "--out", str(out), "--perplexity", "10", "--n-iter", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    tool = subprocess.run([sys.executable, "-m", "json.tool"], stdin=embed.stdout,
                          capture_output=True, text=True, timeout=300)
    embed.stdout.close()
    err = embed.stderr.read().decode()
    assert embed.wait(timeout=300) == 0, err
    assert tool.returncode == 0, tool.stderr
    report = json.loads(tool.stdout)
    assert report["data"] == str(data) and report["n"] == 90 and "seconds" in report
    assert "embedding written to" in err and "TSNE" in err  # notes and progress: stderr


def test_cli_bad_argument_is_a_clear_error(capsys, tmp_path):
    bad = tmp_path / "bad.npy"
    np.save(bad, np.full((50, 4), np.nan))
    rc = cli.main(["embed", "--data", str(bad)])
    assert rc == 2
    assert "NaN" in capsys.readouterr().err


def test_cli_bad_inputs_fail_before_the_fit(tmp_path, capsys, no_fit, table):
    good = tmp_path / "good.csv"
    table.to_csv(good, index=False)
    ids = tmp_path / "ids.csv"
    table.assign(sample=[f"s{i}" for i in range(90)]).to_csv(ids, index=False)
    holes = tmp_path / "holes.csv"
    table.assign(**{"petal width": table["petal width"].where(table.index != 7)}).to_csv(
        holes, index=False)
    features = tmp_path / "features.csv"
    table.drop(columns="species").to_csv(features, index=False)
    short = tmp_path / "short.txt"
    short.write_text("a\nb\n")
    odd = tmp_path / "d.xlsx"
    odd.write_text("x")
    cases = [
        (["--data", str(tmp_path / "missing.csv")], "no such file"),
        (["--data", str(odd)], "unknown format '.xlsx'"),
        (["--data", str(good)], "non-numeric column 'species' ('setosa' on line 2)"),
        (["--data", str(ids), "--labels", "species"], "non-numeric column 'sample'"),
        (["--data", str(holes), "--labels", "species"], "line 9 (column 'petal width')"),
        (["--data", str(good), "--labels", "kind"], "neither a column"),
        (["--data", str(features), "--labels", str(short)], "holds 2 labels for 90 rows"),
        (["--data", "digits", "--labels", str(tmp_path / "nope.txt")], "no such file"),
        (["--data", str(good), "--labels", "species", "--out", str(tmp_path / "z.txt")],
         "written as .npy, .csv or .tsv"),
        (["--data", str(good), "--labels", "species", "--out", str(tmp_path / "z")],
         "got 'none'"),
        (["--data", str(good), "--labels", "species", "--plot", str(tmp_path / "p.foo")],
         "figure format"),
        (["--data", str(good), "--labels", "species", "--out", str(good)], "same file"),
        (["--data", str(good), "--labels", "species", "--use-rep", "X_pca"], ".h5ad data only"),
        (["--data", str(good), "--labels", "species", "--metric-param", "p=3"],
         "needs --metric"),
        (["--data", "digits", "--n-jobs", "0"], "--n-jobs must be a positive"),
    ]
    for argv, message in cases:
        assert cli.main(["embed", *argv]) == 2, argv
        captured = capsys.readouterr()
        assert captured.out == "" and message in captured.err, (argv, captured.err)


def test_cli_output_paths_are_checked_before_the_fit(tmp_path, capsys, no_fit):
    for option, name in (("--out", "x.npy"), ("--plot", "x.png")):
        rc = cli.main(["embed", "--data", "digits", option, str(tmp_path / "missing" / name)])
        assert rc == 2
        assert "does not exist" in capsys.readouterr().err
    rc = cli.main(["embed", "--data", "digits", "--out", str(tmp_path)])
    assert rc == 2 and "directory" in capsys.readouterr().err


def test_cli_embed_tsnekhorn(tmp_path, capsys):
    from sklearn.datasets import load_digits

    data, out = tmp_path / "d.npy", tmp_path / "emb.npy"
    np.save(data, load_digits().data[:150])
    rc = cli.main(["embed", "--method", "tsnekhorn", "--data", str(data), "--perplexity", "10",
                   "--n-iter", "150", "--out", str(out), "--quiet"])
    assert rc == 0
    Z = np.load(out)
    assert Z.shape == (150, 2) and np.isfinite(Z).all()
    report = _report(capsys)
    assert report["method"] == "tsnekhorn" and 0.8 < report["trustworthiness@15"] <= 1.0
    rc = cli.main(["embed", "--method", "snekhorn", "--data", str(data), "--inference", "svi"])
    assert rc == 2 and "MAP only" in capsys.readouterr().err


def test_cli_small_data_reports_trustworthiness_at_a_smaller_k(tmp_path, capsys):
    data, out = tmp_path / "small.npy", tmp_path / "z.npy"
    np.save(data, np.random.default_rng(0).normal(size=(25, 4)))
    rc = cli.main(["embed", "--data", str(data), "--perplexity", "5", "--out", str(out),
                   "--quiet"])
    assert rc == 0 and np.load(out).shape == (25, 2)
    assert 0.0 <= _report(capsys)["trustworthiness@12"] <= 1.0  # k < n / 2


def test_cli_posterior_summary_is_part_of_the_report(tmp_path, capsys, table):
    data, png, out = tmp_path / "d.csv", tmp_path / "p.png", tmp_path / "z.csv"
    table.to_csv(data, index=False)
    rc = cli.main(["embed", "--data", str(data), "--labels", "species", "--inference", "svi",
                   "--num-steps", "20", "--num-samples", "5", "--plot", str(png), "--out",
                   str(out), *FAST])
    assert rc == 0
    report = _report(capsys)
    post = report["posterior"]
    assert post["inference"] == "svi" and post["draws"] == 5
    written = pd.read_csv(out)  # each point's spread and reliability beside its coordinates
    assert list(written.columns) == ["z1", "z2", "label", "sd", "reliability", "stability"]
    assert written["sd"].gt(0).all() and written["reliability"].between(0, 1).all()
    assert written["stability"].between(0, 1).all()
    assert post["reliability_p10"] == round(float(written["reliability"].quantile(0.1)), 4)
    assert post["unstable_points"] == int((written["stability"] < 0.5).sum())
    assert report["outputs"]["uncertainty_plot"] == str(tmp_path / "p_uncertainty.png")
    assert (tmp_path / "p_uncertainty.png").exists()


def test_labels_unknown_and_numeric_text():
    raw = np.array(["1", " 2", "", "-1", None], dtype=object)
    lab = Labels.from_raw(raw, "test")
    assert lab.names.tolist() == [1, 2, "", -1, ""] and lab.codes.tolist() == [1, 2, -1, 0, -1]
    sup = Labels.from_raw(raw, "test", minus_one_unknown=True)
    assert sup.codes.tolist() == [0, 1, -1, -1, -1] and sup.n_classes == 2
    assert sup.for_plot().tolist() == ["1", "2", UNLABELLED, UNLABELLED, UNLABELLED]
    text = Labels.from_raw(["b", "a", float("nan")], "test")
    assert text.codes.tolist() == [1, 0, -1] and text.names.tolist() == ["b", "a", ""]
    floats = Labels.from_raw(np.array([1.0, np.nan, 2.0], dtype=np.float32), "test")
    assert floats.names.tolist() == [1, "", 2] and floats.known.tolist() == [True, False, True]


def test_metric_param_parsing():
    assert cli._metric_param("p=3") == ("p", 3.0)
    assert cli._metric_param("w = abc") == ("w", "abc")
    with pytest.raises(Exception, match="KEY=VALUE"):
        cli._metric_param("p3")


@pytest.mark.skipif("metric" not in probdr.TSNE().get_params(),
                    reason="the estimators have no metric parameter yet")
def test_cli_metric_is_passed_to_the_estimator(tmp_path, capsys, monkeypatch, table):
    made = []
    make = cli._make
    monkeypatch.setattr(cli, "_make", lambda *a: made.append(make(*a)) or made[-1])
    data = tmp_path / "d.csv"
    table.to_csv(data, index=False)
    rc = cli.main(["embed", "--data", str(data), "--labels", "species", "--metric", "cosine",
                   *FAST])
    assert rc == 0
    report = _report(capsys)
    assert report["metric"] == "cosine" and made[-1].metric == "cosine"
    assert 0.0 < report["trustworthiness@15"] <= 1.0
    rc = cli.main(["embed", "--data", str(data), "--labels", "species", "--metric", "minkowski",
                   "--metric-param", "p=3", *FAST])
    assert rc == 0
    assert _report(capsys)["metric_params"] == {"p": 3.0} == made[-1].metric_params


@pytest.mark.skipif("target_weight" not in probdr.UMAP().get_params(),
                    reason="the estimators do not fit on labels yet")
def test_cli_supervised_passes_labels_with_unknowns(tmp_path, capsys, monkeypatch, table):
    seen = []
    fit = probdr.UMAP.fit_transform

    def spy(self, X, y=None, **kw):
        seen.append((self.target_weight, None if y is None else np.asarray(y)))
        return fit(self, X, y, **kw)

    monkeypatch.setattr(probdr.UMAP, "fit_transform", spy)
    data = tmp_path / "d.csv"
    table.assign(species=table["species"].where(table.index % 3 != 0, "")).to_csv(
        data, index=False)
    rc = cli.main(["embed", "--method", "umap", "--data", str(data), "--labels", "species",
                   "--supervised", "--target-weight", "0.5", *FAST])
    assert rc == 0
    report = _report(capsys)
    assert report["supervised"] is True and report["labelled"] == 60
    weight, y = seen[-1]
    assert weight == 0.5 and (y[::3] == -1).all() and set(y.tolist()) == {-1, 0, 1, 2}
    assert cli.main(["embed", "--data", str(data), "--target-weight", "1", *FAST]) == 2
    assert "needs --supervised" in capsys.readouterr().err


def _anndata():
    return pytest.importorskip("anndata")


def test_cli_h5ad_obsm_and_obs_labels(tmp_path, capsys, table):
    anndata = _anndata()
    import pandas as pd

    X = table.drop(columns="species").to_numpy()
    obs = pd.DataFrame({"cell_type": pd.Categorical(table["species"])},
                       index=[f"c{i}" for i in range(len(X))])
    adata = anndata.AnnData(X=np.zeros((len(X), 7), dtype=np.float32), obs=obs)
    adata.obsm["X_pca"] = X
    path = tmp_path / "cells.h5ad"
    adata.write_h5ad(path)
    rc = cli.main(["embed", "--data", str(path), "--labels", "cell_type", *FAST])
    assert rc == 0
    report = _report(capsys)
    assert report["use_rep"] == "X_pca" and (report["n"], report["p"]) == (90, 4)
    assert report["labels"] == "obs['cell_type']" and report["knn_accuracy@5"] > 0.9
    assert cli.main(["embed", "--data", str(path), "--use-rep", "X_umap"]) == 2
    assert "not a key of obsm" in capsys.readouterr().err


def test_cli_h5ad_sparse_x_is_passed_through(tmp_path, capsys, monkeypatch, table):
    anndata = _anndata()
    import scipy.sparse as sp

    class Recorder:
        def fit_transform(self, X):
            self.X = X
            return np.random.default_rng(0).normal(size=(X.shape[0], 2))

        def loss(self, Z):
            return 0.0

    rec = Recorder()
    monkeypatch.setattr(cli, "_make", lambda *a: rec)
    X = sp.random(90, 30, density=0.2, format="csr", random_state=0, dtype=np.float32)
    path = tmp_path / "sparse.h5ad"
    anndata.AnnData(X=X).write_h5ad(path)
    assert cli.main(["embed", "--data", str(path), "--quiet"]) == 0
    report = _report(capsys)
    assert report["use_rep"] == "X" and report["sparse"] is True and report["p"] == 30
    assert sp.issparse(rec.X) and rec.X.shape == (90, 30)


def test_cli_labels_typo_suggests_the_column(tmp_path, capsys, no_fit, table):
    pd = pytest.importorskip("pandas")
    good = tmp_path / "good.csv"
    table.to_csv(good, index=False)
    assert cli.main(["embed", "--data", str(good), "--labels", "specie"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'species'?" in err and "'petal width', 'species'" in err
    wide = pd.DataFrame(np.zeros((6, 60)), columns=[f"gene{i}" for i in range(60)])
    wide["cell_type"] = list("ababab")
    path = tmp_path / "wide.csv"
    wide.to_csv(path, index=False)
    assert cli.main(["embed", "--data", str(path), "--labels", "cell_typ"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'cell_type'?" in err and "closest of its 61 columns" in err
    assert "gene59" not in err


def test_cli_warns_of_options_the_method_does_not_use(capsys, monkeypatch):
    monkeypatch.setattr(cli, "embed", lambda args: 0)  # the warnings come before the fit
    cases = [
        (["--method", "umap", "--perplexity", "50"],
         ["--perplexity does not apply to --method umap (it uses --n-neighbors); ignored."]),
        (["--method", "tsne", "--n-neighbors=30", "--num-steps", "5"],
         ["--n-neighbors does not apply to --method tsne (it uses --perplexity); ignored.",
          "--num-steps does not apply to --inference map; ignored."]),
        (["--method", "umap", "--n-neighbors", "30"], []),
        (["--method", "tsne", "--perplexity", "30"], []),  # given, even at the default value
        (["--inference", "svi", "--warmup", "10"],
         ["--warmup does not apply to --inference svi; ignored."]),
        ([], []),  # defaults are never named
    ]
    for argv, warnings in cases:
        assert cli.main(["embed", *argv]) == 0
        err = capsys.readouterr().err
        assert [line for line in err.splitlines() if "ignored" in line] == [
            f"probdr: {w}" for w in warnings], (argv, err)


def test_cli_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["embed", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for default in ("(default: tsne)", "(default: 30.0)", "(default: 15)", "(default: 0)",
                    "(default: map)", "(default: 1000)", "(default: digits)"):
        assert default in text, default
    assert "(default: None)" not in text and "(default: False)" not in text


def test_cli_unreadable_tables_are_named_and_explained(tmp_path, capsys, no_fit):
    ragged, binary, quote, empty = (tmp_path / f"{n}.csv" for n in ("r", "b", "q", "e"))
    ragged.write_text("a,b,c\n1,2,3\n6,7,8,9\n")
    binary.write_bytes(b"\xff\xfe\x00PK")
    quote.write_text('a,b\n"1,2\n3,4\n')
    empty.write_text("")
    cases = [(ragged, ["could not be read as a table", "Expected 3 fields in line 3, saw 4",
                       "same number of fields"]),
             (binary, ["is not UTF-8 text (byte 0xff at position 0)", "binary file"]),
             (quote, ["could not be read as a table", "quotes closed"]),
             (empty, ["is empty"])]
    for path, messages in cases:
        assert cli.main(["embed", "--data", str(path)]) == 2, path
        err = capsys.readouterr().err
        assert f"--data {str(path)!r}" in err and all(m in err for m in messages), err
        assert "Traceback" not in err and "C error" not in err


def test_cli_plot_title_uses_the_display_name(tmp_path, monkeypatch, capsys):
    from probdr.cli import command

    titles = []
    monkeypatch.setattr(command, "save_figure", lambda ax, path: titles.append(ax.get_title()))
    rc = cli.main(["embed", "--method", "tsne", "--data", "digits", "--n-iter", "30", "--quiet",
                   "--plot", str(tmp_path / "p.png")])
    assert rc == 0 and titles == ["t-SNE on digits"], capsys.readouterr().err


def test_cli_n_jobs_caps_the_fits_threads(tmp_path, capsys, monkeypatch):
    import torch

    seen = []
    fit = probdr.TSNE.fit_transform

    def record(self, X, *args, **kwargs):
        seen.append(self.n_jobs)
        self.set_params(callbacks=lambda *a: seen.append(torch.get_num_threads()),
                        callbacks_every=10)
        return fit(self, X, *args, **kwargs)

    monkeypatch.setattr(probdr.TSNE, "fit_transform", record)
    data = tmp_path / "x.npy"
    np.save(data, np.random.default_rng(0).normal(size=(60, 3)))
    assert cli.main(["embed", "--data", str(data), "--n-jobs", "1", *FAST]) == 0
    assert seen[0] == 1 and set(seen[1:]) == {1}
