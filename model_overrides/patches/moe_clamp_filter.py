"""deepseek_v4: keep MoE backends that drop the SwiGLU clamp away from DSV4.

vLLM's ``FusedMoEConfig.swiglu_limit`` says backends that cannot clamp are filtered out by
``FusedMoEExperts.is_supported_config``; in vLLM 0.32 the base check has no such filter,
and the classes below take the limit nowhere on the way to their kernels (found by the
``moe-clamp`` contract rule, ``model_overrides/contracts/clamp_contract.py``, which a test keeps in
step with this list). For a config with a limit this makes their ``is_supported_config``
say no, so vLLM's oracle picks a backend that clamps, or refuses to load, instead of
serving an unclamped SwiGLU. Upstream: ours, not yet reported.
"""

import functools
import importlib
import inspect
from typing import Any

from model_overrides.registry import REGISTRY, Need, Patch, Probe

_EXPERTS = "vllm.model_executor.layers.fused_moe.experts"
# variant -> (module, class) of expert kernels that drop the limit (CPU bf16 experts are
# fixed by dsv4-cpu-moe-swiglu-clamp instead: they are the only CPU bf16 backend).
DROPPING: dict[str, tuple[tuple[str, str], ...]] = {
    "nvidia": (
        (f"{_EXPERTS}.trtllm_bf16_moe", "TrtLlmBf16ExpertsModular"),
        (f"{_EXPERTS}.batched_deep_gemm_moe", "BatchedDeepGemmExperts"),
    ),
    "cpu": (
        (f"{_EXPERTS}.cpu_moe", "CPUExpertsFp8"),
        (f"{_EXPERTS}.cpu_moe", "CPUExpertsFp8W8A8"),
    ),
}
REASON = "kernel does not apply the SwiGLU clamp (swiglu_limit); see dsv4-moe-clamp-filter"
_MARK = "_dsv4_clamp_filter"


def _classes() -> dict[str, Any]:
    """The listed classes this vLLM lets us import here (other platforms' may not)."""
    found = {}
    for entries in DROPPING.values():
        for module, name in entries:
            try:
                cls = getattr(importlib.import_module(module), name, None)
            except Exception:
                continue
            if cls is not None:
                found[name] = cls
    return found


def takes_no_limit(cls: Any) -> bool:
    """No limit anywhere in the class's own code (the rule reads deeper; this is the
    cheap runtime check that the class has not changed)."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return False
    return "swiglu_limit" not in source and "clamp_limit" not in source


def _filtered(original: Any) -> Any:
    @functools.wraps(original)
    def is_supported_config(cls: Any, moe_config: Any, *args: Any, **kwargs: Any):
        if getattr(moe_config, "swiglu_limit", None) is not None:
            return False, REASON
        return original(cls, moe_config, *args, **kwargs)

    setattr(is_supported_config, _MARK, True)
    return staticmethod(is_supported_config)


def _own_filter(cls: Any) -> bool:
    return getattr(cls.__dict__.get("is_supported_config"), _MARK, False) or getattr(
        getattr(cls.__dict__.get("is_supported_config"), "__func__", None), _MARK, False
    )


def probe() -> Probe:
    classes = _classes()
    if not classes:
        return Probe(Need.NOT_APPLICABLE, "none of the listed expert kernels imports here")
    if all(_own_filter(c) for c in classes.values()):
        return Probe(Need.ALREADY_APPLIED, "filters in place")
    dropping = [n for n, c in classes.items() if takes_no_limit(c)]
    if not dropping:
        return Probe(Need.NOT_NEEDED, f"{', '.join(classes)} take the limit now")
    return Probe(Need.NEEDED, f"{', '.join(dropping)} drop swiglu_limit")


def apply() -> None:
    for cls in _classes().values():
        if takes_no_limit(cls) and not _own_filter(cls):
            cls.is_supported_config = _filtered(cls.is_supported_config)


def verify() -> str | None:
    missing = [n for n, c in _classes().items() if takes_no_limit(c) and not _own_filter(c)]
    return f"not filtered: {missing}" if missing else None


REGISTRY.add(
    Patch(
        name="dsv4-moe-clamp-filter",
        override="deepseek_v4",
        summary="MoE backends that drop swiglu_limit are not selected for DSV4",
        probe=probe,
        apply=apply,
        verify=verify,
        gpu_note="CUDA: TRT-LLM bf16 and batched DeepGEMM experts; CPU: FP8 (AMX) experts",
        upstream="ours, not reported upstream",
        remove_when=(
            "these kernels take swiglu_limit, or "
            "FusedMoEExperts.is_supported_config filters on it (probe: not needed)"
        ),
    )
)
