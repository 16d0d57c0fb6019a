"""The GPU check in one command: device tests, probdr beside TorchDR at a million points,
CPU-vs-device agreement, repeatability and the host synchronisations of the loop.

    python benchmarks/device_check.py                       # on a CUDA machine (about 9 min)
    python benchmarks/device_check.py --device cpu --n 20000 --no-torchdr   # a dry run anywhere

Steps, in order of importance, each in its own process with a time cap, skipped (and said so)
when the budget (``--budget`` seconds, default 540) would not hold it:

1. the machine and the versions;
2. agreement: TSNE and UMAP on the digits with the same seed on the CPU and on the device
   (trustworthiness@15 within 0.01, Procrustes disparity), the device fit twice (bitwise or
   the largest difference), and the host synchronisations counted inside the optimiser's steps
   after the first two (CUDA's sync debug mode; 0 expected);
3. the device tests: ``tests/compute/test_devices.py``, ``tests/compute/test_sync_free.py`` and every test
   parametrised over devices, ``-m "not slow"``;
4. deformed MNIST generated on the device (``probdr.datasets.mnist_deformed(device=...)``);
5. probdr UMAP and TSNE at ``--n`` points (default 1M; ``--methods`` picks them); TorchDR's
   UMAP beside them only where FAISS is installed (TorchDR's affinities without FAISS or KeOps
   are dense, n x n: 3.7 TB at 1M); UMAP and TSNE of both libraries at ``--n-mid`` points
   (default 50,000, where the dense affinities fit), and TorchDR's UMAP with
   ``compile=True`` there; probdr UMAP at ``--n-big`` (5M) if time is left. Each: wall time,
   peak ``torch.cuda.max_memory_allocated``, trustworthiness@15 on a 3,000-point sample, 5-NN
   accuracy;
6. between the fits, t-SNE's edge sums at ``--n`` points x 64 neighbours: probdr's edge-list path
   (the one a GPU takes) against the same sums in plain operations compiled by torch.compile,
   compared and timed -- whether a compiled pass would pay on the GPU.

Writes ``device_check.json`` and ``device_check.md`` to ``--out`` (default ``$OUT``, else the
current folder) and prints both. ``benchmarks/DEVICE.md`` says how to run it on a GPU machine
without a package registry.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TRUST_SAMPLE = 3000


# --------------------------------------------------------------------------------------------
# children: each step runs in a process of its own (a hang or an out-of-memory stays there)
# --------------------------------------------------------------------------------------------
def _sync(device):
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _peak_reset(device):
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device):
    import torch

    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # host RSS on a CPU


def _knn_accuracy_on_device(Z, y, k=5, block=1024):
    """``probdr.metrics.knn_accuracy`` (leave-one-out, majority vote, ties to the smallest
    label) by blocked exact distances on a CUDA device: seconds at a million points."""
    import torch

    Z = Z.float()
    classes, yi = torch.unique(torch.as_tensor(y, device=Z.device), return_inverse=True)
    right = 0
    for s in range(0, Z.shape[0], block):
        D = torch.cdist(Z[s:s + block], Z)
        D[torch.arange(D.shape[0]), torch.arange(s, s + D.shape[0])] = float("inf")
        idx = D.topk(k, largest=False).indices
        votes = torch.nn.functional.one_hot(yi[idx], len(classes)).sum(1)
        right += int((votes.argmax(1) == yi[s:s + block]).sum())
    return right / Z.shape[0]


def _quality(X, Z, y):
    from probdr import metrics

    knn5 = (_knn_accuracy_on_device(Z, y) if getattr(Z, "is_cuda", False) else None)
    X, Z, y = (np.asarray(a.cpu() if hasattr(a, "cpu") else a) for a in (X, Z, y))
    sub = np.random.default_rng(0).choice(len(X), min(len(X), TRUST_SAMPLE), replace=False)
    return {"trust15": metrics.trustworthiness(X[sub].astype(np.float64),
                                               Z[sub].astype(np.float64), 15),
            "knn5": knn5 if knn5 is not None else metrics.knn_accuracy(Z.astype(np.float64),
                                                                       y, 5)}


#: ``--quick`` (the CI's dry run): short schedules, the code paths of the real check
QUICK = {("probdr", "tsne"): dict(n_iter=60, early_exaggeration_iter=20),
         ("probdr", "umap"): dict(n_epochs=30),
         ("torchdr", "tsne"): dict(max_iter=60, early_exaggeration_iter=20),
         ("torchdr", "umap"): dict(max_iter=30)}


def _fit(lib, method, X, device, seed, quick=False, **kw):
    if quick:
        kw = {**QUICK[lib, method], **kw}
    if lib == "probdr":
        import probdr

        cls = {"tsne": probdr.TSNE, "umap": probdr.UMAP}[method]
        return cls(random_state=seed, device=device, **kw).fit_transform(X)
    import torchdr

    cls = {"tsne": torchdr.TSNE, "umap": torchdr.UMAP}[method]
    kw = {"backend": None, **kw}
    out = cls(device=str(device), random_state=seed, **kw).fit_transform(X)
    return out


def child_fit(args) -> dict:
    """One fit of ``args.lib``'s ``args.method`` on the saved data, on ``args.device``."""
    import torch

    X = torch.from_numpy(np.load(args.data)).to(args.device)
    y = np.load(args.labels)
    kw = json.loads(args.kwargs)
    _sync(args.device)
    _peak_reset(args.device)
    t0 = time.perf_counter()
    Z = _fit(args.lib, args.method, X, args.device, 0, args.quick, **kw)
    _sync(args.device)
    wall = time.perf_counter() - t0
    out = {"wall_s": wall, "peak_gib": _peak_gib(args.device)}
    Z = torch.as_tensor(Z).detach().to(args.device)
    out["finite"] = bool(torch.isfinite(Z).all())
    out.update(_quality(X, Z, y) if out["finite"] else {})
    return out


