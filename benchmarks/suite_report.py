"""``docs/benchmarks.md`` from the suite's results: the summary, one table per data set, the figure
and the GPU check's table (from ``benchmarks/results/device.json``). Called by ``suite.py``."""

from __future__ import annotations

import json
from pathlib import Path

COLUMNS = [("wall_s", "time (s)", "{:.1f}"), ("ratio", "time ratio", "{}"),
           ("peak_rss_gib", "peak memory (GiB)", "{:.2f}"), ("trust15", "trust@15", "{:.3f}"),
           ("cont15", "cont@15", "{:.3f}"), ("knn5", "5-NN acc", "{:.3f}"),
           ("spearman", "distance ρ", "{:.3f}"), ("density", "density ρ", "{:.3f}")]
DEVICE = Path(__file__).resolve().parent / "results" / "device.json"
EPOCH_STEPS = Path(__file__).resolve().parent / "results" / "umap_epoch_steps.jsonl"
SMALL_SCHEDULE = Path(__file__).resolve().parent / "results" / "small_schedule.jsonl"


def _pair(method: str, methods: dict | None) -> str:
    """The comparison a method belongs to: probdr's method with its reference library (named
    by the reference), any other method alone."""
    ref = (methods or {}).get(method, (None, None, None))[2]
    return ref or method


def latest(results: list[dict], methods: dict | None = None) -> dict:
    """The last result of each (data set, method) on the machine that last ran its comparison
    (probdr's method and its reference; with ``methods=None`` the whole data set): a ratio
    never divides one machine's time by another's. Results of other machines stay in the file
    but never meet in one comparison."""
    def key(r):
        return (r["data"], _pair(r["method"], methods) if methods else None)
    here = {key(r): r["machine"] for r in results}
    return {(r["data"], r["method"]): r for r in results if r["machine"] == here[key(r)]}


def machines_note(rows: dict, data: str, methods: dict) -> list[str]:
    """A line under a table whose comparisons ran on different machines: which rows ran
    where (their times compare within a comparison only)."""
    where: dict[str, list[str]] = {}
    for (d, m), r in rows.items():
        if d == data:
            where.setdefault(r["machine"], []).append(methods[m][0] if m in methods else m)
    if len(where) < 2:
        return []
    parts = [f"{', '.join(names)} on {machine}" for machine, names in where.items()]
    return ["", f"Rows from {len(where)} machines ({'; '.join(parts)}): times compare within "
            "a comparison, not across."]


def _failed(r: dict) -> str:
    if r["status"] == "timeout":
        return f"stopped at {r['limit_s']:.0f} s"
    if r["status"] == "memory":
        return f"stopped above {r['limit_gib']:.0f} GiB"
    return "failed: " + (r.get("error") or "no output").replace("|", "/")[:80]


def _row(r: dict, ref: dict | None, name: str) -> str:
    if r["status"] != "ok":
        return f"| {name} | {_failed(r)} |" + " |" * (len(COLUMNS) - 1)
    vals = dict(r, ratio=f"{r['wall_s'] / ref['wall_s']:.2f}×" if ref else "")
    if r.get("peak_is") != "VmHWM":  # ru_maxrss counts the parent's memory at fork: not shown
        vals["peak_rss_gib"] = None
    cells = [fmt.format(vals[k]) if vals.get(k) is not None else "" for k, _, fmt in COLUMNS]
    return f"| {name} | " + " | ".join(cells) + " |"


def table(rows: dict, data: str, methods: dict) -> list[str]:
    """One data set's table: probdr's rows first, each with its time over its reference's."""
    head = "| method | " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    lines = [head, "|---" * (len(COLUMNS) + 1) + "|"]
    for m, (name, _, ref) in methods.items():
        r = rows.get((data, m))
        if r is None:
            continue
        ok_ref = rows.get((data, ref)) if ref else None
        ok_ref = ok_ref if ok_ref and ok_ref["status"] == "ok" else None
        lines.append(_row(r, ok_ref, name + (f" (vs {methods[ref][0]})" if ok_ref else "")))
    return lines


