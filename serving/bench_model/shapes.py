"""DeepSeek-V4's own configurations, as DeepSeek ships them, cut to fewer layers.

A bench model is one of these configs with ``num_hidden_layers`` lowered: every layer has
the released width (hidden size, heads, LoRA ranks, 256 or 384 experts of their width,
FP4 or FP8 experts, FP8 block-scaled linears), so a decode step costs per layer what the
released model's does. There are no weights: vLLM's dummy loader fills them
(``model_overrides/patches/dummy_weights.py`` gives them usable values and balanced MoE
routing).

Where the values come from (read 2026-12-05):
- V4-Flash: ``deepseek-ai/DeepSeek-V4-Flash`` config.json at Hugging Face commit
  60d8d70770c6776ff598c94bb586a859a38244f1 (the base release, without the later DSpark
  keys); the same values are in SGLang's ``jit_kernel/benchmark/bench_deepseek_v4.py``.
- V4-Pro: ``deepseek-ai/DeepSeek-V4-Pro`` config.json (61 layers, hidden 7168, 384
  experts of width 3072); ``expert_dtype`` "fp4" as in the released Instruct checkpoint
  (SGLang's DeepSeek-V4 cookbook serves it with FP4 experts).
"""

from __future__ import annotations

import copy
from typing import Any, Literal

Shape = Literal["flash", "pro"]
ExpertFormat = Literal["fp4", "fp8"]

# DeepSeek-V4's FP8 release format for the dense linears (both models ship it).
RELEASE_QUANTIZATION: dict[str, Any] = {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "scale_fmt": "ue8m0",
    "weight_block_size": [128, 128],
}

# What V4-Flash and V4-Pro share.
_COMMON: dict[str, Any] = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "torch_dtype": "bfloat16",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "vocab_size": 129280,
    "num_key_value_heads": 1,
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "o_lora_rank": 1024,
    "index_n_heads": 64,
    "index_head_dim": 128,
    "sliding_window": 128,
    "max_position_embeddings": 1048576,
    "rope_theta": 10000,
    "compress_rope_theta": 160000,
    "rope_scaling": {
        "type": "yarn",
        "factor": 16,
        "original_max_position_embeddings": 65536,
        "beta_fast": 32,
        "beta_slow": 1,
    },
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-06,
    "n_shared_experts": 1,
    "num_experts_per_tok": 6,
    "num_hash_layers": 3,
    "num_nextn_predict_layers": 1,
    "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "swiglu_limit": 10.0,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-06,
    "initializer_range": 0.02,
    "tie_word_embeddings": False,
    "use_cache": True,
    "expert_dtype": "fp4",
    "quantization_config": RELEASE_QUANTIZATION,
}

RELEASED: dict[Shape, dict[str, Any]] = {
    "flash": _COMMON
    | {
        "hidden_size": 4096,
        "num_hidden_layers": 43,
        "num_attention_heads": 64,
        "q_lora_rank": 1024,
        "o_groups": 8,
        "index_topk": 512,
        "moe_intermediate_size": 2048,
        "n_routed_experts": 256,
        "routed_scaling_factor": 1.5,
        # One per layer and one for the MTP layer: two window-only layers, then
        # compressed-sparse (4) and heavily compressed (128) attention in turn.
        "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0],
    },
    "pro": _COMMON
    | {
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "q_lora_rank": 1536,
        "o_groups": 16,
        "index_topk": 1024,
        "moe_intermediate_size": 3072,
        "n_routed_experts": 384,
        "routed_scaling_factor": 2.5,
        "compress_ratios": [128, 128] + [4, 128] * 29 + [4, 0],
    },
}

# The key a bench checkpoint's config.json carries: what it is, so a checkpoint already on
# disk can be checked against the preset and a report can name the shape.
MARKER = "dsv4_bench_model"


def released_layers(shape: Shape) -> int:
    return RELEASED[shape]["num_hidden_layers"]


def bench_config(shape: Shape, layers: int, experts: ExpertFormat = "fp4") -> dict[str, Any]:
    """The released config of ``shape`` with its first ``layers`` decoder layers (their
    compress ratios and hash layers as released) and the MTP layer."""
    released = RELEASED[shape]
    total = released["num_hidden_layers"]
    # The MTP layer's index is the layer count: below num_hash_layers it would be routed by
    # token hash, which the released MTP layer is not (vllm/models/deepseek_v4/nvidia).
    least = released["num_hash_layers"]
    if not least <= layers <= total:
        raise ValueError(f"layers must be {least}..{total} for the {shape} shape, got {layers}")
    if experts not in ("fp4", "fp8"):
        raise ValueError(f"experts must be fp4 or fp8, got {experts!r}")
    ratios = released["compress_ratios"]
    cfg = copy.deepcopy(released)
    cfg |= {
        "num_hidden_layers": layers,
        "compress_ratios": ratios[:layers] + ratios[total:],
        "expert_dtype": experts,
        MARKER: {"shape": shape, "layers": layers, "released_layers": total, "experts": experts},
    }
    return cfg