def _count_syncs(method, X, device) -> int:
    """Host synchronisations inside the optimiser's steps after the first two (CUDA's sync debug
    mode warns at each), for a short fit."""
    import warnings

    import torch

    import probdr
    from probdr.infer import map as map_module

    if torch.device(device).type != "cuda":
        return -1
    step, seen = map_module.MAPFit._gradient_step, [0]

    def counted(self, kwargs):
        seen[0] += 1
        torch.cuda.set_sync_debug_mode("warn" if seen[0] > 2 else "default")
        try:
            return step(self, kwargs)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    map_module.MAPFit._gradient_step = counted
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kw = {"tsne": dict(n_iter=40, early_exaggeration_iter=10), "umap": dict(n_epochs=40)}
            {"tsne": probdr.TSNE, "umap": probdr.UMAP}[method](
                random_state=0, device=device, **kw[method]).fit(X)
    finally:
        map_module.MAPFit._gradient_step = step
    return sum("synchroniz" in str(w.message) for w in caught)


def child_agree(args) -> dict:
    """CPU vs device on the digits, the device fit twice, and the loop's host synchronisations."""
    from scipy.spatial import procrustes

    from probdr import datasets, metrics

    X, y = datasets.load("digits", n_samples=args.agree_n)
    out = {}
    for method in ("tsne", "umap"):
        Zc = _fit("probdr", method, X, "cpu", 0, args.quick)
        Zd = _fit("probdr", method, X, args.device, 0, args.quick)
        Zd2 = _fit("probdr", method, X, args.device, 0, args.quick)
        tc, td = metrics.trustworthiness(X, Zc, 15), metrics.trustworthiness(X, Zd, 15)
        diff = float(np.abs(Zd - Zd2).max())
        out[method] = {
            "trust_cpu": tc, "trust_device": td, "trust_gap": abs(tc - td),
            "agree": abs(tc - td) <= 0.01, "procrustes": float(procrustes(Zc, Zd)[2]),
            "knn5_cpu": metrics.knn_accuracy(Zc, y, 5), "knn5_device": metrics.knn_accuracy(Zd, y, 5),
            "repeat_max_diff": diff,
            "repeat": "bitwise" if diff == 0 else ("within 1e-5" if diff <= 1e-5 else "differs"),
            "host_syncs_per_fit": _count_syncs(method, X, args.device)}
    return out


def child_data(args) -> dict:
    """Deformed MNIST generated on the device, saved for the fits."""
    from probdr import datasets

    _sync(args.device)
    t0 = time.perf_counter()
    X, y = datasets.mnist_deformed(args.n, random_state=0, device=args.device)
    _sync(args.device)
    wall = time.perf_counter() - t0
    np.save(args.data, X.cpu().numpy())
    np.save(args.labels, y.cpu().numpy())
    return {"n": args.n, "wall_s": wall}


