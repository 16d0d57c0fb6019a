"""The package's layout flows one way: every module imports only from its own layer or those
below it, there is no import cycle, and the earlier module names still import."""

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: layers from the bottom up; a module may import from its own layer or any lower one
LAYERS = [
    ["probdr._utils", "probdr.config", "probdr.datasets", "probdr.kernels", "probdr.optim",
     "probdr.serialize", "probdr._version"],
    ["probdr._compute"],  # the engine room: all-pairs and edge sums, FFT, memory, ranks, steps
    ["probdr.ot"],
    ["probdr.laws"],
    ["probdr.input", "probdr.affinities"],  # probdr.affinities: the input module's old name
    ["probdr.models"],
    ["probdr.infer"],
    ["probdr.init"],
    ["probdr.estimators"],
    ["probdr.diagnostics", "probdr.metrics"],
    ["probdr.plotting"],
    ["probdr.cli", "probdr.anndata", "probdr.__main__"],
]


def _rank(module: str) -> int | None:
    if module == "probdr":
        return len(LAYERS)
    for r, layer in enumerate(LAYERS):
        if any(module == m or module.startswith(m + ".") for m in layer):
            return r
    return None


def _modules():
    for path in sorted((ROOT / "probdr").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path, parts[-1] == "__init__"
    for path in sorted((ROOT / "models").glob("*.py")):
        name = "probdr.models" + ("" if path.stem == "__init__" else "." + path.stem)
        yield name, path, path.stem == "__init__"


def _imports(name: str, path: Path, is_package: bool):
    """Every probdr module imported anywhere in the file (functions included)."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("probdr"):
                if node.module is None or _rank(target) is None:  # "from . import x"
                    for alias in node.names:
                        yield f"{target}.{alias.name}"
                else:
                    yield target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("probdr"):
                    yield alias.name


def test_every_module_has_a_layer():
    missing = [name for name, _, _ in _modules() if _rank(name) is None]
    assert not missing, missing


def test_no_module_imports_from_a_layer_above_its_own():
    upward = []
    for name, path, is_pkg in _modules():
        for target in _imports(name, path, is_pkg):
            r_from, r_to = _rank(name), _rank(target)
            if r_to is not None and r_to > r_from:
                upward.append(f"{name} -> {target}")
    assert not upward, upward


def test_no_import_cycle_and_no_lazy_getattr():
    graph = {}
    for name, path, is_pkg in _modules():
        if name != "probdr":  # the top level imports its public names at first use (PEP 562)
            assert "\ndef __getattr__" not in path.read_text(), name  # nowhere else
        graph[name] = {t for t in _imports(name, path, is_pkg) if t != name}
    # modules only (a package's __init__ re-exporting its children is not a cycle of code)
    packages = {n for n, _, is_pkg in _modules() if is_pkg}
    edges = {n: {t for t in ts if t in graph and t not in packages}
             for n, ts in graph.items() if n not in packages}
    state = {}

    def visit(n, stack):
        state[n] = 1
        for m in edges.get(n, ()):
            if state.get(m) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack + [n, m]))
            if m not in state:
                visit(m, stack + [n])
        state[n] = 2

    for n in edges:
        if n not in state:
            visit(n, [])


#: lines of code a function may hold (its docstring not counted): one function, one job
FUNCTION_BUDGET = 80
#: functions allowed over the budget, each with the reason
LONG_FUNCTIONS: dict[str, str] = {
    "probdr.estimators.coupling.__init__":
        "an explicit constructor: one assignment per parameter (41 of them), nothing else",
}
#: imports of another module's private names allowed, each with the reason (at most 5)
PRIVATE_IMPORTS: dict[str, str] = {}


def _code_lines(fn: ast.AST) -> int:
    n = fn.end_lineno - fn.lineno + 1
    first = fn.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        n -= first.end_lineno - first.lineno + 1
    return n


def test_every_function_within_the_budget():
    """Files are cut by subject, not by length; a function does one job in about 80 lines."""
    long = {}
    for name, path, _ in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = f"{name}.{node.name}"
                if _code_lines(node) > FUNCTION_BUDGET and key not in LONG_FUNCTIONS:
                    long[key] = _code_lines(node)
    assert not long, long


def _private_imports():
    for name, path, is_pkg in _modules():
        package = name if is_pkg else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")
                target = ".".join(base[: len(base) - (node.level - 1)]
                                  + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("probdr") or target == name:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    yield f"{name} <- {target}.{alias.name}"


def test_modules_import_only_public_names_of_each_other():
    """A module's private names are its own: what a sibling needs is a public name of its
    module (the engine room, probdr._compute, is private as a package, not name by name)."""
    found = sorted(set(_private_imports()) - set(PRIVATE_IMPORTS))
    assert not found, found
    assert len(PRIVATE_IMPORTS) <= 5


def test_every_package_is_installed():
    """pyproject.toml lists every package of the tree (setuptools installs only those)."""
    import re

    text = (ROOT / "pyproject.toml").read_text()
    listed = set(re.findall(r'"([\w.]+)"', re.search(r"^packages = \[(.*)\]$", text, re.M)[1]))
    assert listed == {name for name, _, is_pkg in _modules() if is_pkg}


def test_affinities_is_the_input_module():
    assert importlib.import_module("probdr.affinities") is importlib.import_module(
        "probdr.input.affinities")
