"""deepseek_v4: keep chunked prefill for DSV4 on CPUs without AMX tiles.

vLLM's CPU platform turns chunked prefill off (and raises the step budget to
``max_model_len``) for MLA models unless the CPU has AMX tiles. DSV4's CPU kernels
run without AMX (this is how every golden-model test runs), and the metadata the
chunked path needs is built by the ``dsv4-cpu-*`` kernel patches. So for DSV4 the
scheduler settings the user asked for are restored; prefix caching has its own patch
(dsv4_cpu_prefix_caching.py).
"""

from typing import Any

from model_overrides.patches import cpu_platform_config as cpc
from model_overrides.registry import REGISTRY


def _capture(vllm_config: Any) -> Any:
    sched = vllm_config.scheduler_config
    asked = (sched.enable_chunked_prefill, sched.max_num_batched_tokens)

    def restore() -> None:
        if asked[0] and not sched.enable_chunked_prefill:
            sched.enable_chunked_prefill, sched.max_num_batched_tokens = asked

    return restore


REGISTRY.add(
    cpc.restoring_patch(
        "dsv4-cpu-chunked-prefill",
        "_dsv4_chunked_prefill",
        "enable_chunked_prefill = False",
        "chunked prefill",
        _capture,
    )
)
