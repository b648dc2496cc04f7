"""deepseek_v4: choose the CPU decoder layer's hyper-connection path (DSV4_HC_PATH).

The CPU ``DeepseekV4DecoderLayer`` has both shapes of the HC contract:
``deferred`` (fused post+pre op; returns ``(x, residual, post_mix, res_mix)`` and
leaves the last ``hc_post`` to its caller, as on CUDA) and ``inline`` (applies
``hc_post`` itself and returns ``(x, None, None, None)``, as on ROCm). vLLM picks
inline on the CPU. Setting ``DSV4_HC_PATH`` selects one, so the contract between
the layer and its callers (the model and the MTP draft) is exercised both ways.
"""

import functools
import os
from typing import Any

from model_overrides.patches.module_attr import import_optional, is_cpu_platform
from model_overrides.registry import REGISTRY, Need, Patch, Probe

HC_PATH_ENV = "DSV4_HC_PATH"
PATHS = {"deferred": True, "inline": False}  # -> use_fused_mhc


def _layer_class() -> Any:
    mod = import_optional("vllm.models.deepseek_v4.cpu.model")
    return getattr(mod, "DeepseekV4DecoderLayer", None) if mod else None


def _requested() -> str | None:
    value = os.environ.get(HC_PATH_ENV, "").strip().lower()
    return value or None


def _wrap(original_init: Any, use_fused: bool) -> Any:
    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self.use_fused_mhc = use_fused

    __init__._dsv4_hc_path = use_fused  # type: ignore[attr-defined]
    return __init__


def probe() -> Probe:
    requested = _requested()
    if requested is None:
        return Probe(Need.NOT_NEEDED, f"{HC_PATH_ENV} unset: vLLM's own choice (inline on CPU)")
    if requested not in PATHS:
        return Probe(Need.UNRECOGNISED, f"{HC_PATH_ENV}={requested!r}; use one of {sorted(PATHS)}")
    if not is_cpu_platform():
        return Probe(Need.NOT_APPLICABLE, "CPU only (CUDA has dsv4-cuda-hc-path)")
    cls = _layer_class()
    if cls is None:
        return Probe(Need.NOT_APPLICABLE, "no CPU DeepseekV4DecoderLayer in this vLLM")
    wanted = PATHS[requested]
    if getattr(cls.__init__, "_dsv4_hc_path", None) == wanted:
        return Probe(Need.ALREADY_APPLIED, f"{requested} HC path")
    needed = ("_forward_fused_post_pre", "_forward_unfused_post_pre")
    if not all(hasattr(cls, name) for name in needed):
        return Probe(Need.UNRECOGNISED, "the CPU decoder layer no longer has both HC paths")
    return Probe(Need.NEEDED, f"{requested} HC path requested")


def apply() -> None:
    cls = _layer_class()
    original = getattr(cls.__init__, "__wrapped__", cls.__init__)
    cls.__init__ = _wrap(original, PATHS[_requested()])


def verify() -> str | None:
    flag = getattr(_layer_class().__init__, "_dsv4_hc_path", None)
    return None if flag == PATHS[_requested()] else "the decoder layer's HC path is unchanged"


REGISTRY.add(
    Patch(
        name="dsv4-cpu-hc-path",
        override="deepseek_v4",
        summary=f"select the CPU HC path ({HC_PATH_ENV}=deferred|inline)",
        probe=probe,
        apply=apply,
        verify=verify,
        gpu_note="CPU only; on GPUs the platform fixes the path (CUDA deferred, ROCm inline)",
        upstream="ours: a switch for testing both HC-state contract paths",
        remove_when="never: a test switch, off unless DSV4_HC_PATH is set",
    )
)
