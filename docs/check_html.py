"""Check a built HTML manual for development-log wording.

Usage::

    python docs/check_html.py docs/_build/html [--exclude benchmarks.html] [--exclude api.html]

Walks the ``.html`` files of the directory and searches the text a reader sees -- prose, code
blocks, tables, the sidebar -- for what belongs in a changelog or a commit message, not in a
manual:

- ``date``: dates of runs, ``2026-11-27`` or ``Nov 2026`` / ``27 November 2026``, except, on
  the benchmarks page only, its one statement of when its tables were measured
  (``Measured on 2026-11-27 ...`` or ``Measured from 2026-11-26 to 2026-11-27 ...``);
- ``hash``: commit hashes, 7 to 40 hexadecimal characters with at least one digit and one letter;
- ``issue``: issue and work-item numbers, ``issue 16``, ``(#12)``, ``work item``;
- ``history``: ``before the fix`` / ``after the fix``;
- ``machine-load``: ``load average``, ``uptime``;
- ``threads-env``: ``OMP_NUM_THREADS=<number>`` on a command line;
- ``deprecated``: the moved module names (``probdr.graphs``, ``probdr.priors``,
  ``probdr.neighbors``, ``probdr.plotting_bayes``, ``probdr.posterior_graphs``, also as
  ``from probdr import graphs``).

What is not searched: the attributes of tags (links, ids, classes), ``<script>`` and ``<style>``
elements, the outputs of executed notebook cells (``cell_output``: what the code printed when the
site was built), and the folders ``_static`` (theme and MathJax files), ``_sources`` (copies of
the sources), ``_modules`` (highlighted source code of the package, where the moved names are
defined) and ``_images``. Every finding is printed as ``file:line: [kind] match``, with the line
of the HTML file; the exit status is 1 when there is any, 2 when the directory holds no HTML.

Pure standard library: it does not import probdr.
"""

from __future__ import annotations

import argparse
import bisect
import fnmatch
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import NamedTuple

#: folders of a Sphinx build that hold no page text
SKIP_DIRS = {"_static", "_sources", "_modules", "_images", "_downloads", ".doctrees"}
#: elements whose content is not page text
SKIP_TAGS = {"script", "style", "template"}
#: classes of elements whose content is not written text (outputs of executed notebook cells)
SKIP_CLASSES = {"cell_output"}
#: elements that end a line of text: a space is put between their contents
BLOCK_TAGS = {"p", "div", "li", "ul", "ol", "td", "th", "tr", "table", "pre", "br", "dt", "dd",
              "dl", "section", "article", "aside", "nav", "header", "footer", "h1", "h2", "h3",
              "h4", "h5", "h6", "blockquote", "figure", "figcaption", "caption", "hr"}
#: elements without an end tag
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
             "source", "track", "wbr"}

_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
          r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
_MOVED = r"(?:graphs|priors|neighbors|plotting_bayes|posterior_graphs)"

