"""Sphinx configuration of the probdr documentation.

Build (CI runs exactly this; warnings are errors):

    python -m sphinx -W --keep-going -b html docs docs/_build/html

Pages are Markdown (MyST). The sidebar is organised by what users do: ``SECTIONS`` below lists
the sections and their pages, and ``_complete_toctree`` writes one toctree per section into
``index.md`` at build time. A page that does not exist is left out (never a warning); a page of
``docs/`` that no section names is still listed (a research report ``*-results`` under
"Reproducing the papers", any other page under "More"), so every page is in the sidebar once.

Theme: Furo, which serves everything from the build (no web fonts, no CDN) and scrolls wide code
blocks and tables inside their own box.

Notebooks: the teaching notebooks of ``notebooks/`` are copied into ``docs/notebooks/``
(git-ignored) when the build starts and rendered by MyST-NB, which executes them during the build
(they are committed without outputs). A notebook that raises fails the build. For a quicker local
build, ``PROBDR_DOCS_EXECUTE=cache`` reuses outputs of unchanged notebooks (cache in
``docs/_build/.jupyter_cache``) and ``PROBDR_DOCS_EXECUTE=off`` renders them without outputs.

Mathematics: MathJax is served from the build itself, never from a CDN. Its files come from the
``django-static-mathjax`` package (MathJax 3.2.2 as static files, no dependencies; in the ``dev``
extra) and are copied into ``_static/mathjax/`` (see ``_copy_mathjax``).
"""

from __future__ import annotations

import filecmp
import os
import re
import shutil
from pathlib import Path

try:
    import probdr

    _release = probdr.__version__
except ImportError:  # pragma: no cover - the API page needs the package: pip install -e .
    _release = "0.1.0"

# -- project -----------------------------------------------------------------------------------
project = "probdr"
author = "the probdr developers"
copyright = "2025, the probdr developers"
release = _release
version = ".".join(release.split(".")[:2])

# -- extensions --------------------------------------------------------------------------------
extensions = [
    "myst_nb",  # MyST Markdown pages (it loads myst_parser) and executed notebooks
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "README*", "**/README*", "**.ipynb_checkpoints", "Thumbs.db",
                    ".DS_Store"]
templates_path: list[str] = []

# MyST: $...$ and $$...$$ maths, amsmath environments, ::: fences, anchors on headings
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
myst_dmath_double_inline = True

# MathJax from the build's own _static folder (copied by _copy_mathjax), not from a CDN
MATHJAX_DIR = "mathjax"
mathjax_path = f"{MATHJAX_DIR}/tex-mml-chtml.js"  # relative to _static

# MyST-NB: execute the notebooks at build time; any error fails the build
nb_execution_mode = os.environ.get("PROBDR_DOCS_EXECUTE", "force")
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_timeout = 300  # seconds per cell, as nbmake runs the same notebooks in the tests
nb_merge_streams = True
nb_ipywidgets_js: dict = {}  # no widgets; never load their JavaScript from a CDN
# kernels inherit this process's environment: without MPLBACKEND they draw with the inline
# backend and the figures reach the pages (CI exports MPLBACKEND=Agg for the test suite)
os.environ.pop("MPLBACKEND", None)
# ... and this filter: tqdm's notice that ipywidgets is missing (its progress bars then print as
# text), raised when probdr imports Pyro, would otherwise open three notebook pages
os.environ["PYTHONWARNINGS"] = ",".join(
    w for w in (os.environ.get("PYTHONWARNINGS"), "ignore:IProgress not found:Warning") if w)

# autodoc + numpydoc: members in source order, no auto-generated member tables (they warn on
# attributes that are documented only in the class docstring)
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_default_options = {"members": True}
# methods without a docstring of their own (torch/pyro overrides such as ``expand``) stay out
autodoc_inherit_docstrings = False
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()

