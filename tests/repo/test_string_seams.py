"""Every place that names one of our modules in a string resolves: the seams deployed
configs use (Ray Serve's `serving.app:build`, the router class, vLLM's plugin entry point
and worker extension), the `python -m` targets, mock paths and the names in the Makefile,
the Dockerfiles, the chart and the GPU scripts. Moving a module without them breaks a
deployment at start, not at import, so nothing else would notice."""

import ast
import importlib
import importlib.util
import re
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from serving.config.preset import Preset
from tests.support.paths import ROOT

NAME = re.compile(r"\b(?:serving|model_overrides)(?:\.\w+)+(?::\w+)?")
# `from package import name` inside a string (code run by `python -c`, a child's script).
FROM_IMPORT = re.compile(r"\bfrom ((?:serving|model_overrides)(?:\.\w+)*) import (\w+)")
# Preset keys look like module paths (`serving.proxy=python`): they are not ours to import.
PRESET_KEYS = {
    f"serving.{field}" for field in Preset.model_fields["serving"].annotation.model_fields
}
# Those of them that are no package of ours either (`serving.routing` is both).
KEYS_ONLY = {key for key in PRESET_KEYS if importlib.util.find_spec(key) is None}
PYTHON_TREES = ("serving", "model_overrides", "tests", "tools")
OTHER_FILES = (
    "Makefile",
    "pyproject.toml",
    "Dockerfile.cuda",
    "Dockerfile.rocm",
    *(str(p.relative_to(ROOT)) for p in (ROOT / "docker").glob("*.sh")),
    *(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "gpu").glob("*.sh")),
    *(
        str(p.relative_to(ROOT))
        for p in (ROOT / "helm").rglob("*")
        if p.suffix in (".yaml", ".tpl")
    ),
)


def _python_strings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def named() -> dict[str, set[str]]:
    """Each dotted name of ours found in a string -> the files naming it."""
    found: dict[str, set[str]] = {}
    texts: list[tuple[str, str]] = []
    for tree in PYTHON_TREES:
        for path in (ROOT / tree).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            texts += [(rel, s) for s in _python_strings(path)]
    texts += [(f, (ROOT / f).read_text()) for f in OTHER_FILES if (ROOT / f).is_file()]
    for where, text in texts:
        imported = [f"{package}.{name}" for package, name in FROM_IMPORT.findall(text)]
        for name in NAME.findall(text) + imported:
            if name in PRESET_KEYS or any(name.startswith(key + ".") for key in KEYS_ONLY):
                continue
            found.setdefault(name, set()).add(where)
    return found


def resolves(name: str) -> bool:
    """`module:attr`, `module`, or `module.attr.attr` (a mock path)."""
    module, _, attr = name.partition(":")
    parts = module.split(".")
    for cut in range(len(parts), 0, -1):
        head = ".".join(parts[:cut])
        try:
            spec = importlib.util.find_spec(head)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            continue
        obj = importlib.import_module(head)
        for part in parts[cut:] + ([attr] if attr else []):
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True
    return False


NAMES = named()


def test_the_deployed_seams_are_among_the_names_checked():
    for seam in (
        "serving.app:build",
        "serving.routing.router:PrefixAffinityRouter",
        "model_overrides.plugin:register",
        "model_overrides.engine_status.OverrideStatusExtension",
    ):
        assert seam in NAMES, seam
    plugins = entry_points(group="vllm.general_plugins")
    assert [e.value for e in plugins if e.name == "dsv4_overrides"] == [
        "model_overrides.plugin:register"
    ]


@pytest.mark.parametrize("name", sorted(NAMES))
def test_a_named_module_resolves(name: str):
    assert resolves(name), f"{name} (named in {', '.join(sorted(NAMES[name]))}) does not resolve"
