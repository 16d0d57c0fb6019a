import json

import numpy as np

from probdr import cli


def test_cli_embed_writes_embedding_and_plot(tmp_path, capsys):
    out, png = tmp_path / "emb.npy", tmp_path / "emb.png"
    rc = cli.main(["embed", "--method", "umap", "--data", "digits", "--n-iter", "30",
                   "--out", str(out), "--plot", str(png)])
    assert rc == 0
    Z = np.load(out)
    assert Z.shape == (1797, 2) and np.isfinite(Z).all()
    assert png.stat().st_size > 1000
    text = capsys.readouterr().out
    report = json.loads(text[:text.rindex("}") + 1])
    assert 0.5 < report["trustworthiness@15"] <= 1.0 and "knn_accuracy@5" in report


def test_cli_bad_argument_is_a_clear_error(capsys, tmp_path):
    bad = tmp_path / "bad.npy"
    np.save(bad, np.full((50, 4), np.nan))
    rc = cli.main(["embed", "--data", str(bad)])
    assert rc == 2
    assert "NaN" in capsys.readouterr().err


def test_cli_embed_tsnekhorn(tmp_path, capsys):
    from sklearn.datasets import load_digits

    data, out = tmp_path / "d.npy", tmp_path / "emb.npy"
    np.save(data, load_digits().data[:150])
    rc = cli.main(["embed", "--method", "tsnekhorn", "--data", str(data), "--perplexity", "10",
                   "--n-iter", "150", "--out", str(out)])
    assert rc == 0
    Z = np.load(out)
    assert Z.shape == (150, 2) and np.isfinite(Z).all()
    text = capsys.readouterr().out
    report = json.loads(text[:text.rindex("}") + 1])
    assert report["method"] == "tsnekhorn" and 0.8 < report["trustworthiness@15"] <= 1.0
    rc = cli.main(["embed", "--method", "snekhorn", "--data", str(data), "--inference", "svi"])
    assert rc == 2 and "MAP only" in capsys.readouterr().err


def test_cli_small_data_reports_trustworthiness_at_a_smaller_k(tmp_path, capsys):
    data, out = tmp_path / "small.npy", tmp_path / "z.npy"
    np.save(data, np.random.default_rng(0).normal(size=(25, 4)))
    rc = cli.main(["embed", "--data", str(data), "--perplexity", "5", "--out", str(out)])
    assert rc == 0 and np.load(out).shape == (25, 2)
    text = capsys.readouterr().out
    report = json.loads(text[:text.rindex("}") + 1])
    assert 0.0 <= report["trustworthiness@12"] <= 1.0  # k < n / 2


def test_cli_output_paths_are_checked_before_the_fit(tmp_path, capsys, monkeypatch):
    import probdr

    def no_fit(*args, **kwargs):
        raise AssertionError("the fit ran before the output path was checked")

    monkeypatch.setattr(probdr.TSNE, "fit_transform", no_fit)
    for option in ("--out", "--plot"):
        rc = cli.main(["embed", "--data", "digits", option, str(tmp_path / "missing" / "x")])
        assert rc == 2
        assert "does not exist" in capsys.readouterr().err
    rc = cli.main(["embed", "--data", "digits", "--out", str(tmp_path)])
    assert rc == 2 and "directory" in capsys.readouterr().err