# -- HTML --------------------------------------------------------------------------------------
html_theme = "furo"  # self-contained: no web fonts, no CDN; code and tables scroll in their box
html_title = f"probdr {release}"
html_static_path = ["_static"] if os.path.isdir(os.path.join(os.path.dirname(__file__),
                                                             "_static")) else []
html_theme_options = {
    "navigation_with_keys": True,
}

# -- notebooks ---------------------------------------------------------------------------------
DOCS = Path(__file__).resolve().parent
NOTEBOOKS_SRC = DOCS.parent / "notebooks"
#: where the notebooks are copied for the build (git-ignored); pages ``notebooks/<name>``
NOTEBOOKS_DST = DOCS / "notebooks"


def _copy_notebooks(app, config):
    """Copy ``notebooks/*.ipynb`` into ``docs/notebooks/`` before Sphinx looks for sources.

    A file is rewritten only when its content changed (unchanged notebooks keep their time stamp
    and are not re-read by an incremental build); copies of notebooks that no longer exist are
    removed."""
    NOTEBOOKS_DST.mkdir(exist_ok=True)
    sources = sorted(NOTEBOOKS_SRC.glob("*.ipynb"))
    names = {p.name for p in sources}
    for src in sources:
        dst = NOTEBOOKS_DST / src.name
        if not dst.exists() or not filecmp.cmp(src, dst, shallow=False):
            shutil.copy2(src, dst)
    for old in NOTEBOOKS_DST.glob("*.ipynb"):
        if old.name not in names:
            old.unlink()


# -- MathJax, served locally -------------------------------------------------------------------
#: what MathJax 3's tex-mml-chtml component loads: the component itself, its CHTML fonts, and
#: what it may load on demand (TeX extensions by \require or autoload, the menu, accessibility)
MATHJAX_FILES = ["tex-mml-chtml.js", "input", "output/chtml", "ui", "a11y", "sre"]


def _mathjax_source() -> Path:
    try:
        import mathjax  # the django-static-mathjax distribution
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        raise RuntimeError(
            "the docs serve MathJax locally from the django-static-mathjax package: "
            'pip install -c constraints.txt -e ".[dev]"') from exc
    es5 = Path(mathjax.__file__).resolve().parent / "static" / "mathjax" / "es5"
    if not (es5 / "tex-mml-chtml.js").is_file():  # pragma: no cover
        raise RuntimeError(f"no MathJax 3 build found in {es5}")
    return es5


def _copy_mathjax(app, exception):
    """Copy MathJax's files into the HTML output's ``_static/mathjax/``."""
    if exception is not None or app.builder.format != "html":
        return
    src = _mathjax_source()
    dst = Path(app.outdir) / "_static" / MATHJAX_DIR
    for name in MATHJAX_FILES:
        path = src / name
        if path.is_dir():
            shutil.copytree(path, dst / name, dirs_exist_ok=True)
        else:
            dst.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dst / name)
    shutil.copy2(src.parent / "LICENSE", dst / "LICENSE")


# -- the table of contents ---------------------------------------------------------------------
NOTEBOOKS_CAPTION = "Notebooks"
PAPERS_CAPTION = "Reproducing the papers"
#: the sidebar, by what users do: (caption, [(page, sidebar title or None), ...]). A page that
#: does not exist is left out (pages written elsewhere in the project appear once they exist);
#: the notebooks section lists every notebook of ``notebooks/``.
SECTIONS = [
    ("Get started", [("quickstart", None), ("cli", None), ("migrating", None)]),
    ("Embed your data", [("input", None), ("anndata", None), ("bad-inputs", None)]),
    ("New points and saving", [("out-of-sample", None), ("saving", None)]),
    ("The model and custom priors", [("concepts", "Concepts: DR as graph coupling"),
                                     ("bayesian", None), ("wishart", None), ("ot", None)]),
    ("How sure is the map", [("uncertainty", None)]),
    ("Scale", [("devices", None), ("distributed", None), ("services", None),
               ("benchmarks", None)]),
    ("Reference", [("api", None)]),
    (NOTEBOOKS_CAPTION, [("gallery", None)]),
    (PAPERS_CAPTION, [("ccpca-results", None), ("ot-results", None)]),
]
#: pages found in ``docs/`` but named in no section go to this section, before the notebooks;
#: a page whose name ends with this suffix is a research report and goes to the papers' section
OTHER_CAPTION = "More"
REPORT_SUFFIX = "-results"
#: the line of index.md that is replaced by the toctrees
TOC_MARKER = "% probdr: the table of contents is inserted here by conf.py"


