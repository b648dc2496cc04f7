"""Where vLLM keeps its server's argument classes: ``vllm.entrypoints.common.cli_args``
from 0.33, ``vllm.entrypoints.launchers.cli_args`` in 0.32 (both define ``FrontendArgs``
and ``make_arg_parser``)."""

import importlib
from types import ModuleType

MODULES = ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args")


def cli_args() -> ModuleType:
    for name in MODULES:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # the module exists and something it imports is missing
                raise
    raise ModuleNotFoundError(f"none of {', '.join(MODULES)} is in the installed vLLM")
