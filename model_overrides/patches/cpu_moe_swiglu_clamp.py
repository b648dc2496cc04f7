"""deepseek_v4: clamp the routed experts' SwiGLU on the CPU (``swiglu_limit``).

DSV4 clamps its SwiGLU (gate to at most ``swiglu_limit``, up to +-``swiglu_limit``) in
the routed experts as in the shared expert. vLLM 0.32's bf16 CPU experts
(``CPUUnquantizedExperts.apply``, vllm/model_executor/layers/fused_moe/experts/cpu_moe.py)
call ``cpu_fused_moe`` with an activation name and no limit, so routed experts run an
unclamped SwiGLU while the shared expert (``SiluAndMulWithClamp``) is clamped: text
looks right and is silently wrong wherever a routed pre-activation passes the limit.

Where a layer's MoE config carries a limit, this keeps that layer's expert weights
unpacked and computes its routed experts with the clamp in eager torch
(``kernels/clamped_experts.py``); layers without a limit keep the native kernel.
"Not needed" once ``apply`` passes a limit on. Upstream: ours, not yet reported.
"""

import functools
import inspect
from typing import Any

from model_overrides.kernels.clamped_experts import clamped_experts
from model_overrides.patches.module_attr import import_optional, is_cpu_platform
from model_overrides.registry import REGISTRY, Need, Patch, Probe

_MODULE = "vllm.model_executor.layers.fused_moe.experts.cpu_moe"
_CLASS = "CPUUnquantizedExperts"
_MARK = "_dsv4_swiglu_clamp"


def _experts_class() -> Any:
    module = import_optional(_MODULE)
    return getattr(module, _CLASS, None) if module else None


def _limit(experts: Any) -> float | None:
    return getattr(getattr(experts, "moe_config", None), "swiglu_limit", None)


def drops_limit(cls: Any) -> bool:
    """True while ``apply`` hands the kernel no clamp (no limit anywhere in its body)."""
    source = inspect.getsource(cls.apply)
    return "cpu_fused_moe(" in source and "limit" not in source


def probe() -> Probe:
    if not is_cpu_platform():
        return Probe(Need.NOT_APPLICABLE, "not the CPU platform")
    cls = _experts_class()
    if cls is None:
        return Probe(Need.NOT_APPLICABLE, f"no {_CLASS} in this vLLM")
    if getattr(cls.apply, _MARK, False):
        return Probe(Need.ALREADY_APPLIED, "clamped routed experts in place")
    needed = ("apply", "process_weights_after_loading", "_pad_moe_intermediate")
    if not all(hasattr(cls, n) for n in needed):
        return Probe(Need.UNRECOGNISED, f"{_CLASS} no longer has apply/process_weights")
    if not drops_limit(cls):
        return Probe(Need.NOT_NEEDED, f"{_CLASS}.apply passes a clamp limit")
    return Probe(Need.NEEDED, f"{_CLASS}.apply calls cpu_fused_moe without swiglu_limit")


def _wrap_weights(original: Any) -> Any:
    @functools.wraps(original)
    def process_weights_after_loading(self: Any, layer: Any) -> None:
        if _limit(self) is None:
            return original(self, layer)
        # Eager experts read the weights as loaded: no packing for the native kernel.
        self._use_zentorch = False
        self._pad_moe_intermediate(layer)
        return None

    return process_weights_after_loading


def _wrap_apply(original: Any) -> Any:
    @functools.wraps(original)
    def apply(self: Any, output: Any, hidden_states: Any, w1: Any, w2: Any, *args: Any, **kw: Any):
        limit = _limit(self)
        if limit is None:
            return original(self, output, hidden_states, w1, w2, *args, **kw)
        bound = inspect.signature(original).bind(self, output, hidden_states, w1, w2, *args, **kw)
        a = bound.arguments
        clamped_experts(
            output,
            hidden_states,
            w1,
            w2,
            a["topk_weights"],
            a["topk_ids"],
            limit,
            a.get("apply_router_weight_on_input", False),
        )
        return None

    setattr(apply, _MARK, True)
    return apply


def apply() -> None:
    cls = _experts_class()
    cls.process_weights_after_loading = _wrap_weights(cls.process_weights_after_loading)
    cls.apply = _wrap_apply(cls.apply)


def verify() -> str | None:
    cls = _experts_class()
    if not getattr(cls.apply, _MARK, False):
        return f"{_CLASS}.apply is unchanged"
    return None


REGISTRY.add(
    Patch(
        name="dsv4-cpu-moe-swiglu-clamp",
        override="deepseek_v4",
        summary="routed experts clamp their SwiGLU (swiglu_limit) on the CPU",
        probe=probe,
        apply=apply,
        verify=verify,
        gpu_note="CPU bf16 experts only; `check` reports every variant's expert paths",
        upstream="ours, not reported upstream",
        remove_when=(
            "CPUUnquantizedExperts.apply passes swiglu_limit to its kernel (probe: not needed)"
        ),
    )
)
