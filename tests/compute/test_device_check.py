"""The GPU check (``benchmarks/device_check.py``) keeps working where CI runs: its CPU dry run on
tiny sizes, end to end (children, budget, JSON and Markdown), and its report's logic."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "device_check.py")


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("device_check")
    cmd = [sys.executable, SCRIPT, "--device", "cpu", "--n", "400", "--n-big", "0", "--no-torchdr",
           "--no-tests", "--quick", "--agree-n", "150", "--budget", "300", "--out", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(out / "device_check.json") as f:
        return json.load(f), (out / "device_check.md").read_text(), proc.stdout


def test_dry_run_fits_and_measures(dry_run):
    report, _, _ = dry_run
    assert report["machine"]["device"] == "cpu"
    for key in ("probdr-umap", "probdr-tsne"):
        fit = report["fits"][key]
        assert fit["status"] == "ok", fit
        assert fit["n"] == 400 and fit["finite"]
        assert fit["wall_s"] > 0 and fit["peak_gib"] > 0
        assert 0.8 < fit["trust15"] <= 1 and 0.3 < fit["knn5"] <= 1
    assert report["data"]["400"]["status"] == "ok"
    edges = report["edge_pass"]  # uncompiled in the dry run: the same sums, another code
    assert edges["status"] == "ok" and edges["edges"] == 400 * 64
    assert edges["value_rel_err"] < 1e-5 and edges["grad_rel_err"] < 1e-5


def test_dry_run_agreement_and_repeatability(dry_run):
    agree = dry_run[0]["agreement"]
    assert agree["status"] == "ok"
    for method in ("tsne", "umap"):
        a = agree[method]
        assert a["agree"] and a["trust_gap"] == 0.0  # the CPU against itself
        assert a["repeat"] == "bitwise" and a["procrustes"] < 1e-12
        assert a["host_syncs_per_fit"] == -1  # counted on CUDA only


def test_report_is_printed_and_written(dry_run):
    report, table, stdout = dry_run
    assert table in stdout and "| probdr-tsne | 400 |" in table
    assert "Device tests: skipped: --no-tests" in table
    assert json.loads(stdout[: stdout.rindex("}") + 1])["fits"].keys() == report["fits"].keys()


@pytest.fixture(scope="module")
def device_check():
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        import device_check
    finally:
        sys.path.pop(0)
    return device_check


def test_device_knn_accuracy_is_the_metric(device_check):
    """The blocked on-device 5-NN accuracy of the check is probdr.metrics.knn_accuracy (here on
    the CPU; votes with ties, blocks that do not divide n; distances without ties, whose order
    torch.topk leaves open)."""
    import numpy as np
    import torch

    from probdr import metrics

    rng = np.random.default_rng(3)
    Z = rng.normal(size=(1500, 2))
    y = rng.integers(0, 7, 1500)
    got = device_check._knn_accuracy_on_device(torch.tensor(Z), y, 5, block=256)
    assert got == metrics.knn_accuracy(Z, y, 5)


def test_a_step_without_budget_is_skipped_not_run(device_check):
    class Args:
        device, quick = "cpu", True

    r = device_check._run_child("agree", device_check.Budget(5), 100, [], Args())
    assert r["status"] == "skipped" and "budget" in r["why"]


def test_torchdr_runs_where_its_dense_affinities_fit(device_check, monkeypatch):
    """Without FAISS, TorchDR's affinities are n x n (3.7 TB at 1M): the plan puts TorchDR at
    --n-mid only, each beside probdr at the same size; with FAISS it also runs at --n."""
    args = device_check.main.__globals__["argparse"].Namespace(
        n=1_000_000, n_mid=50_000, n_big=0, no_torchdr=False, methods="umap,tsne",
        edge_pass=True)
    monkeypatch.setattr(device_check, "_has_faiss", lambda: False)
    plan = {key: (lib, n) for key, lib, _, n, _, _ in device_check._fits_plan(args)}
    assert all(n == 50_000 for key, (lib, n) in plan.items() if lib == "torchdr")
    for key in ("torchdr-umap-mid", "torchdr-tsne-mid", "torchdr-umap-compiled-mid"):
        assert key in plan
    assert plan["probdr-umap-mid"] == ("probdr", 50_000)
    monkeypatch.setattr(device_check, "_has_faiss", lambda: True)
    plan = {key: (lib, n) for key, lib, _, n, _, _ in device_check._fits_plan(args)}
    assert plan["torchdr-umap"] == ("torchdr", 1_000_000)
    args.methods = "tsne"
    assert [k for k, *_ in device_check._fits_plan(args) if "umap" in k] == ["torchdr-umap"]
