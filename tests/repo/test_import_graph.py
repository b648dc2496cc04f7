"""The package's import graph, read from the source: the plugin never reaches into the
serving side, nothing shipped imports the tests or tools beside it (the wheel carries
neither), and no module-level import cycle exists (a cycle makes import order matter,
and vLLM loads the plugin in processes that import it first)."""

import ast
from pathlib import Path

from tests.support.paths import ROOT

PACKAGES = ("serving", "model_overrides")
OUTSIDE = ("tests", "tools")  # never imported by what ships


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The module of ours a dotted name lives in (a function's module, a submodule)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        base = ".".join(parts + ([base] if base else []))
    # `from package import module`: the module is what is imported.
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def imports(module: str, top_level_only: bool) -> set[str]:
    """Every dotted name ``module`` imports; with ``top_level_only``, only those imported
    when it is imported (not inside functions)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    stack: list[ast.AST] = [ast.parse(path.read_text())]
    while stack:
        node = stack.pop()
        if top_level_only and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.update(_imported(node, package))
        stack.extend(ast.iter_child_nodes(node))
    return found


def _edges(top_level_only: bool = True) -> dict[str, set[str]]:
    """Imports between our modules (module-level only, or those inside functions too); a
    package's own ``__init__`` is not an edge from its submodules (Python imports it
    first whatever they import)."""
    edges = {}
    for module in MODULES:
        owners = {_owner(name) for name in imports(module, top_level_only=top_level_only)}
        edges[module] = {o for o in owners if o and o != module and not module.startswith(o + ".")}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_plugin_never_imports_the_serving_side():
    upward = {
        (module, name)
        for module in MODULES
        if module.startswith("model_overrides")
        for name in imports(module, top_level_only=False)
        if name.split(".")[0] == "serving"
    }
    assert upward == set()


def test_nothing_shipped_imports_the_tests_or_tools():
    reaching = {
        (module, name)
        for module in MODULES
        for name in imports(module, top_level_only=False)
        if name.split(".")[0] in OUTSIDE
    }
    assert reaching == set()


def test_no_module_level_import_cycle():
    assert _cycles(_edges()) == []


def test_no_import_cycle_through_function_level_imports_either():
    # A module that imports another inside a function still depends on it: a cycle there
    # makes the two one module in two files (a change to either can break the other).
    assert _cycles(_edges(top_level_only=False)) == []


def test_the_cycle_finder_finds_a_cycle():
    # The check itself: a two-module cycle and a self-contained chain.
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    # And it reads real imports: the registry is imported by every patch module.
    edges = _edges()
    assert "model_overrides.registry" in edges["model_overrides.patches.dummy_weights"]
    assert len(MODULES) > 100 and sum(map(len, edges.values())) > 200
