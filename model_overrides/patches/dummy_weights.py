"""deepseek_v4: usable dummy weights and balanced MoE routing under ``load_format=dummy``.

vLLM 0.32's dummy loader (``model_loader/dummy_loader.py`` through
``weight_utils.initialize_single_dummy_weight``) fills floating tensors uniformly in
[-1e-3, 1e-3] and leaves every other tensor as allocated (0.33 and later fill FP4 bytes,
e8m0 scales and 8-bit floats themselves, but still leave the routing bias below and the
hash layers' expert tables to us).
For DeepSeek-V4 in its release format that gives a model that measures the wrong thing:
- FP4 expert bytes and their e8m0 scales are ``uint8``: left as allocated (garbage,
  e8m0 255 is NaN);
- FP8 weights drawn in [-1e-3, 1e-3] fall under e4m3's smallest step and round to zero,
  and e8m0 linear scales cannot hold that range's negative half;
- the routing bias (``e_score_correction_bias``) is drawn in the same range as the router's
  own scores, which the tiny weights make smaller still, so the bias picks the experts and
  every token goes to the same few: MoE cost far below a real checkpoint's.

After vLLM's fill, for DeepSeek-V4 models only: FP4 bytes random, e8m0 scales 2^-7 (what
DeepSeek-V4's checkpoints carry), FP8 weights uniform in [-1, 1], the routing bias zero
(the router's own scores then vary with each token's hidden state, so tokens spread over
the experts), and the hash layers' token -> expert tables balanced: each token's experts
distinct, each expert equally often across the vocabulary. Zipf-skewed routing is not
offered: with the router's scale unknown no bias gives a known skew.
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any

from model_overrides.patches.module_attr import import_optional
from model_overrides.registry import DUMMY_WEIGHTS_PATCH, REGISTRY, Need, Patch, Probe

logger = logging.getLogger("vllm.dsv4_overrides")

_LOADER = "vllm.model_executor.model_loader.dummy_loader"
_WEIGHT_UTILS = "vllm.model_executor.model_loader.weight_utils"
# DeepSeek-V4's checkpoints carry e8m0 scales around 2^-7 (exponent byte 120).
E8M0_SCALE = 2.0**-7
E8M0_BYTE = 120
SEED = 1234
FP8_ROWS_PER_DRAW = 1 << 16  # bounds the half-precision scratch (an expert stack is GBs)


def _loader_class() -> Any:
    mod = import_optional(_LOADER)
    return getattr(mod, "DummyModelLoader", None) if mod else None


def balanced_hash_table(vocab: int, experts: int, per_token: int) -> Any:
    """[vocab, per_token] expert ids: row v holds v, v + s, v + 2s, ... (mod ``experts``)
    with stride s = experts // per_token, so a row's ids are distinct and each expert
    appears vocab * per_token / experts times (exactly, when experts divides vocab)."""
    import torch

    if per_token > experts:
        raise ValueError(f"{per_token} experts per token of {experts}")
    stride = experts // per_token
    rows = torch.arange(vocab).unsqueeze(1)
    cols = torch.arange(per_token).unsqueeze(0) * stride
    return (rows + cols) % experts


def _is_scale(name: str) -> bool:
    return name.endswith(("weight_scale", "weight_scale_inv", "weight_scale_2", "input_scale"))


def _persistent_tensors(model: Any) -> list[tuple[str, Any]]:
    """(name, tensor) of every parameter and persistent buffer, as vLLM's fill visits them."""
    out = []
    for prefix, module in model.named_modules():
        skip = getattr(module, "_non_persistent_buffers_set", set())
        local = [*module._parameters.items(), *module._buffers.items()]
        for name, tensor in local:
            if tensor is not None and name not in skip:
                out.append((f"{prefix}.{name}" if prefix else name, tensor))
    return out


def fill_dummy_tensors(model: Any, seed: int = SEED) -> dict[str, int]:
    """Give a dummy-loaded DeepSeek-V4 module usable values in place (see the module's
    docstring); the count of tensors of each kind it changed."""
    import torch

    generators: dict[Any, Any] = {}

    def generator(device: Any) -> Any:  # drawn where the tensor lives: experts are GBs
        if device not in generators:
            generators[device] = torch.Generator(device=device).manual_seed(seed)
        return generators[device]

    counts = {"fp4": 0, "e8m0": 0, "fp8": 0, "scale": 0, "routing_bias": 0, "hash_table": 0}
    fp8_types = {torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2}
    e8m0 = getattr(torch, "float8_e8m0fnu", None)
    with torch.no_grad():
        for name, tensor in _persistent_tensors(model):
            if tensor.device.type == "meta" or tensor.numel() == 0:
                continue
            if getattr(tensor, "dummy_weight_value", None) is not None:
                continue  # the model's own dummy value (vLLM fills it)
            data = tensor.data
            if name.endswith("tid2eid"):
                vocab, per_token = data.shape
                experts = _experts_of(model, name)
                table = balanced_hash_table(vocab, experts, per_token)
                data.copy_(table.to(data.dtype))
                counts["hash_table"] += 1
            elif name.endswith("e_score_correction_bias"):
                data.zero_()
                counts["routing_bias"] += 1
            elif _is_scale(name) and data.is_floating_point() and data.dtype is not e8m0:
                # fp32 block scales, NVFP4's e4m3 block scales: positive, as released
                data.fill_(1.0 if name.endswith("input_scale") else E8M0_SCALE)
                counts["scale"] += 1
            elif data.dtype is e8m0:
                data.fill_(E8M0_SCALE)
                counts["e8m0"] += 1
            elif data.dtype == torch.uint8 and "scale" in name.rsplit(".", 1)[-1]:
                data.fill_(E8M0_BYTE)
                counts["e8m0"] += 1
            elif data.dtype in (torch.uint8, torch.int8):  # packed FP4 pairs
                low = 0 if data.dtype == torch.uint8 else -128
                data.random_(low, low + 256, generator=generator(data.device))
                counts["fp4"] += 1
            elif data.dtype in fp8_types:
                # e4m3 has no uniform_: draw in half precision, a slice at a time.
                for part in data.view(-1, data.shape[-1]).split(FP8_ROWS_PER_DRAW):
                    draw = torch.empty(part.shape, dtype=torch.float16, device=part.device)
                    part.copy_(draw.uniform_(-1.0, 1.0, generator=generator(part.device)))
                counts["fp8"] += 1
    return counts


