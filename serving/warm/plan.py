"""What `dsv4-serve warm` starts for a preset: a warm model and the shapes its cache keys on.

Kernels are compiled per shape, never per layer: every decoder layer of one kind (hash- or
router-routed experts; compress ratio 0, 4 or 128) asks for the same kernels. So the warm
engine serves the preset's model cut to the first layers that hold every kind (5 for
V4-Flash and V4-Pro: three hash layers, then a layer of each ratio the rest of the model
uses), with vLLM's dummy loader (serving/bench_model) and the preset's own engine arguments,
speculation and parallelism: each rank compiles its own per-rank shapes, as it will serve.
"""

from __future__ import annotations

from typing import Any

from serving.bench_model.shapes import RELEASED, Shape, bench_config
from serving.config.preset import Preset

WARM_LAYERS = 5
# Engine arguments that decide which kernels are compiled (token and batch bounds pick
# the JIT keys and CUDA-graph sizes; the cache formats pick the attention kernels).
KERNEL_ARGS = (
    "max_num_batched_tokens",
    "max_num_seqs",
    "max_model_len",
    "kv_cache_dtype",
    "block_size",
    "dtype",
    "quantization",
    "enforce_eager",
    "compilation_config",
    "kernel_config",
    "enable_chunked_prefill",
    "enable_expert_parallel",
    "data_parallel_size",
)
# Per-layer fields of the model config that reach a kernel's shape.
SHAPE_FIELDS = (
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "qk_rope_head_dim",
    "q_lora_rank",
    "o_lora_rank",
    "o_groups",
    "index_n_heads",
    "index_head_dim",
    "index_topk",
    "moe_intermediate_size",
    "n_routed_experts",
    "n_shared_experts",
    "num_experts_per_tok",
    "hc_mult",
    "vocab_size",
    "expert_dtype",
    "sliding_window",
)


class WarmPlanError(ValueError):
    """A preset `warm` cannot build a warm model for; the message says why."""


def model_shape(preset: Preset) -> tuple[Shape, str]:
    """The released shape and expert format the preset serves."""
    if bench := preset.model.bench:
        return bench.shape, bench.experts
    if preset.model.golden or preset.accelerator.kind == "cpu":
        raise WarmPlanError(
            f"preset {preset.name!r} runs on the CPU (or the golden model): vLLM's CPU backend "
            "compiles no JIT kernels, so there is nothing to warm"
        )
    name = f"{preset.model.id} {preset.model.source}".lower()
    for shape in ("flash", "pro"):
        if f"v4-{shape}" in name:
            return shape, "fp4"  # the released Instruct checkpoints' experts
    raise WarmPlanError(
        f"preset {preset.name!r} serves {preset.model.id!r}: warm knows the DeepSeek-V4-Flash "
        "and -Pro shapes; give the preset a model.bench of the right shape"
    )


def warm_sets(preset: Preset, model_dir: str) -> list[str]:
    """`--set` assignments that turn the preset into its warm engine."""
    shape, experts = model_shape(preset)
    return [
        f"model.bench={{shape: {shape}, layers: {WARM_LAYERS}, experts: {experts}}}",
        f"model.source={model_dir}",
    ]


def cache_shapes(preset: Preset) -> dict[str, Any]:
    """The per-rank shapes a cache is keyed on (the manifest's ``shapes``)."""
    shape, experts = model_shape(preset)
    config = bench_config(shape, RELEASED[shape]["num_hidden_layers"], experts)
    engine = preset.engine_kwargs()
    spec = preset.speculation
    par = preset.parallelism
    return {
        "model": {"shape": shape, **{k: config.get(k) for k in SHAPE_FIELDS}},
        "compress_ratios": sorted(set(config["compress_ratios"])),
        "engine": {k: engine[k] for k in KERNEL_ARGS if k in engine},
        "speculation": {
            "method": spec.method,
            "k": spec.num_speculative_tokens,
            "draft_sample_method": spec.draft_sample_method,
            "guard": spec.guard.mode,
        },
        "parallel": {
            "tensor": par.tensor,
            "pipeline": par.pipeline,
            "data": par.data,
            "expert": par.expert,
        },
    }
