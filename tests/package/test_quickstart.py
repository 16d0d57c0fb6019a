"""Every code block of the quickstart runs as written: the Python blocks in order (one scope, as a
reader pastes them), the command lines through the CLI, and its install lines are the README's."""

import re
import shlex
from pathlib import Path

import matplotlib
import pytest

from probdr import cli

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "docs" / "quickstart.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", QUICKSTART.read_text(), flags=re.S)


def _lines(lang: str) -> list[str]:
    return [ln.strip() for b in _blocks(lang) for ln in b.splitlines()
            if ln.strip() and not ln.strip().startswith("#")]


def test_the_quickstart_python_blocks_run_in_order(tmp_path, monkeypatch):
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    blocks = _blocks("python")
    assert len(blocks) >= 3
    scope: dict = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{QUICKSTART}:block{i}", "exec"), scope)  # noqa: S102
    assert scope["Z"].shape == (1797, 2)
    matplotlib.pyplot.close("all")


def test_the_quickstart_install_lines_are_the_readmes():
    readme = (ROOT / "README.md").read_text()
    pip = [ln.split("#")[0].strip() for ln in _lines("bash") if ln.startswith("pip ")]
    assert pip and all(ln in readme or ln.split(" && ")[0] in readme for ln in pip), pip
    for full in (ln for ln in pip if " && " in ln):  # the README's two set-up commands verbatim
        assert full in readme, full


@pytest.mark.parametrize("line", [ln for ln in _lines("bash") if ln.startswith("probdr ")])
def test_the_quickstart_command_lines_run(line, tmp_path, monkeypatch, capsys):
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    argv = shlex.split(line)[1:]
    assert cli.main(argv) == 0, capsys.readouterr().err
    for flag in ("--out", "--plot"):
        if flag in argv:
            assert (tmp_path / argv[argv.index(flag) + 1]).stat().st_size > 0


def test_every_quickstart_shell_line_is_covered():
    unknown = [ln for ln in _lines("bash") if not ln.startswith(("pip ", "probdr "))]
    assert unknown == []