def _ratios(rows: dict, methods: dict, data: str) -> list[str]:
    """probdr's TSNE and UMAP against their references on one data set, as phrases."""
    parts = []
    for m in ("probdr-tsne", "probdr-umap"):
        ref_m = methods[m][2]
        r, ref = rows.get((data, m)), rows.get((data, ref_m))
        if r and ref and r["status"] == ref["status"] == "ok":
            parts.append(
                f"{methods[m][0]} takes **{r['wall_s'] / ref['wall_s']:.2f}×** "
                f"{methods[ref_m][0]}'s time (trustworthiness@15 {r['trust15']:.3f} vs "
                f"{ref['trust15']:.3f}, 5-NN accuracy {r['knn5']:.3f} vs {ref['knn5']:.3f})")
        elif r and ref and r["status"] == "ok" and ref["status"] == "timeout":
            parts.append(  # the reference did not finish: at most this share of its time
                f"{methods[m][0]} takes {r['wall_s']:.0f} s, **under "
                f"{r['wall_s'] / ref['limit_s']:.2f}×** {methods[ref_m][0]}'s time, which was "
                f"stopped at {ref['limit_s']:.0f} s (trustworthiness@15 {r['trust15']:.3f}, "
                f"5-NN accuracy {r['knn5']:.3f})")
    return parts


def _small_range(rows: dict, methods: dict, large: set) -> str:
    """The range of the time ratios on the other data sets, one sentence."""
    spans = []
    for m in ("probdr-tsne", "probdr-umap"):
        ref_m = methods[m][2]
        ratios = [rows[(d, m)]["wall_s"] / rows[(d, ref_m)]["wall_s"]
                  for (d, mm) in rows if mm == m and d not in large and (d, ref_m) in rows
                  and rows[(d, m)]["status"] == rows[(d, ref_m)]["status"] == "ok"]
        if ratios:
            spans.append(f"{methods[m][0]} {min(ratios):.2f}–{max(ratios):.2f}× "
                         f"{methods[ref_m][0]}'s")
    return (" On the smaller data sets, where every fit takes seconds, the time ratios are "
            + " and ".join(spans) + ". A fit of a second or two varies by up to 2× between runs "
            "of the same command on these two shared cores, probdr's and the peers' alike: the "
            "results file keeps every run, and a ratio near 1 is within that noise.") \
        if spans else ""


#: data sets of at least this many points get a sentence of their own in the page's summary
LARGE_N = 50_000


def summary(rows: dict, methods: dict) -> str:
    """The page's first lines: probdr against its reference on each large data set on record
    (the largest with a comparison if none is large), largest first, then the range of the
    ratios on the others."""
    sizes = {d: r["n"] for (d, _), r in rows.items()}
    found = [(d, parts) for d in sorted(sizes, key=sizes.get, reverse=True)
             if (parts := _ratios(rows, methods, d))]
    if not found:
        return "No results on record yet: run `python benchmarks/suite.py`."
    large = [(d, parts) for d, parts in found if sizes[d] >= LARGE_N] or found[:1]
    return " ".join(f"**At the defaults, on {sizes[d]:,} points ({d}):** " + "; ".join(parts)
                    + "." for d, parts in large) + _small_range(rows, methods,
                                                                {d for d, _ in large})


