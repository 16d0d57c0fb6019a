"""The README's Python block runs as pasted (on bundled data), in a scratch directory."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_readme_has_one_python_block():
    assert len(_python_blocks(README.read_text())) == 1


def test_the_readme_python_block_runs_as_pasted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # it saves a file
    block = _python_blocks(README.read_text())[0]
    scope: dict = {}
    exec(compile(block, str(README), "exec"), scope)  # noqa: S102 - the README's own code
    Z, y = scope["Z"], scope["y"]
    assert Z.shape == (len(y), 2)
    assert scope["draws"].shape == (200, 10, 2)
    assert (tmp_path / "tsne.npz").exists()


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
