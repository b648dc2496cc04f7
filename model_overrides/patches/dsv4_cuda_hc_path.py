"""deepseek_v4: the inline HC contract on CUDA (``DSV4_HC_PATH=inline``), a test switch.

vLLM's CUDA ``DeepseekV4DecoderLayer`` always defers ``hc_post``: it returns
``(x, residual, post_mix, res_mix)``, the next layer fuses that post into its own pre
(``mhc_fused_post_pre_tilelang``), and the model and the MTP layer apply the last one
(``mhc_post_tilelang`` in ``nvidia/model.py`` and ``nvidia/mtp.py``). ROCm applies
``hc_post`` inside the layer and returns ``(x, None, None, None)``. With the switch on, the
CUDA layer applies ``mhc_post_tilelang`` itself and hands on the reconstructed streams with
no state: the next layer then runs its standalone pre on them (its ``residual is None``
branch for 3-D input), and the callers' final post becomes a no-op through the same
gate PR #42930 put on the MTP layer. So the seed's invariant (both shapes of the contract
give the same tokens and acceptance) can be tested on the path users run.

Hook points, checked by the probe: the layer's ``forward(x, positions, input_ids, post_mix,
res_mix, residual, ...)`` and a module-level ``mhc_post_tilelang`` in both modules; a vLLM that
moved either reads "unrecognised", never a silent no-op.
"""

import functools
import inspect
import os
from types import ModuleType
from typing import Any

from model_overrides.compat.breakable_graphs import prepare_dsv4_import
from model_overrides.patches.dsv4_cpu_hc_path import HC_PATH_ENV
from model_overrides.patches.module_attr import import_optional
from model_overrides.registry import REGISTRY, Need, Patch, Probe

MODEL = "vllm.models.deepseek_v4.nvidia.model"
MTP = "vllm.models.deepseek_v4.nvidia.mtp"
POST = "mhc_post_tilelang"
POST_ARGS = ["x", "residual", "post_layer_mix", "comb_res_mix"]
STATE_ARGS = ("post_mix", "res_mix", "residual")


def _requested() -> str | None:
    return os.environ.get(HC_PATH_ENV, "").strip().lower() or None


def _on_cuda() -> bool:
    platforms = import_optional("vllm.platforms")
    return bool(platforms and platforms.current_platform.is_cuda())


def _modules() -> tuple[ModuleType | None, ModuleType | None]:
    return import_optional(MODEL), import_optional(MTP)


def _inline_forward(original: Any, post: Any) -> Any:
    @functools.wraps(original)
    def forward(self: Any, *args: Any, **kwargs: Any) -> tuple[Any, None, None, None]:
        x, residual, post_mix, res_mix = original(self, *args, **kwargs)
        return post(x, residual, post_mix, res_mix), None, None, None

    forward._dsv4_inline_hc = True  # type: ignore[attr-defined]
    return forward


def _gate(post: Any) -> Any:
    """``post`` as a no-op without deferred state. Plain arguments and an ``is None`` test,
    so torch.compile (fullgraph) traces it: no signature binding inside the graph."""

    @functools.wraps(post)
    def gated(x: Any, residual: Any, post_layer_mix: Any, comb_res_mix: Any) -> Any:
        if residual is None:
            return x  # the layer applied hc_post inline already
        return post(x, residual, post_layer_mix, comb_res_mix)

    gated._dsv4_gated = True  # type: ignore[attr-defined]
    return gated


def probe() -> Probe:
    requested = _requested()
    if requested is None:
        return Probe(Need.NOT_NEEDED, f"{HC_PATH_ENV} unset: vLLM's own choice (deferred on CUDA)")
    if not _on_cuda():
        return Probe(Need.NOT_APPLICABLE, "CUDA only (the CPU has dsv4-cpu-hc-path)")
    if requested == "deferred":
        return Probe(Need.NOT_NEEDED, "deferred is what vLLM's CUDA decoder does")
    if requested != "inline":
        return Probe(Need.UNRECOGNISED, f"{HC_PATH_ENV}={requested!r}; use deferred or inline")
    prepare_dsv4_import()  # the switch serves DSV4: import its modules as vLLM would
    model, mtp = _modules()
    layer = getattr(model, "DeepseekV4DecoderLayer", None)
    if layer is None or mtp is None:
        return Probe(Need.NOT_APPLICABLE, "no CUDA DSV4 decoder layer in this vLLM")
    if getattr(layer.forward, "_dsv4_inline_hc", False):
        return Probe(Need.ALREADY_APPLIED, "inline HC path")
    params = inspect.signature(layer.forward).parameters
    missing = [a for a in STATE_ARGS if a not in params]
    for module in (model, mtp):
        post = getattr(module, POST, None)
        if not callable(post) or list(inspect.signature(post).parameters) != POST_ARGS:
            missing.append(f"{module.__name__}.{POST}({', '.join(POST_ARGS)})")
    if missing:
        return Probe(Need.UNRECOGNISED, f"the CUDA HC hook moved: no {', '.join(missing)}")
    return Probe(Need.NEEDED, "inline HC path requested")


def apply() -> None:
    model, mtp = _modules()
    post = getattr(model, POST)
    post = getattr(post, "__wrapped__", post)  # the kernel itself, not a gate
    layer = model.DeepseekV4DecoderLayer
    layer.forward = _inline_forward(layer.forward, post)
    for module in (model, mtp):
        current = getattr(module, POST)
        if not getattr(current, "_dsv4_gated", False):
            setattr(module, POST, _gate(current))


def verify() -> str | None:
    model, mtp = _modules()
    if not getattr(model.DeepseekV4DecoderLayer.forward, "_dsv4_inline_hc", False):
        return "the CUDA decoder layer still defers hc_post"
    ungated = [m.__name__ for m in (model, mtp) if not getattr(getattr(m, POST), "_dsv4_gated", 0)]
    return f"{POST} is not gated in {', '.join(ungated)}" if ungated else None


REGISTRY.add(
    Patch(
        name="dsv4-cuda-hc-path",
        override="deepseek_v4",
        summary=f"inline HC contract on CUDA ({HC_PATH_ENV}=inline; tests only)",
        probe=probe,
        apply=apply,
        verify=verify,
        gpu_note="CUDA only; ROCm is inline already",
        upstream="ours: a switch for testing both HC-state contract paths on CUDA",
        remove_when="never: a test switch, off unless DSV4_HC_PATH is set",
    )
)