def edge_pass(Z, rows, cols, v):
    r"""t-SNE's attraction :math:`\sum_e v_e \log k(\|z_{r_e} - z_{c_e}\|^2)` (Cauchy kernel)
    and its gradient in plain torch operations: what ``torch.compile`` may fuse into a few
    kernels on a GPU, the candidate against probdr's edge-list path there."""
    import torch

    d = Z.index_select(0, rows) - Z.index_select(0, cols)
    d2 = (d * d).sum(1)
    value = (v * -torch.log1p(d2)).sum()
    coef = (-2.0 * v / (1.0 + d2))[:, None] * d
    grad = torch.zeros_like(Z).index_add_(0, rows, coef).index_add_(0, cols, -coef)
    return value, grad


def _median_time(fn, device, repeat=10) -> float:
    fn()  # warm: caches, compilation
    times = []
    for _ in range(repeat):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def child_edges(args) -> dict:
    """The edge sums of a t-SNE-sized graph (``--n`` points, 64 neighbours each, 2-D): probdr's
    edge-list path (its value and gradient) against :func:`edge_pass` compiled by torch.compile,
    the numbers compared and each timed (median of 10 after a warm-up)."""
    import torch

    from probdr._compute.edges import edge_log_kernel_sum
    from probdr.kernels import StudentKernel

    dev, n, k = torch.device(args.device), args.n, 64
    gen = torch.Generator(dev).manual_seed(0)
    Z = torch.randn(n, 2, generator=gen, device=dev) * 10
    rows = torch.arange(n, device=dev).repeat_interleave(k)
    cols = (rows + torch.randint(1, n, rows.shape, generator=gen, device=dev)) % n
    v = torch.rand(rows.shape, generator=gen, device=dev)
    kernel = StudentKernel()

    def probdr_path():
        Zr = Z.detach().requires_grad_()
        val = edge_log_kernel_sum(Zr, rows, cols, v, kernel)
        (g,) = torch.autograd.grad(val, Zr)
        return val.detach(), g

    compiled = torch.compile(edge_pass, dynamic=False) if not args.quick else edge_pass
    ref_val, ref_grad = probdr_path()
    out = {"edges": rows.numel(), "compiled": not args.quick}
    try:
        val, grad = compiled(Z, rows, cols, v)
        out["value_rel_err"] = float((val - ref_val).abs() / ref_val.abs())
        out["grad_rel_err"] = float((grad - ref_grad).norm() / ref_grad.norm())
        out["probdr_s"] = _median_time(probdr_path, dev)
        out["compiled_s"] = _median_time(lambda: compiled(Z, rows, cols, v), dev)
    except Exception as err:  # noqa: BLE001 - the compiler's failure is the result
        out["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:300]
    return out


CHILDREN = {"fit": child_fit, "agree": child_agree, "data": child_data, "edges": child_edges}


# --------------------------------------------------------------------------------------------
# the parent: budget, steps, report
# --------------------------------------------------------------------------------------------
class Budget:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def _run_child(kind, budget, cap, extra, args, reserve=10.0) -> dict:
    left = budget.left() - reserve
    if left < min(cap, 30.0):
        return {"status": "skipped", "why": f"{left:.0f} s of the budget left"}
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, "--device", args.device,
           *(["--quick"] if args.quick else []), *extra]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=min(cap, left),
                              cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "why": f"stopped after {min(cap, left):.0f} s"}
    line = next((ln for ln in proc.stdout.splitlines()[::-1] if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"status": "failed", "why": tail[0][:300], "seconds": time.perf_counter() - t0}
    return {"status": "ok", **json.loads(line[len("RESULT "):])}


def machine(device) -> dict:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "device": device, "host": platform.node(), "cpus": os.cpu_count()}
    if torch.device(device).type == "cuda":
        props = torch.cuda.get_device_properties(torch.device(device))
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                    cuda=torch.version.cuda)
    for name in ("probdr", "pyro", "torchdr", "sklearn", "numpy", "scipy"):
        try:
            mod = __import__(name)
            info[name] = getattr(mod, "__version__", "?")
        except Exception:
            info[name] = None
    return info