def figure(rows: dict, datasets: dict, methods: dict, path: Path) -> bool:
    """Time (log) against trustworthiness, one panel per data set; False when nothing to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    data = [d for d in datasets if any(k[0] == d and r["status"] == "ok" for k, r in rows.items())]
    if not data:
        return False
    cols = min(3, len(data))
    fig, axes = plt.subplots((len(data) + cols - 1) // cols, cols, squeeze=False,
                             figsize=(4.2 * cols, 3.4 * ((len(data) + cols - 1) // cols)))
    colors = plt.get_cmap("tab10")
    for ax, d in zip(axes.ravel(), data, strict=False):
        for i, (m, (name, lib, _)) in enumerate(methods.items()):
            r = rows.get((d, m))
            if r and r["status"] == "ok":
                ax.scatter(r["wall_s"], r["trust15"], color=colors(i % 10), label=name,
                           marker="*" if lib == "probdr" else "o", s=120 if lib == "probdr" else 40)
        ax.set(xscale="log", title=f"{d} (n = {rows[next(k for k in rows if k[0] == d)]['n']:,})",
               xlabel="time (s)", ylabel="trustworthiness@15")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # no crowded labels
    for ax in axes.ravel()[len(data):]:
        ax.axis("off")
    fig.legend(*_all_handles(axes), loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)
    return True


def _all_handles(axes):
    seen = {}
    for ax in axes.ravel():
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(lab, h)
    return list(seen.values()), list(seen)


def device_section() -> list[str]:
    """The GPU check's tables, from ``benchmarks/results/device.json`` (``device_check.py``)."""
    if not DEVICE.exists():
        return []
    dev = json.loads(DEVICE.read_text())
    lines = ["## On a GPU", "", f"Measured on {dev['date']} on {dev['card']}. {dev['intro']}", "",
             "    " + dev["command"], "",
             "| fit | n | time (s) | peak GPU memory (GiB) | trust@15 | 5-NN acc |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {f['fit']} | {f['n']:,} | {f['wall_s']:.1f} | {f['peak_gib']:.2f} | "
              f"{f['trust15']:.4f} | {f['knn5']:.4f} |" for f in dev["fits"]]
    lines += ["", "The CPU and the GPU on the digits, same seed:", "",
              "| method | trust@15 CPU | trust@15 GPU | Procrustes distance |", "|---|---|---|---|"]
    lines += [f"| {c['method']} | {c['trust_cpu']:.4f} | {c['trust_gpu']:.4f} | "
              f"{c['procrustes']:.4f} |" for c in dev.get("cpu_vs_gpu", [])]
    return lines + ["", *dev.get("notes", []), ""]

def _schedule(variant: str) -> tuple[int, int]:
    """A variant's ``(epochs, steps per epoch)``: ``steps4`` is 200 epochs of 4, ``e60s12`` 60
    of 12; ``(0, 0)`` for umap-learn and the default (named, not counted)."""
    if variant.startswith("steps"):
        return 200, int(variant.removeprefix("steps"))
    if variant.startswith("e") and "s" in variant:
        epochs, steps = variant.removeprefix("e").split("s")
        return int(epochs), int(steps)
    return 0, 0


def _schedule_name(variant: str) -> str:
    """A row name of the schedule table."""
    if variant in ("umap-learn", "default"):
        return variant if variant == "umap-learn" else "probdr, default"
    epochs, steps = _schedule(variant)
    return f"probdr, {epochs} epochs × {steps} step{'s' if steps > 1 else ''}"


def _latest_runs(path: Path, by: str) -> dict:
    """``{(size or data set, variant): [results]}``: the latest result of each variant and seed
    of a schedule study's results file, kept where it comes from the latest date of its ``by``
    (the rows of one run, whose times compare)."""
    latest = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            latest[(r[by], r["variant"], r.get("seed", 0))] = r
    last_run = {}
    for (key, _, _), r in latest.items():
        last_run[key] = max(last_run.get(key, ""), r["date"])
    groups: dict = {}
    for (key, variant, _), r in latest.items():
        if r["date"] == last_run[key]:
            groups.setdefault((key, variant), []).append(r)
    return groups


def _schedule_rows(groups: dict, label, digits: int = 1) -> list[str]:
    """A schedule table's rows: the mean over the seeds, by size, then epochs and steps."""
    lines = []
    order = lambda k: (k[0], k[1] == "umap-learn", _schedule(k[1]))  # noqa: E731
    for key in sorted(groups, key=order):
        rs = groups[key]
        mean = {f: sum(r[f] for r in rs) / len(rs) for f in ("wall_s", "trust15", "knn5")}
        lines.append(f"| {label(key[0])} | {_schedule_name(key[1])} | {len(rs)} | "
                     f"{mean['wall_s']:.{digits}f} | "
                     f"{mean['trust15']:.4f} | {mean['knn5']:.4f} |")
    return lines


