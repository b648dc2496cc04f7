"""Do Ray Serve LLM's imports of vLLM resolve in the installed vLLM?

    python -m serving.compat.ray_vllm_imports RAY_LLM_SERVE_DIR [--no-aliases]   # one JSON line

Ray Serve LLM imports vLLM by module path (ray/llm/_internal/serve/engines/vllm/...), so
a vLLM that moves a module breaks the Serve replicas at import, before any engine starts.
The version matrix runs this in each vLLM's environment on the project's Ray source (the
side environments have no Ray). Only module-level imports count: those inside functions
run on paths we may never take, and Ray guards some of them. They resolve with the
images' import aliases installed (model_overrides/compat/import_aliases.py), as in the images.
"""

import ast
import importlib
import json
import sys
from pathlib import Path

from model_overrides.compat import import_aliases


def module_level_imports(path: Path) -> list[tuple[str, str | None, int]]:
    """(module, name or None, line) of each ``import vllm...`` / ``from vllm... import``
    at the top of ``path`` (inside ``if TYPE_CHECKING:`` not counted)."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "vllm":
            found += [(node.module, a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name.startswith("vllm")]
    return found


def unresolved(root: Path, aliases: bool = True) -> dict[str, str]:
    """``file:line`` -> what does not resolve, for every module-level vLLM import."""
    if aliases:
        import_aliases.install()
    missing = {}
    for path in sorted(root.rglob("*.py")):
        for module, name, line in module_level_imports(path):
            where = f"{path.relative_to(root)}:{line}"
            try:
                mod = importlib.import_module(module)
            except Exception as exc:  # noqa: BLE001 - any failure is what we report
                missing[where] = f"{module}: {type(exc).__name__}"
                continue
            if name is not None and not hasattr(mod, name):
                try:
                    importlib.import_module(f"{module}.{name}")
                except Exception:  # noqa: BLE001
                    missing[where] = f"{module}.{name}: absent"
    return missing


if __name__ == "__main__":
    print("IMPORTS " + json.dumps(unresolved(Path(sys.argv[1]), "--no-aliases" not in sys.argv)))