def device_tests(budget, device, cap, out_dir) -> dict:
    if budget.left() < cap + 60:
        return {"status": "skipped", "why": f"{budget.left():.0f} s of the budget left"}
    xml = os.path.join(out_dir, "device_tests.xml")
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "not slow", f"--junitxml={xml}",
           "tests/compute/test_devices.py", "tests/compute/test_sync_free.py",
           "tests/input/test_ann.py", "-k", f"not test_ann or {device.split(':')[0]}"]
    try:  # four workers where pytest-xdist is installed (the GPU is shared, the CPUs are many)
        import xdist  # noqa: F401

        cmd += ["-n", "4"]
    except ImportError:
        pass
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=ROOT)
    timed_out = False
    try:
        output = proc.communicate(timeout=cap)[0]
    except subprocess.TimeoutExpired:  # interrupted, pytest still writes the results so far
        timed_out = True
        proc.send_signal(signal.SIGINT)
        try:
            output = proc.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            output = proc.communicate()[0]
    if not os.path.exists(xml):
        return {"status": "timeout" if timed_out else "failed", "why": output.strip()[-300:]}
    suite = ET.parse(xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    failed = [f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase")
              if c.find("failure") is not None or c.find("error") is not None]
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    status = "timeout" if timed_out else ("ok" if proc.returncode == 0 else "failed")
    return {"status": status, **counts, "failed": failed[:20]}


def _has_faiss() -> bool:
    import importlib.util

    return importlib.util.find_spec("faiss") is not None


def _fits_plan(args):
    """(key, lib, method, n, kwargs, cap) in the order they run; ``lib=None``: the edge sums
    compared with their compiled candidate (:func:`child_edges`). TorchDR's affinities without
    FAISS (or KeOps) are dense, n x n: at 1M points that is 3.7 TB, so without FAISS TorchDR runs
    at ``--n-mid`` only, beside probdr at the same size."""
    methods = [m for m in args.methods.split(",") if m]
    plan = [(f"probdr-{m}", "probdr", m, args.n, {}, 150) for m in methods]
    torchdr = not args.no_torchdr
    if torchdr and _has_faiss():
        plan += [("torchdr-umap", "torchdr", "umap", args.n, {"backend": "faiss"}, 120)]
    if args.edge_pass:
        plan.append(("edge-pass", None, None, args.n, {}, 120))  # a measurement, not a fit
    if torchdr and args.n_mid:
        for m in methods:
            plan += [(f"probdr-{m}-mid", "probdr", m, args.n_mid, {}, 60),
                     (f"torchdr-{m}-mid", "torchdr", m, args.n_mid, {}, 120)]
        if "umap" in methods:
            plan.append(("torchdr-umap-compiled-mid", "torchdr", "umap", args.n_mid,
                         {"compile": True}, 150))
    if args.n_big and "umap" in methods:
        plan.append(("probdr-umap-big", "probdr", "umap", args.n_big, {}, 240))
    return plan


def run(args) -> dict:
    budget = Budget(args.budget)
    report = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M"),
              "budget_s": args.budget, "machine": machine(args.device)}
    print(f"machine: {json.dumps(report['machine'])}", file=sys.stderr, flush=True)
    report["agreement"] = _run_child("agree", budget, 180, ["--agree-n", str(args.agree_n)],
                                     args)
    print(f"agreement: {report['agreement']}", file=sys.stderr, flush=True)
    report["tests"] = ({"status": "skipped", "why": "--no-tests"} if args.no_tests
                       else device_tests(budget, args.device, 180, args.out))
    print(f"tests: {report['tests']}", file=sys.stderr, flush=True)
    fits, data, tmp = {}, {}, tempfile.mkdtemp(prefix="probdr-device-")
    for key, lib, method, n, kw, cap in _fits_plan(args):
        if lib is None:
            report["edge_pass"] = _run_child("edges", budget, cap, ["--n", str(n)], args)
            print(f"{key}: {report['edge_pass']}", file=sys.stderr, flush=True)
            continue
        if n not in data:  # generated on the device when a fit first needs it
            paths = [os.path.join(tmp, f"X{n}.npy"), os.path.join(tmp, f"y{n}.npy")]
            data[n] = _run_child("data", budget, 120, ["--n", str(n), "--data", paths[0],
                                                       "--labels", paths[1]], args)
            data[n]["paths"] = paths
        if data[n]["status"] != "ok":
            fits[key] = {"status": "skipped", "why": f"no data at n={n}"}
        else:
            fits[key] = _run_child("fit", budget, cap,
                                   ["--lib", lib, "--method", method, "--kwargs", json.dumps(kw),
                                    "--data", data[n]["paths"][0], "--labels",
                                    data[n]["paths"][1]], args)
        fits[key].update(lib=lib, method=method, n=n, kwargs=kw)
        print(f"{key}: {fits[key]}", file=sys.stderr, flush=True)
    report["fits"] = fits
    report["data"] = {n: {k: v for k, v in d.items() if k != "paths"} for n, d in data.items()}
    report["wall_s"] = args.budget - budget.left()
    return report


# --------------------------------------------------------------------------------------------
# the Markdown table
# --------------------------------------------------------------------------------------------
def _f(x, fmt):
    return "" if x is None else format(x, fmt)