#: short sidebar titles of the notebooks; a notebook not named here is listed under its first
#: heading
NOTEBOOK_TITLES = {
    "01-graph-coupling": "01 Graph coupling: SNE, t-SNE, LargeVis, UMAP",
    "02-pca-as-wishart-coupling": "02 PCA as a Wishart coupling",
    "03-mrf-degeneracy-and-ccpca": "03 MRF degeneracy and ccPCA",
    "04-probdr-laplacian-wishart": "04 ProbDR: Laplacian–Wishart models",
    "05-bayesian-workflow": "05 The Bayesian workflow",
    "06-optimal-transport-dr": "06 Optimal transport on small data",
    "07-writing-your-own-model": "07 Writing your own model",
}


def _notebook_entry(docname: str) -> str:
    """The toctree entry of a notebook page: its title from ``NOTEBOOK_TITLES``, else the page's
    own first heading."""
    title = NOTEBOOK_TITLES.get(Path(docname).name)
    return f"{title} <{docname}>" if title else docname


def _toctree(caption: str, entries: list[str]) -> str:
    return (f"```{{toctree}}\n:hidden:\n:maxdepth: 1\n:caption: {caption}\n\n"
            + "\n".join(entries) + "\n```\n\n")


def _complete_toctree(app, docname, source):
    """Replace the marker line of ``index.md`` with one toctree per section of ``SECTIONS``."""
    if docname != root_doc:
        return
    found = set(app.env.found_docs) - {root_doc}
    named = {page for _, pages in SECTIONS for page, _ in pages}
    rest = sorted(d for d in found - named if not d.startswith("notebooks/"))
    reports = [d for d in rest if d.endswith(REPORT_SUFFIX)]
    others = [d for d in rest if not d.endswith(REPORT_SUFFIX)]
    blocks = []
    for caption, pages in SECTIONS:
        if caption == NOTEBOOKS_CAPTION and others:
            blocks.append(_toctree(OTHER_CAPTION, others))
        entries = [f"{title} <{page}>" if title else page for page, title in pages if page in found]
        if caption == NOTEBOOKS_CAPTION:
            entries += [_notebook_entry(d) for d in sorted(found) if d.startswith("notebooks/")]
        elif caption == PAPERS_CAPTION:
            entries += reports
        if entries:
            blocks.append(_toctree(caption, entries))
    source[0] = re.sub(rf"^{re.escape(TOC_MARKER)}\s*$", lambda _: "".join(blocks), source[0],
                       flags=re.MULTILINE)


def _always_reread_index(app, env, added, changed, removed):
    """Re-read the index on every build, so that added or removed pages enter its toctree."""
    return [root_doc] if root_doc in env.found_docs else []


def _skip_metadata_requests(app, what, name, obj, skip, options):
    """scikit-learn's generated ``set_<method>_request`` methods (metadata routing) are not
    probdr's API and their docstrings cite scikit-learn's glossary: leave them out."""
    if name.startswith("set_") and name.endswith("_request"):
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_metadata_requests)
    _mathjax_source()  # fail early, before a long build, when MathJax is not installed
    app.connect("config-inited", _copy_notebooks)
    app.connect("build-finished", _copy_mathjax)
    app.connect("source-read", _complete_toctree)
    app.connect("env-get-outdated", _always_reread_index)
