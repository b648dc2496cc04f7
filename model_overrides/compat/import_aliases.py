"""vLLM module paths that other projects still import, served from where vLLM moved them.

Ray Serve LLM 2.60 imports ``FrontendArgs`` from ``vllm.entrypoints.launchers.cli_args``
at module level (ray/llm/_internal/serve/engines/vllm/vllm_models.py:7, vllm_engine.py:23,
routing_policies/kv_aware/vllm/tokenizer.py:6); vLLM 0.33 moved that module to
``vllm.entrypoints.common.cli_args`` with the same ``FrontendArgs`` fields plus
``reasoning_effort_map`` (which 0.33's ``init_app_state`` reads; Ray builds its args from
``FrontendArgs`` itself, so the field comes along). Without the old path a Serve LLM
replica cannot import on 0.33.

The finder sits at the end of ``sys.meta_path``: it answers only for a name every other
finder missed, so on a vLLM that still has the old module (0.32) nothing changes. The
images install it at interpreter start (a ``.pth`` file, docker/install.sh), because Ray
imports these modules in its controller, replicas and remote tasks before any vLLM plugin
is loaded. Importing this module imports nothing from vLLM.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

MOVED = {"vllm.entrypoints.launchers.cli_args": "vllm.entrypoints.common.cli_args"}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:  # already executed as its target
        pass


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    def __init__(self, moved: dict[str, str]) -> None:
        self.moved = moved

    def find_spec(self, fullname: str, path=None, target=None):  # noqa: ANN001 - importlib's
        new = self.moved.get(fullname)
        if new is None or importlib.util.find_spec(new) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new))


def install(moved: dict[str, str] = MOVED) -> MovedModuleFinder:
    """Append the finder for ``moved`` (once per mapping) and return it."""
    for finder in sys.meta_path:
        if isinstance(finder, MovedModuleFinder) and finder.moved == moved:
            return finder
    finder = MovedModuleFinder(moved)
    sys.meta_path.append(finder)
    return finder


def installed() -> bool:
    """Whether a finder is in place (the images' ``.pth`` line installs one at start)."""
    return any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path)


PTH_LINE = "import model_overrides.compat.import_aliases as _a; _a.install()\n"
