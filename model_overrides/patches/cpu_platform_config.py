"""What the DSV4 CPU-config patches share: vLLM's ``CpuPlatform.check_and_update_config``
turns chunked prefill and prefix caching off for MLA models unless the CPU has AMX
tiles (vllm/platforms/cpu.py, ``amx_mla_or_dsv4_enabled``). Each patch wraps that
classmethod, notes what the user asked before it runs and puts it back for DSV4 after.
Each wrapper carries its own flag attribute, so both patches can be stacked in either
order (``functools.wraps`` copies the inner wrapper's flags onto the outer one)."""

import functools
import inspect
from collections.abc import Callable
from typing import Any

from model_overrides.patches.module_attr import import_optional, is_cpu_platform
from model_overrides.registry import Need, Patch, Probe

AMX_MARKER = "amx_mla_or_dsv4_enabled"

# Called with the VllmConfig before vLLM's check runs; returns what puts the asked
# settings back after it.
Capture = Callable[[Any], Callable[[], None]]


def cpu_platform() -> Any:
    mod = import_optional("vllm.platforms.cpu")
    return getattr(mod, "CpuPlatform", None) if mod else None


def amx_available() -> bool:
    import torch

    return bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())


def is_dsv4(vllm_config: Any) -> bool:
    model_config = getattr(vllm_config, "model_config", None)
    hf = getattr(model_config, "hf_config", None)
    return getattr(hf, "model_type", None) == "deepseek_v4"


def is_patched(flag: str) -> bool:
    platform = cpu_platform()
    return bool(platform and getattr(platform.check_and_update_config, flag, False))


def wrap(flag: str, capture: Capture) -> None:
    """Wrap ``CpuPlatform.check_and_update_config``: for DSV4, ``capture`` before, restore after."""
    platform = cpu_platform()
    original = platform.check_and_update_config

    @functools.wraps(original)
    def check_and_update_config(cls: Any, vllm_config: Any) -> None:
        restore = capture(vllm_config) if is_dsv4(vllm_config) else None
        original.__func__(cls, vllm_config)
        if restore is not None:
            restore()

    setattr(check_and_update_config, flag, True)
    platform.check_and_update_config = classmethod(check_and_update_config)


def probe(flag: str, marker: str, what: str) -> Probe:
    """Needed on a CPU without AMX when vLLM's check still switches ``what`` off there."""
    if not is_cpu_platform():
        return Probe(Need.NOT_APPLICABLE, "CPU only")
    platform = cpu_platform()
    if platform is None:
        return Probe(Need.NOT_APPLICABLE, "vllm.platforms.cpu.CpuPlatform is not in this vLLM")
    if is_patched(flag):
        return Probe(Need.ALREADY_APPLIED, f"DSV4 keeps {what}")
    source = inspect.getsource(platform.check_and_update_config)
    if not (AMX_MARKER in source and marker in source):
        return Probe(Need.UNRECOGNISED, "CpuPlatform.check_and_update_config has changed shape")
    if amx_available():
        return Probe(Need.NOT_NEEDED, f"this CPU has AMX tiles: vLLM keeps {what}")
    return Probe(Need.NEEDED, f"no AMX tiles: vLLM would turn DSV4 {what} off")


def restoring_patch(name: str, flag: str, marker: str, what: str, capture: Capture) -> Patch:
    """The patch that keeps ``what`` (the setting ``marker`` switches off) for DSV4."""
    return Patch(
        name=name,
        override="deepseek_v4",
        summary=f"DSV4 keeps {what} on CPUs without AMX",
        probe=lambda: probe(flag, marker, what),
        apply=lambda: wrap(flag, capture),
        verify=lambda: (
            None if is_patched(flag) else "CpuPlatform.check_and_update_config unchanged"
        ),
        gpu_note="CPU platform only",
        upstream="ours, not reported upstream",
        remove_when=f"vLLM allows DSV4 {what} on CPUs without AMX (probe: not needed)",
    )