def epoch_steps_section(path: Path = EPOCH_STEPS) -> list[str]:
    """UMAP's schedule (epochs, steps per epoch) beside umap-learn on shared neighbours, from
    ``benchmarks/results/umap_epoch_steps.jsonl`` (``umap_epoch_steps.py --record``): the mean
    over the seeds of the latest result of each variant, size and seed."""
    if not path.exists():
        return []
    lines = ["## UMAP: epochs and optimiser steps per epoch", "",
             "probdr's UMAP cuts each epoch into `epoch_steps` optimiser steps, each using its "
             "share of the epoch's edges (an edge acts at most once per epoch). More steps do "
             "more per epoch, so fewer epochs reach the same quality, and the time goes with the "
             "epochs. Beside umap-learn (200 epochs), both given the same neighbours "
             "(pynndescent, `precomputed_knn`), so that only the optimisation differs; each fit "
             "in its own process on 2 threads, deformed MNIST (50 PCs); means over the seeds. "
             "The defaults: 100 epochs of 3 steps up to 10,000 points (below), 60 of 12 up to "
             "100,000, 100 of 8 above. Each size's rows come from its latest run, so that their "
             "times compare.", "",
             "    python benchmarks/umap_epoch_steps.py --n 70000 --record "
             "--variants steps1 steps2 steps4 steps8 umap-learn",
             "    python benchmarks/umap_epoch_steps.py --n 70000 --record --seeds 0 1 2 "
             "--variants steps4 e100s8 e60s12 umap-learn", "",
             "| n | fit | seeds | time (s) | trust@15 | 5-NN acc |", "|---|---|---|---|---|---|"]
    lines += _schedule_rows(_latest_runs(path, "n"), lambda n: f"{n:,}")
    return lines + ["", "Measured on an idle machine (load below 1.5); times include umap-learn's "
                    "just-in-time compilation (each fit is a fresh process). Times compare within "
                    "a size, not across: this machine's speed drifts 2-3× from day to day.", ""]


def small_schedule_section(path: Path = SMALL_SCHEDULE) -> list[str]:
    """UMAP's schedule on small data beside umap-learn, each fit end to end, from
    ``benchmarks/results/small_schedule.jsonl`` (``small_schedule.py --record``)."""
    if not path.exists():
        return []
    lines = ["## UMAP on small data: the schedule", "",
             "On small data a fit's time goes with its optimiser steps, each with a fixed cost, "
             "more than with the pairs it updates. Up to 10,000 points the default is 100 epochs "
             "of 3 steps (umap-learn: 500 epochs). Each fit end to end on all cores, warm, all "
             "in one process per data set; means over three seeds; quality as in the tables "
             "above. Each data set's rows come from its latest run.", "",
             "    python benchmarks/small_schedule.py --variants e500s1 default e100s2 e250s1 "
             "--record", "",
             "| data | fit | seeds | time (s) | trust@15 | 5-NN acc |", "|---|---|---|---|---|---|"]
    groups = _latest_runs(path, "data")
    loads = [r["load_before"] for rs in groups.values() for r in rs]
    return lines + _schedule_rows(groups, str, 2) + [
        "", f"The machine's load before each data set's run: {min(loads):.2f} to "
        f"{max(loads):.2f}.", ""]


