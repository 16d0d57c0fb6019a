"""The benchmark suite's page and metrics (``benchmarks/suite.py``, ``suite_report.py``), on
made-up results: no fit is run here and no timing is asserted."""

import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
suite = pytest.importorskip("suite")
report = pytest.importorskip("suite_report")


def _result(data, method, wall, trust=0.9, machine="m1", date="2026-01-02", status="ok", n=100):
    r = {"data": data, "method": method, "seed": 0, "n": n, "machine": machine, "date": date,
         "versions": {"probdr": "0.1.0"}, "status": status}
    if status == "ok":
        r.update(wall_s=wall, peak_rss_gib=0.5, trust15=trust, cont15=0.9, knn5=0.95,
                 spearman=0.5, density=0.3, finite=True)
    else:
        r.update(limit_s=600, limit_gib=16, error="")
    return r


def test_page_states_the_comparison_first_and_every_fit(tmp_path):
    results = [_result("digits", "opentsne", 10.0), _result("digits", "probdr-tsne", 5.0, 0.95),
               _result("mnistdef70k", "opentsne", 200.0, n=70000),
               _result("mnistdef70k", "probdr-tsne", 100.0, n=70000),
               _result("mnistdef70k", "sklearn-tsne", 0, status="timeout", n=70000)]
    page = tmp_path / "benchmarks.md"
    report.write_page(results, page, tmp_path / "_static" / "fig.svg", suite.DATASETS,
                      suite.METHODS)
    text = page.read_text()
    first = text.split("\n\n")[1]
    assert first.startswith("**At the defaults, on 70,000 points") and "**0.50×** openTSNE" in first
    assert "| probdr TSNE (vs openTSNE) | 5.0 | 0.50× |" in text
    assert "| scikit-learn TSNE | stopped at 600 s |" in text
    assert "Measured on 2026-01-02: digits, mnistdef70k on m1;" in text
    assert (tmp_path / "_static" / "fig.svg").stat().st_size > 1000


def test_summary_states_every_large_data_set_then_the_range_of_the_others():
    results = [_result("digits", "opentsne", 10.0), _result("digits", "probdr-tsne", 20.0),
               _result("mnistdef70k", "opentsne", 200.0, n=70000),
               _result("mnistdef70k", "probdr-tsne", 100.0, n=70000),
               _result("mnistdef1m", "umap-learn", 400.0, n=10**6),
               _result("mnistdef1m", "probdr-umap", 100.0, n=10**6)]
    text = report.summary(report.latest(results), suite.METHODS)
    assert text.index("on 1,000,000 points") < text.index("on 70,000 points")
    assert "**0.25×** umap-learn" in text and "**0.50×** openTSNE" in text
    assert "the time ratios are probdr TSNE 2.00–2.00× openTSNE's. A fit" in text
    assert text.endswith("a ratio near 1 is within that noise.")  # the spread between runs


def test_only_the_latest_machine_meets_in_a_table(tmp_path):
    """A data set's table holds the results of the machine that last ran it; another data
    set's table keeps its own machine's."""
    results = [_result("mnist5k", "opentsne", 10.0, machine="old"),
               _result("digits", "opentsne", 10.0, machine="old"),
               _result("digits", "probdr-tsne", 5.0, machine="new")]
    rows = report.latest(results)
    assert list(rows) == [("mnist5k", "opentsne"), ("digits", "probdr-tsne")]
    assert "time ratio" in "\n".join(report.table(rows, "digits", suite.METHODS))
    assert "0.50×" not in "\n".join(report.table(rows, "digits", suite.METHODS))


def test_each_comparison_keeps_the_machine_that_last_ran_it(tmp_path):
    """probdr's UMAP and umap-learn re-run on a new machine replace their pair only; the
    t-SNE pair of the old machine stays, and the page says which rows ran where."""
    results = [_result("mnistdef1m", "opentsne", 400.0, machine="old", n=10**6),
               _result("mnistdef1m", "probdr-tsne", 100.0, machine="old", n=10**6),
               _result("mnistdef1m", "umap-learn", 300.0, machine="old", n=10**6),
               _result("mnistdef1m", "probdr-umap", 150.0, machine="old", n=10**6),
               _result("mnistdef1m", "probdr-umap", 80.0, machine="new", n=10**6),
               _result("mnistdef1m", "umap-learn", 200.0, machine="new", n=10**6)]
    rows = report.latest(results, suite.METHODS)
    assert {m: r["machine"] for (_, m), r in rows.items()} == {
        "opentsne": "old", "probdr-tsne": "old", "probdr-umap": "new", "umap-learn": "new"}
    text = "\n".join(report.table(rows, "mnistdef1m", suite.METHODS))
    assert "| probdr UMAP (vs umap-learn) | 80.0 | 0.40× |" in text
    assert "| probdr TSNE (vs openTSNE) | 100.0 | 0.25× |" in text
    note = report.machines_note(rows, "mnistdef1m", suite.METHODS)
    assert "openTSNE, probdr TSNE on old" in note[-1] and "on new" in note[-1]
    assert "mnistdef1m (opentsne, probdr-tsne) on old" in report.measured(results, rows)
    # a reference stopped at its time limit: probdr's time bounds the ratio
    results.append(_result("mnistdef1m", "umap-learn", 0, machine="new", status="timeout",
                           n=10**6))
    text = report.summary(report.latest(results, suite.METHODS), suite.METHODS)
    assert "probdr UMAP takes 80 s, **under 0.13×** umap-learn's time, which was stopped at " \
        "600 s" in text
    # without the methods, the data set's last machine holds the whole table
    assert {r["machine"] for r in report.latest(results).values()} == {"new"}


