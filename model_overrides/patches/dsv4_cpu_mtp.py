"""deepseek_v4_mtp: register our CPU DSV4 MTP draft in place of upstream's CPU stub."""

import inspect

from model_overrides.patches.module_attr import import_optional, is_cpu_platform
from model_overrides.registry import REGISTRY, Need, Patch, Probe

ARCH = "DeepSeekV4MTPModel"
OURS = "model_overrides.models.dsv4_mtp_cpu:CpuDeepSeekV4MTP"


def _registered_class_name() -> str | None:
    models = import_optional("vllm.model_executor.models.registry")
    if models is None:
        return None
    entry = models.ModelRegistry.models.get(ARCH)
    if entry is None:
        return None
    return f"{entry.module_name}:{entry.class_name}"


def probe() -> Probe:
    if not is_cpu_platform():
        return Probe(Need.NOT_APPLICABLE, "not the CPU platform: vLLM's own MTP draft is used")
    stub = import_optional("vllm.models.deepseek_v4.cpu.mtp")
    registered = _registered_class_name()
    if registered is None:
        return Probe(Need.UNRECOGNISED, f"{ARCH} is not in vLLM's model registry")
    if registered == OURS:
        return Probe(Need.ALREADY_APPLIED, "CPU MTP draft registered")
    if stub is None or not hasattr(stub, "DeepSeekV4MTP"):
        return Probe(Need.UNRECOGNISED, "no vllm.models.deepseek_v4.cpu.mtp.DeepSeekV4MTP")
    if "NotImplementedError" not in inspect.getsource(stub.DeepSeekV4MTP.__init__):
        return Probe(Need.NOT_NEEDED, "vLLM's CPU DSV4 MTP is implemented")
    return Probe(Need.NEEDED, "upstream CPU DSV4 MTP is a NotImplementedError stub")


def apply() -> None:
    from vllm.model_executor.models.registry import ModelRegistry

    ModelRegistry.register_model(ARCH, OURS)


def verify() -> str | None:
    registered = _registered_class_name()
    return None if registered == OURS else f"{ARCH} resolves to {registered}"


REGISTRY.add(
    Patch(
        name="dsv4-cpu-mtp-draft",
        override="deepseek_v4_mtp",
        summary="CPU DSV4 MTP draft (HC-state contract of PR #42930)",
        probe=probe,
        apply=apply,
        verify=verify,
        gpu_note="nvidia/amd/xpu ship their own DeepSeekV4MTP; CPU only",
        upstream=(
            "ours, not reported upstream (upstream vllm/models/deepseek_v4/cpu/mtp.py is a stub)"
        ),
        remove_when="vLLM ships a CPU DeepSeekV4MTP (probe: not needed)",
    )
)