INTRO = """# Benchmarks

{summary}

probdr's presets beside the tools a user would pick instead, each at its defaults on all cores,
on data sets that install offline. One command reproduces every table and the figure of this
page; it runs each fit in its own process, skips fits already on record, and rewrites this page:

    pip install -c constraints.txt -e ".[bench]"    # the peers, the metrics and the data
    python benchmarks/suite.py

{measured}

- **time**: the `fit_transform` call (neighbour search, affinities, initialisation and
  optimisation), warm: after an untimed fit on 300 of the points (4,096 from 4,096 points on, where
  umap-learn switches to approximate neighbours) in the same process, so that imports and
  just-in-time compilation (numba, torch) are excluded; **time ratio**: probdr's time over the
  reference library's (openTSNE for t-SNE, umap-learn for UMAP and LargeVis) on the same data;
- **peak memory**: the fitting process's peak resident memory (Linux `VmHWM`), imports and the
  warm-up fit included (blank where it was not recorded);
- **trust@15**, **cont@15**: trustworthiness and continuity with 15 neighbours; **distance ρ**:
  Spearman's correlation of all pairwise distances; the three from
  [ZADU](https://github.com/hj-n/zadu), on at most 5,000 points;
- **5-NN acc**: leave-one-out 5-nearest-neighbour accuracy of the labels in the embedding, on all
  points;
- **density ρ**: density preservation as the OpenProblems dimensionality-reduction task computes
  it: the Pearson correlation of the log local radii in the data and in the embedding (weighted
  mean squared distance over umap-learn's fuzzy graph with 30 neighbours), on the same points as
  trustworthiness.

Methods and their settings: probdr `TSNE()`, `UMAP()`, `LargeVis()` with `random_state=0`;
openTSNE `TSNE(n_jobs=-1)`; umap-learn `UMAP(n_jobs=-1)` (no seed: a seed makes it
single-threaded); scikit-learn `TSNE(n_jobs=-1)`; PaCMAP `PaCMAP()`; TriMap `TRIMAP()`; TorchDR
`TSNE(device="cpu")` and `UMAP(device="cpu")`. A fit that runs past 900 s or above 16 GiB is
stopped and shown as such. A subset: `--data digits mnist5k --methods probdr-tsne opentsne`;
a million points (probdr's TSNE and UMAP and umap-learn, 5 to 12 minutes each; openTSNE
about 35 minutes, past the default limit): `--data mnistdef1m --timeout 2400`.

![time against trustworthiness](_static/benchmarks-time-quality.svg)
"""


def measured(results: list[dict], rows: dict) -> str:
    """The machines, versions and dates of the results on the page (the latest run's
    versions)."""
    if not results:
        return ""
    last = results[-1]
    vers = ", ".join(f"{k} {v}" for k, v in last["versions"].items() if v)
    dates = sorted({r["date"] for r in rows.values()})
    when = f"on {dates[0]}" if len(dates) == 1 else f"from {dates[0]} to {dates[-1]}"
    parts = []
    machines_of = {}
    for r in rows.values():
        machines_of.setdefault(r["data"], set()).add(r["machine"])
    for machine in dict.fromkeys(r["machine"] for r in rows.values()):
        names = []
        for d in dict.fromkeys(r["data"] for r in rows.values() if r["machine"] == machine):
            if len(machines_of[d]) == 1:
                names.append(d)
            else:  # the data set's comparisons ran on several machines: name this one's rows
                these = [m for (dd, m), r in rows.items() if dd == d and r["machine"] == machine]
                names.append(f"{d} ({', '.join(these)})")
        parts.append(f"{', '.join(names)} on {machine}")
    return f"Measured {when}: {'; '.join(parts)}; with {vers}."


def write_page(results: list[dict], page: Path, fig: Path, datasets: dict, methods: dict):
    rows = latest(results, methods)
    text = [INTRO.format(summary=summary(rows, methods), measured=measured(results, rows))]
    for d, (desc, _) in datasets.items():
        if any(k[0] == d for k in rows):
            text += [f"## {d}", "", desc + ".", "", *table(rows, d, methods),
                     *machines_note(rows, d, methods), ""]
    text += epoch_steps_section()
    text += small_schedule_section()
    text += device_section()
    if not figure(rows, datasets, methods, fig):
        text[0] = text[0].replace("![time against trustworthiness]", "<!-- no figure -->")
    page.write_text("\n".join(text).rstrip() + "\n")
    print(f"wrote {page}" + (f" and {fig}" if fig.exists() else ""))