def test_leave_one_out_knn_accuracy_matches_scikit_learn():
    from sklearn.model_selection import LeaveOneOut, cross_val_score
    from sklearn.neighbors import KNeighborsClassifier

    rng = np.random.default_rng(0)
    Z = rng.normal(size=(80, 2))
    y = (Z[:, 0] + 0.5 * rng.normal(size=80) > 0).astype(int)
    ref = cross_val_score(KNeighborsClassifier(5), Z, y, cv=LeaveOneOut()).mean()
    assert suite.loo_knn_accuracy(Z, y, 5) == pytest.approx(ref)


def test_the_plan_refuses_unknown_names():
    class Args:
        data, methods = ["digits"], ["probdr-tsne", "nope"]

    with pytest.raises(SystemExit, match="unknown methods"):
        suite.plan(Args())


def test_epoch_steps_table_keeps_the_latest_result_of_each_fit(tmp_path):
    import json

    rows = [dict(variant="steps4", n=70000, wall_s=9.0, trust15=0.8, knn5=0.7, date="2026-01-01",
                 load_before=0.5),
            dict(variant="steps2", n=70000, wall_s=9.0, trust15=0.8, knn5=0.7, date="2026-01-01",
                 load_before=0.5),  # an earlier run's only: its time does not compare, left out
            dict(variant="umap-learn", n=70000, wall_s=8.0, trust15=0.85, knn5=0.9,
                 date="2026-01-02", load_before=0.7),
            dict(variant="steps4", n=70000, wall_s=10.0, trust15=0.9, knn5=0.95,
                 date="2026-01-02", load_before=0.7),
            dict(variant="e60s12", n=70000, seed=1, wall_s=4.0, trust15=0.8, knn5=0.9,
                 date="2026-01-02", load_before=0.7),
            dict(variant="e60s12", n=70000, seed=2, wall_s=6.0, trust15=0.9, knn5=0.8,
                 date="2026-01-02", load_before=0.7)]
    path = tmp_path / "steps.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = report.epoch_steps_section(path)
    table = [ln for ln in lines if ln.startswith("| 70,000")]
    assert table == [  # the latest of each seed, the mean over seeds, by epochs and steps
        "| 70,000 | probdr, 60 epochs × 12 steps | 2 | 5.0 | 0.8500 | 0.8500 |",
        "| 70,000 | probdr, 200 epochs × 4 steps | 1 | 10.0 | 0.9000 | 0.9500 |",
        "| 70,000 | umap-learn | 1 | 8.0 | 0.8500 | 0.9000 |"]
    assert report.epoch_steps_section(tmp_path / "none.jsonl") == []


def test_small_schedule_table_is_by_data_set_from_its_latest_run(tmp_path):
    import json

    base = dict(n=569, trust15=0.9, knn5=0.95, load_before=0.8)
    rows = [dict(base, data="breast_cancer", variant="e500s1", seed=0, wall_s=9.0,
                 date="2026-01-01"),  # an earlier run's only: left out
            dict(base, data="breast_cancer", variant="default", seed=0, wall_s=0.3,
                 date="2026-01-02"),
            dict(base, data="breast_cancer", variant="default", seed=1, wall_s=0.5,
                 date="2026-01-02", load_before=1.2),
            dict(base, data="breast_cancer", variant="umap-learn", seed=0, wall_s=0.6,
                 date="2026-01-02")]
    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = report.small_schedule_section(path)
    assert [ln for ln in lines if ln.startswith("| breast_cancer")] == [
        "| breast_cancer | probdr, default | 2 | 0.40 | 0.9000 | 0.9500 |",
        "| breast_cancer | umap-learn | 1 | 0.60 | 0.9000 | 0.9500 |"]
    assert any("0.80 to 1.20" in ln for ln in lines)
    assert report.small_schedule_section(tmp_path / "none.jsonl") == []
