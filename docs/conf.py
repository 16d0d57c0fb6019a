"""Sphinx configuration of the probdr documentation.

Build (CI runs exactly this; warnings are errors):

    python -m sphinx -W --keep-going -b html docs docs/_build/html

Pages are Markdown (MyST). The table of contents of ``index.md`` is completed at build time with
every other page found in ``docs/`` (see ``_complete_toctree``): pages written by other parts of
the project (``ot.md``, ``bayesian.md``, ``benchmarks.md``, ...) appear when they exist, and a
missing page is never a warning.
"""

from __future__ import annotations

import os
import re

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
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "README*", "**/README*", "**.ipynb_checkpoints", "Thumbs.db",
                    ".DS_Store"]
templates_path: list[str] = []

# MyST: $...$ and $$...$$ maths, amsmath environments, ::: fences, anchors on headings
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
myst_dmath_double_inline = True

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
html_theme = "alabaster"
html_title = f"probdr {release}"
html_static_path = ["_static"] if os.path.isdir(os.path.join(os.path.dirname(__file__),
                                                             "_static")) else []
html_theme_options = {
    "description": "Dimensionality reduction as probabilistic programs on Pyro",
    "fixed_sidebar": True,
    "show_relbars": True,
    "page_width": "1100px",
    "sidebar_width": "240px",
}
html_sidebars = {"**": ["about.html", "navigation.html", "relations.html", "searchbox.html"]}

# -- the table of contents ---------------------------------------------------------------------
#: pages every build has, in this order
CORE_PAGES = ["quickstart", "concepts", "api"]
#: pages written elsewhere in the project, listed in this order when they exist
OPTIONAL_PAGES = ["ot", "ot-results", "wishart", "ccpca-results", "bayesian", "benchmarks"]
#: the line of index.md that is replaced by the toctree of the optional and any other pages
TOC_MARKER = "% probdr: more pages are listed here by conf.py"


def _complete_toctree(app, docname, source):
    """Replace the marker line of ``index.md`` with a toctree of the pages that exist."""
    if docname != root_doc:
        return
    found = set(app.env.found_docs) - {root_doc, *CORE_PAGES}
    pages = [p for p in OPTIONAL_PAGES if p in found]
    pages += sorted(found - set(OPTIONAL_PAGES))
    if pages:
        block = "```{toctree}\n:maxdepth: 2\n:caption: Methods and results\n\n"
        block += "\n".join(pages) + "\n```\n"
    else:
        block = ""
    source[0] = re.sub(rf"^{re.escape(TOC_MARKER)}\s*$", lambda _: block, source[0],
                       flags=re.MULTILINE)


def _always_reread_index(app, env, added, changed, removed):
    """Re-read the index on every build, so that added or removed pages enter its toctree."""
    return [root_doc] if root_doc in env.found_docs else []


def setup(app):
    app.connect("source-read", _complete_toctree)
    app.connect("env-get-outdated", _always_reread_index)
