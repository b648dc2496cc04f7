"""Every preset against the installed vLLM's own code: its argument parser (as `vllm serve`
builds it), its environment-variable table and its speculative methods.

    python -m serving.compat.preset_vllm_check        # one JSON line: preset -> problems

Needs vLLM, pydantic and PyYAML only (no Ray), so the version matrix runs it in each
version's environment (model_overrides/compat/vllm_matrix.py).
"""

import json
from typing import Any, Literal, Union, get_args, get_origin

from serving.config.preset import list_presets, load_preset
from serving.config.vllm_args import to_cli_args

# Environment variables a preset may set that are not vLLM's, each with who reads it.
OTHER_ENV: dict[str, str] = {}


def literal_values(tp: Any) -> set[str]:
    if get_origin(tp) is Literal:
        out: set[str] = set()
        for arg in get_args(tp):
            out |= literal_values(arg) if not isinstance(arg, str) else {arg}
        return out
    if get_origin(tp) is Union:
        return set().union(*(literal_values(a) for a in get_args(tp)))
    return set()


def problems(name: str, parser: Any) -> list[str]:
    import vllm.envs
    from vllm.config.speculative import SpeculativeMethod

    preset = load_preset(name)
    found = []
    kwargs = preset.engine_kwargs()
    try:
        parser.parse_args(["--model", "/models/m", *to_cli_args(kwargs)])
    except SystemExit:
        found.append(f"vLLM's parser rejects {to_cli_args(kwargs)}")
    for var in preset.engine_env():
        if var.startswith("VLLM_") and var not in vllm.envs.environment_variables:
            found.append(f"{var} is not in vllm.envs")
        elif not var.startswith("VLLM_") and var not in OTHER_ENV and not var.startswith("DSV4_"):
            found.append(f"{var}: no reader named in OTHER_ENV")
    method = kwargs.get("speculative_config", {}).get("method")
    if method is not None and method not in literal_values(SpeculativeMethod):
        found.append(f"speculative method {method!r} is not one vLLM accepts")
    return found


def main() -> None:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from serving.compat.vllm_cli_args import cli_args

    parser = cli_args().make_arg_parser(FlexibleArgumentParser())
    print("PRESETS " + json.dumps({name: problems(name, parser) for name in list_presets()}))


if __name__ == "__main__":
    main()