def markdown(report) -> str:
    m = report["machine"]
    lines = [f"Device check on {m.get('gpu', m['device'])} (torch {m['torch']}, CUDA "
             f"{m.get('cuda')}, {m['cpus']} CPUs), {report['date']}, {report['wall_s']:.0f} s: "
             f"`{report['command']}`", "",
             "| fit | n | wall (s) | peak memory (GiB) | trust@15 | 5-NN | status |",
             "|---|---|---|---|---|---|---|"]
    for key, r in report["fits"].items():
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {r.get('why', '')}"
        lines.append(f"| {key} | {r['n']:,} | {_f(r.get('wall_s'), '.1f')} | "
                     f"{_f(r.get('peak_gib'), '.2f')} | {_f(r.get('trust15'), '.4f')} | "
                     f"{_f(r.get('knn5'), '.4f')} | {status} |")
    ag = report["agreement"]
    lines += ["", "| method | trust@15 CPU | trust@15 device | within 0.01 | Procrustes | "
              "same seed twice on the device | host syncs in the loop |", "|---|---|---|---|---|---|---|"]
    if ag["status"] == "ok":
        for method in ("tsne", "umap"):
            a = ag[method]
            lines.append(f"| {method} | {a['trust_cpu']:.4f} | {a['trust_device']:.4f} | "
                         f"{'yes' if a['agree'] else 'NO'} | {a['procrustes']:.4f} | "
                         f"{a['repeat']} ({a['repeat_max_diff']:.1e}) | "
                         f"{a['host_syncs_per_fit'] if a['host_syncs_per_fit'] >= 0 else 'n/a'} |")
    else:
        lines.append(f"| agreement {ag['status']}: {ag.get('why', '')} | | | | | | |")
    e = report.get("edge_pass", {"status": "skipped", "why": "not in the plan"})
    if e["status"] == "ok" and "error" not in e:
        lines += ["", f"Edge sums of {e['edges']:,} pairs (t-SNE's attraction, value and "
                  f"gradient): probdr's edge-list path {1e3 * e['probdr_s']:.1f} ms, plain "
                  f"operations{' compiled by torch.compile' if e['compiled'] else ''} "
                  f"{1e3 * e['compiled_s']:.1f} ms (relative differences: value "
                  f"{e['value_rel_err']:.1e}, gradient {e['grad_rel_err']:.1e})."]
    else:
        lines += ["", f"Edge sums: {e['status']}: {e.get('why', e.get('error', ''))}"]
    t = report["tests"]
    lines += ["", "Device tests: " + (f"{t['passed']} passed, {t['failures'] + t['errors']} "
                                      f"failed, {t['skipped']} skipped"
                                      + (f" ({', '.join(t['failed'])})" if t["failed"] else "")
                                      if "passed" in t else f"{t['status']}: {t.get('why', '')}")]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--n", type=int, default=1_000_000, help="points of the main fits")
    ap.add_argument("--n-mid", type=int, default=50_000, help="points of the comparison with TorchDR's dense affinities")
    ap.add_argument("--n-big", type=int, default=5_000_000, help="UMAP if time is left; 0: none")
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for the whole check")
    ap.add_argument("--agree-n", type=int, default=1797, help="digits in the agreement check")
    ap.add_argument("--no-torchdr", action="store_true", help="probdr only")
    ap.add_argument("--methods", default="umap,tsne", help="comma list of umap, tsne")
    ap.add_argument("--no-edge-pass", dest="edge_pass", action="store_false",
                    help="skip the edge sums against torch.compile")
    ap.add_argument("--no-tests", action="store_true", help="skip the device tests")
    ap.add_argument("--quick", action="store_true", help="short schedules (the CI's dry run)")
    ap.add_argument("--out", default=os.environ.get("OUT") or ".", help="folder for the results")
    ap.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    ap.add_argument("--lib", help=argparse.SUPPRESS)
    ap.add_argument("--method", help=argparse.SUPPRESS)
    ap.add_argument("--kwargs", default="{}", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--labels", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(CHILDREN[args.child](args)), flush=True)
        return 0
    os.makedirs(args.out, exist_ok=True)
    report = run(args)
    with open(os.path.join(args.out, "device_check.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    table = markdown(report)
    with open(os.path.join(args.out, "device_check.md"), "w") as f:
        f.write(table)
    print(json.dumps(report, indent=1, default=str))
    print(table)
    bad = report["agreement"].get("status") != "ok" or report["tests"].get("status") == "failed"
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
