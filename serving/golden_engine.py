"""vLLM engine arguments for the golden model on the CPU: one place for tests, bench and serve."""

from pathlib import Path
from typing import Any

SERVED_MODEL_NAME = "dsv4-golden"
DEFAULT_SPEC_K = 2  # MTP draft tokens per step for the local default
DEFAULT_MODEL_DIR = Path(".cache/models/golden")
CPU_ENV = {
    # GiB of KV cache; the golden model needs very little.
    "VLLM_CPU_KVCACHE_SPACE": "1",
}


def golden_engine_kwargs(model_dir: str | Path, **overrides: Any) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM`` / ``AsyncEngineArgs`` on the golden checkpoint."""
    kwargs: dict[str, Any] = {
        "model": str(model_dir),
        "served_model_name": SERVED_MODEL_NAME,
        "dtype": "bfloat16",
        "max_model_len": 4096,
        "max_num_seqs": 16,
        "max_num_batched_tokens": 2048,
        "block_size": 256,  # the DSV4 CPU backend requires 256
        "enforce_eager": True,  # starts in ~20 s instead of ~45 s; same kernels
        "seed": 0,
    }
    kwargs.update(overrides)
    return kwargs


def mtp_config(k: int) -> dict[str, Any] | None:
    """vLLM's speculative config for DSV4's MTP head with k draft tokens (None for k = 0)."""
    return {"method": "mtp", "num_speculative_tokens": k} if k > 0 else None


def to_cli_args(kwargs: dict[str, Any]) -> list[str]:
    """The same arguments in vLLM's command-line form (for the OpenAI server)."""
    args: list[str] = []
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if key == "model":
            args += ["--model", str(value)]
        elif isinstance(value, bool):
            if value:
                args.append(flag)
        elif isinstance(value, dict):
            import json

            args += [flag, json.dumps(value)]
        else:
            args += [flag, str(value)]
    return args
