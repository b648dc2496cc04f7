"""How the installed vLLM reads a DSV4 checkpoint's config: per-layer compress ratio, hash
layers, rope dimension and each layer's rotary tables (vLLM's own builder).

    python -m model_overrides.contracts.config_reading MODEL_DIR   # prints one JSON line

vLLM 0.32 reads its own ``DeepseekV4Config`` (``compress_ratios``, ``num_hash_layers``);
0.33 reads transformers' ``DeepseekV4Config``, which turns those into ``layer_types`` /
``compress_rates`` and ``mlp_layer_types``. The matrix test runs this in each version's
environment and compares the two readings of one golden checkpoint.
"""

import hashlib
import json
import sys
from typing import Any


def layer_ratio(config: Any, layer: int) -> int:
    """The attention's compress ratio, as each version's DeepseekV4Attention.__init__
    computes it (vllm/models/deepseek_v4/attention.py: 0.32 indexes ``compress_ratios``,
    0.33 maps ``layer_types`` through ``compress_rates``; the MTP layer is 1 in both)."""
    if layer >= config.num_hidden_layers:
        return 1
    if getattr(config, "compress_rates", None) is not None and hasattr(config, "layer_types"):
        return max(1, config.compress_rates.get(config.layer_types[layer], 0))
    return max(1, config.compress_ratios[layer])


def hash_layers(config: Any) -> int:
    """0.33: ``mlp_layer_types.count("hash_moe")`` (nvidia/model.py, cpu/model.py);
    0.32: ``num_hash_layers``."""
    kinds = getattr(config, "mlp_layer_types", None)
    return kinds.count("hash_moe") if kinds is not None else config.num_hash_layers


def listed_ratios(config: Any) -> list[int]:
    try:
        from vllm.transformers_utils.deepseek_v4_utils import get_compress_ratios
    except ImportError:  # 0.32: vLLM's own config carries the list
        return list(config.compress_ratios)
    return list(get_compress_ratios(config))


def _default_config(config_class: Any) -> Any:
    """vLLM's default config. vLLM 0.34's CPU platform refuses to build any config on
    x86 without triton-cpu, which the version matrix's environments lack (no kernel runs
    there); the rotary tables read only the defaults, so its check is passed over."""
    from vllm.platforms import current_platform

    try:
        return config_class()
    except RuntimeError as exc:
        if "triton" not in str(exc).lower():
            raise
    current_platform.check_and_update_config = lambda vllm_config: None
    try:
        return config_class()
    finally:
        del current_platform.check_and_update_config  # the class's own again


def reading(model_dir: str) -> dict[str, Any]:
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.models.deepseek_v4.common.rope import build_deepseek_v4_rope
    from vllm.transformers_utils.config import get_config

    config = get_config(model_dir, trust_remote_code=False)
    layers = range(config.num_hidden_layers + config.num_nextn_predict_layers)
    ratios = [layer_ratio(config, i) for i in layers]
    rope = []
    for ratio in ratios:
        with set_current_vllm_config(_default_config(VllmConfig)):  # a CustomOp reads it
            emb = build_deepseek_v4_rope(
                config,
                head_dim=config.head_dim,
                rope_head_dim=config.qk_rope_head_dim,
                max_position_embeddings=config.max_position_embeddings,
                compress_ratio=ratio,
            )
        table = emb.cos_sin_cache.to(torch.float32).contiguous()
        rope.append(hashlib.sha256(table.numpy().tobytes()).hexdigest()[:16])
    return {
        "config_class": f"{type(config).__module__}.{type(config).__name__}",
        "layer_ratios": ratios,
        "listed_ratios": listed_ratios(config),
        "hash_layers": hash_layers(config),
        "rope_head_dim": config.qk_rope_head_dim,
        "rope_tables": rope,
    }


if __name__ == "__main__":
    print("READING " + json.dumps(reading(sys.argv[1])))
