"""deepseek_v4: keep prefix caching for DSV4 on CPUs without AMX tiles.

vLLM 0.32's CPU platform turns prefix caching off for MLA models unless the CPU has
AMX tiles (vllm/platforms/cpu.py:516-530). Its own comment (:258-267) says DSV4's CPU
kernels support prefix caching like the GPU backends: a cache hit reaches the model as
a chunked-prefill continuation (``num_computed_tokens`` = the hit), which the chunked
path already runs on every kernel library. So for DSV4 the user's setting is kept.
Measured by tests/model_overrides/patches/test_prefix_caching_cpu.py on native ``_C`` and
on our eager ops: a warm prompt gives the cold prompt's greedy text and log-probs, with and
without MTP, at prefixes that end inside and on 256-token blocks.
"""

from typing import Any

from model_overrides.patches import cpu_platform_config as cpc
from model_overrides.registry import REGISTRY


def _capture(vllm_config: Any) -> Any:
    cache = vllm_config.cache_config
    asked = cache.enable_prefix_caching

    def restore() -> None:
        if asked and not cache.enable_prefix_caching:
            cache.enable_prefix_caching = True

    return restore


REGISTRY.add(
    cpc.restoring_patch(
        "dsv4-cpu-prefix-caching",
        "_dsv4_prefix_caching",
        "enable_prefix_caching = False",
        "prefix caching",
        _capture,
    )
)
