"""Engine keyword arguments in vLLM's command-line form: the one renderer for every
consumer that starts vLLM's server from a preset (the local launcher, every bench arm,
forward_compare, the golden engine's server) and for the preset check.

The rules follow vLLM's parser (``vllm/engine/arg_utils.py`` builds booleans as
``argparse.BooleanOptionalAction`` and parses dict- and list-typed fields as JSON): a
boolean is ``--flag`` or ``--no-flag``, so ``False`` is said rather than dropped; a dict or
a list is JSON; None is left out (vLLM's default).
"""

from __future__ import annotations

import json
from typing import Any


def to_cli_args(kwargs: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for key, value in kwargs.items():
        if value is None:
            continue
        name = key.replace("_", "-")
        if isinstance(value, bool):
            args.append(f"--{name}" if value else f"--no-{name}")
        elif isinstance(value, dict | list | tuple):
            args += [f"--{name}", json.dumps(value)]
        else:
            args += [f"--{name}", str(value)]
    return args
