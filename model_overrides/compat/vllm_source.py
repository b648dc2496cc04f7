"""The installed vLLM's source, read without importing it: where a module's file is, its
parsed tree (parsed once), and one definition's node or text. The contract checks and the
patch probes read vLLM through here: some of its modules import DSV4's model code at
import time, which off the CPU must wait for vLLM's config (compat/breakable_graphs.py)."""

import ast
import functools
import importlib.util
from pathlib import Path

ROOTS: dict[str, Path] = {}  # top-level package -> its directory (tests add synthetic ones)


def package_root(top: str) -> Path | None:
    """The directory of top-level package ``top``, found without importing it."""
    if top not in ROOTS:
        spec = importlib.util.find_spec(top)
        if spec is None or not spec.submodule_search_locations:
            return None
        ROOTS[top] = Path(next(iter(spec.submodule_search_locations)))
    return ROOTS[top]


def module_file(module: str) -> Path | None:
    """``module``'s source file (a ``.py`` or a package's ``__init__.py``); None if absent."""
    top, *rest = module.split(".")
    root = package_root(top)
    if root is None:
        return None
    base = root.joinpath(*rest)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def tree_of(module: str) -> ast.Module | None:
    path = module_file(module)
    return parsed(path) if path else None


def source_of(module: str, qualname: str) -> str | None:
    """The source text of ``module.qualname`` (a function, a class or ``Class.method``);
    None when the module or the name is missing."""
    path = module_file(module)
    if path is None:
        return None
    node: ast.AST = parsed(path)
    for part in qualname.split("."):
        body = getattr(node, "body", [])
        defs = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        node = next((n for n in body if isinstance(n, defs) and n.name == part), None)
        if node is None:
            return None
    return ast.get_source_segment(path.read_text(), node)
