"""vLLM engine arguments for the golden model, derived from its preset.

The preset is the one source of truth: the Ray Serve app, vLLM's own server
(`serve-vllm`), the tests and the benchmarks all start from the same arguments.
cpu-tiny by default; ``DSV4_GOLDEN_PRESET=gpu-golden`` gives the same model's arguments
on one NVIDIA GPU (what the GPU tests' engine processes take).
"""

import os
from functools import cache
from pathlib import Path
from typing import Any

from serving.config.preset import Preset, Speculation, load_preset

GOLDEN_PRESET = "cpu-tiny"
PRESET_ENV = "DSV4_GOLDEN_PRESET"


def golden_preset() -> Preset:
    return _load(os.environ.get(PRESET_ENV) or GOLDEN_PRESET)


@cache
def _load(name: str) -> Preset:
    return load_preset(name)


SERVED_MODEL_NAME = golden_preset().model.id
DEFAULT_SPEC_K = golden_preset().speculation.num_speculative_tokens
CPU_ENV = dict(_load(GOLDEN_PRESET).env)
DEFAULT_MODEL_DIR = Path(golden_preset().model.source)


def golden_engine_kwargs(model_dir: str | Path, **overrides: Any) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM`` / the OpenAI server; no speculation unless asked."""
    kwargs = golden_preset().engine_kwargs()
    kwargs.pop("speculative_config", None)
    kwargs.update(model=str(model_dir), served_model_name=SERVED_MODEL_NAME)
    kwargs.update(overrides)
    return kwargs


def mtp_config(k: int, draft_sample_method: str | None = None) -> dict[str, Any] | None:
    """vLLM's speculative config for the golden model's MTP head with k draft tokens (None
    for k = 0), from the golden preset's speculation (serving/config/preset.py), its draft
    sampling replaced where ``draft_sample_method`` is given."""
    speculation = golden_preset().speculation
    if draft_sample_method is not None:
        speculation = Speculation.model_validate(
            speculation.model_dump() | {"draft_sample_method": draft_sample_method}
        )
    return speculation.vllm_config(k=k, guard_tables=False)
