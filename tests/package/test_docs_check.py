"""docs/check_html.py: the checker that keeps development-log wording out of the built manual.

Runs the checker on small synthetic HTML trees (what it must find, what it must leave alone),
and on a built site when ``PROBDR_DOCS_HTML`` names one, e.g.::

    PROBDR_DOCS_EXECUTE=off python -m sphinx -W -q -b html docs /tmp/docsbuild
    PROBDR_DOCS_HTML=/tmp/docsbuild python -m pytest tests/package/test_docs_check.py
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "check_html.py"
#: pages rewritten elsewhere in the project, left out of the check of a built site
EXCLUDED = ["benchmarks.html", "api.html"]


def _load():
    spec = importlib.util.spec_from_file_location("check_html", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["check_html"] = mod
    spec.loader.exec_module(mod)
    return mod


check_html = _load()


def page(body: str) -> str:
    return ("<!DOCTYPE html>\n<html><head><title>t</title>\n"
            "<script>var built = '2026-11-27'; var sha = 'a1b2c3d4e5';</script>\n"
            "<style>.x { color: #1f77b4 }</style>\n"
            f"</head>\n<body>\n{body}\n</body></html>\n")


def kinds(html: str) -> list[tuple[str, str]]:
    return [(f.kind, f.match) for f in check_html.check_text(page(html))]


@pytest.mark.parametrize("text, kind, match", [
    ("<p>Measured on 2026-11-27 on two cores.</p>", "date", "2026-11-27"),
    ("<p>Run in Nov 2026.</p>", "date", "Nov 2026"),
    ("<p>Run on 27 November 2026.</p>", "date", "27 November 2026"),
    ("<p>fixed in commit 00a0aa1.</p>", "hash", "00a0aa1"),
    ("<p>(<code>e322f5d9c0ffee1234</code>)</p>", "hash", "e322f5d9c0ffee1234"),
    ("<p>as in issue 16 item 3</p>", "issue", "issue 16"),
    ("<p>see (Issue #15)</p>", "issue", "Issue #15"),
    ("<p>the #12 work item</p>", "issue", "#12"),
    ("<p>the #12 work item</p>", "issue", "work item"),
    ("<p>scored 40.8 before the fix</p>", "history", "before the fix"),
    ("<p>load average 5.2 when the script finished</p>", "machine-load", "load average"),
    ("<pre>$ uptime</pre>", "machine-load", "uptime"),
    ('<div class="highlight"><pre><span class="nv">OMP_NUM_THREADS</span><span class="o">=</span>'
     '<span class="m">1</span> python bench.py</pre></div>', "threads-env", "OMP_NUM_THREADS=1"),
    ("<pre>from probdr import graphs, neighbors</pre>", "deprecated",
     "from probdr import graphs, neighbors"),
    ("<pre>from probdr import datasets, priors\n</pre>", "deprecated",
     "from probdr import datasets, priors"),
    ("<p><code>probdr.priors.from_labels</code></p>", "deprecated", "probdr.priors"),
    ("<p>use probdr.plotting_bayes</p>", "deprecated", "probdr.plotting_bayes"),
    ("<p>probdr.posterior_graphs</p>", "deprecated", "probdr.posterior_graphs"),
])
def test_finds(text, kind, match):
    assert (kind, match) in kinds(text)


@pytest.mark.parametrize("text", [
    "<p>NeurIPS 2022, JMLR 2022, arXiv:2402.02239 (2024).</p>",
    "<p>8,075,017 bytes; 1234567 points; 5.6e-16; 2.4e+06; step 2000000.</p>",
    "<p>the words defaced and accede; a float 1.0e-5; version 0.1.0</p>",
    '<p><a href="https://example.org/issues/16#anchor-1a2b3c4d">a link</a></p>',
    "<pre># 10 graphs\nx = 0x7f3a2c1b2d90</pre>",
    "<p><code>from probdr.laws import edge_priors as priors</code>, "
    "<code>probdr.input.neighbors</code>, <code>probdr.laws.edge_priors</code></p>",
    "<p>the issue is the repulsion; <code>OMP_NUM_THREADS</code> set to 1</p>",
    '<div class="cell_output docutils container"><pre>created_at: 2026-11-27T09:14 '
    "<span>a1b2c3d4e</span></pre></div>",
    "<p>may 2024 be the year</p>",
])
def test_leaves_alone(text):
    assert kinds(text) == []


def test_only_the_benchmarks_measured_statement_may_carry_a_date():
    def found(html):
        return [f.match for f in check_html.check_text(page(html), "x/benchmarks.html")]

    assert found("<p>Measured on 2026-11-27 on 2 cores (AMD EPYC), Python 3.11.7.</p>") == []
    assert found("<p>Measured from 2026-11-26 to 2026-11-27 on 2 cores.</p>") == []
    assert found("<p>Measured on 2 cores, 2026-11-27.</p>") == ["2026-11-27"]
    assert found("<p>Measured on 2026-11-27; re-run on 2026-11-28.</p>") == ["2026-11-28"]
    assert kinds("<p>Measured on 2026-11-27 on 2 cores.</p>") == [("date", "2026-11-27")]


def test_line_numbers_and_tree(tmp_path):
    html = tmp_path / "html"
    (html / "notebooks").mkdir(parents=True)
    (html / "_static").mkdir()
    (html / "_modules").mkdir()
    (html / "index.html").write_text(page("<p>clean</p>"))
    (html / "notebooks" / "nb.html").write_text(page("<p>one</p>\n<p>two</p>\n<p>issue 7</p>"))
    (html / "api.html").write_text(page("<p>probdr.graphs</p>"))
    (html / "_static" / "theme.html").write_text(page("<p>2026-11-27</p>"))
    (html / "_modules" / "probdr.html").write_text(page("<p>probdr.graphs</p>"))
    found, n = check_html.check_tree(html)
    assert n == 3  # _static and _modules are not pages
    assert [str(f) for f in found] == ["api.html:7: [deprecated] probdr.graphs",
                                       "notebooks/nb.html:9: [issue] issue 7"]
    found, n = check_html.check_tree(html, exclude=["api.html", "notebooks/*"])
    assert (found, n) == ([], 1)


def test_command_line(tmp_path):
    (tmp_path / "a.html").write_text(page("<p>load average 1.5</p>"))
    (tmp_path / "b.html").write_text(page("<p>clean</p>"))
    run = [sys.executable, str(SCRIPT), str(tmp_path)]
    res = subprocess.run(run, capture_output=True, text=True)
    assert res.returncode == 1
    assert res.stdout.splitlines() == ["a.html:7: [machine-load] load average"]
    res = subprocess.run(run + ["--exclude", "a.html"], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout == ""
    empty = tmp_path / "empty"
    empty.mkdir()
    res = subprocess.run([sys.executable, str(SCRIPT), str(empty)], capture_output=True, text=True)
    assert res.returncode == 2


def test_no_probdr_import():
    """The checker runs without the package: only the standard library."""
    code = ("import sys, runpy; sys.modules['probdr'] = None; "
            f"runpy.run_path({str(SCRIPT)!r}, run_name='not_main')")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.skipif(not os.environ.get("PROBDR_DOCS_HTML"),
                    reason="set PROBDR_DOCS_HTML to a built HTML site to check it")
def test_built_site():
    root = Path(os.environ["PROBDR_DOCS_HTML"])
    found, n = check_html.check_tree(root, exclude=EXCLUDED)
    assert n > 0, f"no HTML pages under {root}"
    assert not found, "\n".join(map(str, found))