#: (kind, pattern) searched in the text of every page
PATTERNS: list[tuple[str, re.Pattern]] = [
    ("date", re.compile(r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b")),
    ("date", re.compile(rf"\b(?:\d{{1,2}} )?{_MONTH}\.? (?:\d{{1,2}}, )?(?:19|20)\d\d\b")),
    ("hash", re.compile(r"(?<![\w.\-/])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}"
                        r"(?![\w\-])")),
    ("issue", re.compile(r"\b(?:issues?|tickets?|PRs?|pull requests?|work[- ]items?)\s+#?\d+\b",
                         re.IGNORECASE)),
    ("issue", re.compile(r"\bwork[- ]items?\b", re.IGNORECASE)),
    ("issue", re.compile(r"(?<![\w&#/])#\d+\b")),
    ("history", re.compile(r"\b(?:before|after) the fix\b", re.IGNORECASE)),
    ("machine-load", re.compile(r"\bload averages?\b|\buptime\b", re.IGNORECASE)),
    ("threads-env", re.compile(r"\bOMP_NUM_THREADS=\d+")),
    ("deprecated", re.compile(rf"\bprobdr\.{_MOVED}\b")),
    ("deprecated", re.compile(rf"\bfrom probdr import (?:[\w ]+,\s*)*{_MOVED}\b")),
]


class Finding(NamedTuple):
    path: str
    line: int
    kind: str
    match: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: [{self.kind}] {self.match}"


class _TextExtractor(HTMLParser):
    """Collects the text of a page as ``(text, line)`` chunks, leaving out what is skipped."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.chunks: list[tuple[str, int]] = []
        self._skip_depth = 0  # > 0 inside a skipped element: its nesting depth

    def handle_starttag(self, tag, attrs):
        if tag in VOID_TAGS:
            if tag in BLOCK_TAGS and not self._skip_depth:
                self.chunks.append((" ", self.getpos()[0]))
            return
        if self._skip_depth:
            self._skip_depth += 1
            return
        classes = set((dict(attrs).get("class") or "").split())
        if tag in SKIP_TAGS or classes & SKIP_CLASSES:
            self._skip_depth = 1
        elif tag in BLOCK_TAGS:
            self.chunks.append((" ", self.getpos()[0]))

    def handle_startendtag(self, tag, attrs):
        if tag in BLOCK_TAGS and not self._skip_depth:
            self.chunks.append((" ", self.getpos()[0]))

    def handle_endtag(self, tag):
        if tag in VOID_TAGS:
            return
        if self._skip_depth:
            self._skip_depth -= 1
        elif tag in BLOCK_TAGS:
            self.chunks.append((" ", self.getpos()[0]))

    def handle_data(self, data):
        if not self._skip_depth:
            self.chunks.append((data, self.getpos()[0]))


#: the page whose tables say when they were measured, and that statement, right before its date
BENCHMARKS_PAGE = "benchmarks.html"
MEASURED = re.compile(r"\b[Mm]easured (?:on|from) (?:\S+ to )?$")


def check_text(html: str, path: str = "<html>") -> list[Finding]:
    """The findings in one page's HTML."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    starts, lines, parts, pos = [], [], [], 0
    for text, line in parser.chunks:
        starts.append(pos)
        lines.append(line)
        parts.append(text)
        pos += len(text)
    text = "".join(parts)
    found = []
    for kind, pattern in PATTERNS:
        for m in pattern.finditer(text):
            if kind == "date" and Path(path).name == BENCHMARKS_PAGE and \
                    MEASURED.search(text, max(0, m.start() - 40), m.start()):
                continue
            k = bisect.bisect_right(starts, m.start()) - 1
            line = lines[k] + text.count("\n", starts[k], m.start())
            found.append(Finding(path, line, kind, m.group(0)))
    return sorted(set(found), key=lambda f: (f.line, f.kind, f.match))


def html_files(root: Path, exclude: list[str] = ()) -> list[Path]:
    """The pages under ``root``: ``.html`` files outside ``SKIP_DIRS`` whose path relative to
    ``root`` matches none of the ``exclude`` glob patterns."""
    pages = []
    for p in sorted(root.rglob("*.html")):
        rel = p.relative_to(root)
        if set(rel.parts[:-1]) & SKIP_DIRS:
            continue
        if any(fnmatch.fnmatch(rel.as_posix(), pat) for pat in exclude):
            continue
        pages.append(p)
    return pages


def check_tree(root, exclude: list[str] = ()) -> tuple[list[Finding], int]:
    """The findings in every page under ``root``, and the number of pages checked."""
    root = Path(root)
    pages = html_files(root, exclude)
    found = []
    for p in pages:
        found += check_text(p.read_text(encoding="utf-8", errors="replace"),
                            p.relative_to(root).as_posix())
    return found, len(pages)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("html_dir", help="the built HTML directory (e.g. docs/_build/html)")
    ap.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                    help="leave out pages whose path relative to html_dir matches this glob "
                         "(repeatable), e.g. --exclude api.html")
    a = ap.parse_args(argv)
    root = Path(a.html_dir)
    if not root.is_dir():
        print(f"check_html: {root} is not a directory", file=sys.stderr)
        return 2
    found, n = check_tree(root, a.exclude)
    if n == 0:
        print(f"check_html: no HTML pages under {root}", file=sys.stderr)
        return 2
    for f in found:
        print(f)
    pages = len({f.path for f in found})
    print(f"check_html: {n} pages checked, {len(found)} finding(s) in {pages} page(s)"
          + (f", excluded: {', '.join(a.exclude)}" if a.exclude else ""), file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
