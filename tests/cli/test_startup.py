"""Start-up: the ``probdr`` command answers ``--help``, ``--version`` and bad arguments without
importing numpy, torch, scikit-learn or Pyro; ``import probdr`` imports none of them (each name at
its first use), and the whole API leaves the optional stacks (matplotlib, ArviZ, igraph, POT,
anndata) to the functions that use them. Module presence is
asserted (``python -X importtime`` lists every module a process imports), never a timing."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import probdr

ROOT = Path(__file__).resolve().parents[2]
#: what the parser and the path checks must not load
HEAVY = ("torch", "numpy", "scipy", "sklearn", "pyro", "pandas", "matplotlib")
#: what ``import probdr`` must not load (imported by the functions that use them)
OPTIONAL = ("matplotlib", "arviz", "xarray", "igraph", "ot", "anndata", "numba", "pynndescent",
            "umap", "openTSNE", "mlxtend")
#: the pip-generated console script of ``[project.scripts] probdr = "probdr.cli:main"``
CONSOLE_SCRIPT = """import re
import sys
from probdr.cli import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""


def _run(*argv, cwd):
    """Run ``python -X importtime ARGV`` from this checkout: (exit code, stdout, stderr, the
    top-level names of the modules it imported)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    p = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True,
                       text=True, timeout=300, env=env, cwd=cwd)
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)\s*$", p.stderr, re.M)
    return p.returncode, p.stdout, p.stderr, {n.split(".")[0] for n in names}


@pytest.mark.parametrize("argv, code, says", [
    (["--help"], 0, "usage: probdr"),
    (["--version"], 0, f"probdr {probdr.__version__}"),
    (["embed", "--help"], 0, "--inference"),
    (["embed", "--data", "missing.csv"], 2, "no such file"),
    (["embed", "--method", "nope"], 2, "invalid choice: 'nope'"),
    (["embed", "--no-such-option"], 2, "unrecognized arguments"),
    (["embed", "--out", "emb.png"], 2, "written as .npy, .csv or .tsv"),
    (["embed", "--nproc", "2", "--method", "snekhorn"], 2, "runs in one process"),
])
def test_the_command_answers_without_the_heavy_imports(tmp_path, argv, code, says):
    rc, out, err, imported = _run("-m", "probdr.cli", *argv, cwd=tmp_path)
    assert rc == code, err[-2000:]
    assert says in out + err
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_python_m_probdr_is_the_command(tmp_path):
    rc, out, err, imported = _run("-m", "probdr", "--help", cwd=tmp_path)
    assert rc == 0 and "usage: probdr" in out, err[-2000:]
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_the_console_script_answers_without_the_heavy_imports(tmp_path):
    script = tmp_path / "probdr"
    script.write_text(CONSOLE_SCRIPT)
    for argv, code in ((["--help"], 0), (["embed", "--data", "missing.npy"], 2)):
        rc, out, err, imported = _run(str(script), *argv, cwd=tmp_path)
        assert rc == code, err[-2000:]
        assert not imported & set(HEAVY), (argv, sorted(imported & set(HEAVY)))


def test_import_probdr_leaves_the_optional_stacks_to_their_functions(tmp_path):
    names = ", ".join(probdr.__all__)
    rc, out, err, imported = _run(
        "-c", f"import probdr; from probdr import {names}; print(probdr.TSNE.__name__)",
        cwd=tmp_path)
    assert rc == 0 and out.strip() == "TSNE", err[-2000:]
    assert "torch" in imported and "sklearn" in imported  # the estimators are built on them
    assert not imported & set(OPTIONAL), sorted(imported & set(OPTIONAL))


def test_import_probdr_imports_none_of_its_layers(tmp_path):
    """Each name is imported at its first use (PEP 562): ``import probdr`` loads no stack."""
    rc, out, err, imported = _run("-c", "import probdr; print(probdr.__version__)", cwd=tmp_path)
    assert rc == 0 and out.strip() == probdr.__version__, err[-2000:]
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'TSNe'"):
        probdr.TSNe  # noqa: B018
    assert {"TSNE", "config", "affinities"} <= set(dir(probdr))


def test_the_package_imported_normally_has_its_whole_api():
    for name in probdr.__all__:
        assert hasattr(probdr, name), name
    assert sys.modules["probdr.affinities"] is probdr.affinities