def _experts_of(model: Any, table_name: str) -> int:
    """The routed experts of the MoE that owns ``table_name`` (``...ffn.gate.tid2eid``)."""
    owner = model.get_submodule(table_name.rsplit(".", 2)[0])
    experts = getattr(owner, "n_routed_experts", None)
    if experts is None:  # the gate's own output size
        experts = model.get_submodule(table_name.rsplit(".", 1)[0]).output_size
    return int(experts)


_ARCHITECTURES = {"DeepseekV4ForCausalLM", "DeepSeekV4MTPModel"}


def is_deepseek_v4(model_config: Any) -> bool:
    """The target or its MTP draft (whose model_type vLLM renames to deepseek_mtp,
    vllm/config/speculative.py, keeping its DeepSeekV4 architecture); not V4.1, whose
    engram tables carry dummy values of their own."""
    hf = getattr(model_config, "hf_config", None)
    archs = set(getattr(hf, "architectures", None) or [])
    return getattr(hf, "model_type", "") == "deepseek_v4" or bool(archs & _ARCHITECTURES)


def _wrap(original: Any) -> Any:
    @functools.wraps(original)
    def load_weights(self: Any, model: Any, model_config: Any) -> None:
        original(self, model, model_config)
        if is_deepseek_v4(model_config):
            counts = fill_dummy_tensors(model)
            logger.info("[dsv4-overrides] dummy weights for DeepSeek-V4: %s", counts)

    load_weights._dsv4_dummy_fill = True  # type: ignore[attr-defined]
    return load_weights


def _is_patched(cls: Any) -> bool:
    return getattr(cls.load_weights, "_dsv4_dummy_fill", False)


def probe() -> Probe:
    cls = _loader_class()
    if cls is None or not hasattr(cls, "load_weights"):
        return Probe(Need.NOT_APPLICABLE, f"no DummyModelLoader.load_weights in {_LOADER}")
    if _is_patched(cls):
        return Probe(Need.ALREADY_APPLIED, "DeepSeek-V4 dummy tensors filled after vLLM's")
    utils = import_optional(_WEIGHT_UTILS)
    fill = getattr(utils, "initialize_single_dummy_weight", None) if utils else None
    if fill is None:
        return Probe(Need.UNRECOGNISED, "initialize_single_dummy_weight is not in this vLLM")
    src = inspect.getsource(fill)
    if "_DUMMY_E8M0_SCALE_BYTE" in src:  # vLLM 0.33+
        why = "vLLM fills FP4 bytes and e8m0 scales; the routing bias and hash tables are ours"
    elif "is_floating_point" in src:
        why = "integer tensors (FP4 bytes, e8m0 scales) left as allocated"
    else:
        why = "vLLM fills integer tensors; the routing bias still picks the experts"
    return Probe(Need.NEEDED, why)


def apply() -> None:
    cls = _loader_class()
    cls.load_weights = _wrap(cls.load_weights)


def verify() -> str | None:
    return None if _is_patched(_loader_class()) else "DummyModelLoader.load_weights unchanged"


REGISTRY.add(
    Patch(
        name=DUMMY_WEIGHTS_PATCH,
        override="deepseek_v4",
        summary="load_format=dummy: FP4/e8m0/FP8 values as released, balanced MoE routing",
        probe=probe,
        apply=apply,
        verify=verify,
        gpu_note="the loader is shared: CUDA and ROCm take the same path (and need it: "
        "the FP4/FP8 formats are theirs)",
        upstream="vLLM 0.33 gives FP4 bytes, e8m0 scales and FP8 weights values in "
        "model_loader/weight_utils.py; the routing bias is ours, not reported",
        remove_when=(
            "vLLM's dummy loader fills FP4, e8m0 and FP8 tensors with usable values and "
            "offers balanced MoE routing for a served engine"
        ),
    )
)
