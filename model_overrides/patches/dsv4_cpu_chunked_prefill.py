"""deepseek_v4: keep chunked prefill for DSV4 on CPUs without AMX tiles.

vLLM's CPU platform turns chunked prefill off (and raises the step budget to
``max_model_len``) for MLA models unless the CPU has AMX tiles. DSV4's CPU kernels
run without AMX (this is how every golden-model test runs), and the metadata the
chunked path needs is built by the ``dsv4-cpu-*`` kernel patches. So for DSV4 the
scheduler settings the user asked for are restored; prefix caching stays as vLLM
leaves it.
"""

import functools
import inspect
from typing import Any

from model_overrides.patches.module_attr import import_optional, is_cpu_platform
from model_overrides.registry import REGISTRY, Need, Patch, Probe

_MARKERS = ("amx_mla_or_dsv4_enabled", "enable_chunked_prefill = False")


def _platform() -> Any:
    mod = import_optional("vllm.platforms.cpu")
    return getattr(mod, "CpuPlatform", None) if mod else None


def _amx_available() -> bool:
    import torch

    return bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())


def _is_dsv4(vllm_config: Any) -> bool:
    model_config = getattr(vllm_config, "model_config", None)
    hf = getattr(model_config, "hf_config", None)
    return getattr(hf, "model_type", None) == "deepseek_v4"


def _wrap(original: Any) -> Any:
    @functools.wraps(original)
    def check_and_update_config(cls: Any, vllm_config: Any) -> None:
        sched = vllm_config.scheduler_config
        asked = (sched.enable_chunked_prefill, sched.max_num_batched_tokens)
        original.__func__(cls, vllm_config)
        if _is_dsv4(vllm_config) and asked[0] and not sched.enable_chunked_prefill:
            sched.enable_chunked_prefill, sched.max_num_batched_tokens = asked

    check_and_update_config._dsv4_chunked_prefill = True  # type: ignore[attr-defined]
    return classmethod(check_and_update_config)


def _is_patched(platform: Any) -> bool:
    return getattr(platform.check_and_update_config, "_dsv4_chunked_prefill", False)


def probe() -> Probe:
    if not is_cpu_platform():
        return Probe(Need.NOT_APPLICABLE, "CPU only")
    platform = _platform()
    if platform is None:
        return Probe(Need.NOT_APPLICABLE, "vllm.platforms.cpu.CpuPlatform is not in this vLLM")
    if _is_patched(platform):
        return Probe(Need.ALREADY_APPLIED, "DSV4 keeps chunked prefill")
    source = inspect.getsource(platform.check_and_update_config)
    if not all(marker in source for marker in _MARKERS):
        return Probe(Need.UNRECOGNISED, "CpuPlatform.check_and_update_config has changed shape")
    if _amx_available():
        return Probe(Need.NOT_NEEDED, "this CPU has AMX tiles: vLLM keeps chunked prefill")
    return Probe(Need.NEEDED, "no AMX tiles: vLLM would turn DSV4 chunked prefill off")


def apply() -> None:
    platform = _platform()
    platform.check_and_update_config = _wrap(platform.check_and_update_config)


def verify() -> str | None:
    return None if _is_patched(_platform()) else "CpuPlatform.check_and_update_config unchanged"


REGISTRY.add(
    Patch(
        name="dsv4-cpu-chunked-prefill",
        override="deepseek_v4",
        summary="DSV4 keeps chunked prefill on CPUs without AMX",
        probe=probe,
        apply=apply,
        verify=verify,
        gpu_note="CPU platform only",
        upstream="ours, not reported upstream",
        remove_when="vLLM allows DSV4 chunked prefill on CPUs without AMX (probe: not needed)",
    )
)
