"""What one decode step of a DeepSeek-V4 config must read from HBM: the physical floor.

A decode step at batch B with k drafts verifies T = B (k + 1) tokens: it reads every
dense weight once (attention's FP8 linears, the shared expert, the router, the bf16 head),
the routed experts its tokens chose (with balanced routing, E (1 - (1 - a/E)^T) distinct
experts of E per layer, a chosen per token), the KV each request attends to, and then
runs the MTP layer k times (its weights and the head again each pass; the first pass over
every verified token). Divided by HBM
bandwidth, that is the least time the step can take; activations and launch gaps are
what a measured step adds on top.

Parameter counts follow DeepSeek-V4's layer shapes as vLLM builds them
(vllm/models/deepseek_v4: fused wq_a+wkv, grouped output projection wo_a/wo_b,
compressor and indexer on compressed layers, the mHC mixing); norms and biases are left
out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Bytes per parameter: FP8 block-scaled (1 + one fp32 or e8m0 scale per 128x128 block),
# FP4 (two per byte + one e8m0 scale per 32), bf16.
FP8 = 1.0 + 4.0 / (128 * 128)
FP4 = 0.5 + 1.0 / 32
BF16 = 2.0
# H200's HBM3e per NVIDIA's datasheet: a ceiling, which a device-to-device copy does not
# reach.
H200_HBM_BYTES_PER_S = 4.8e12
# Datasheet HBM bandwidth by the name torch reports for the card (a substring of it).
HBM_BYTES_PER_S_BY_GPU: dict[str, float] = {
    "H100 80GB HBM3": 3.35e12,  # H100 SXM
    "H100 NVL": 3.9e12,
    "H100 PCIe": 2.0e12,
    "H200": H200_HBM_BYTES_PER_S,
    "B200": 8.0e12,
}


def hbm_bytes_per_s(gpu_name: str | None) -> tuple[float, str]:
    """The card's HBM bandwidth and what it was taken for; H200's when the name is unknown."""
    for key, bandwidth in HBM_BYTES_PER_S_BY_GPU.items():
        if gpu_name and key in gpu_name:
            return bandwidth, key
    return H200_HBM_BYTES_PER_S, "H200 (card unknown)"


@dataclass(frozen=True)
class StepBytes:
    dense: float  # attention, shared expert, router: per decoder layer, every step
    experts: float  # routed experts read, all decoder layers
    head: float  # the bf16 output head, once per forward
    kv: float  # KV and compressed caches attended to, all layers
    mtp: float  # k passes of the MTP layer (its dense and experts) and the head each

    @property
    def total(self) -> float:
        return self.dense + self.experts + self.head + self.kv + self.mtp

    def as_dict(self) -> dict[str, float]:
        return {**self.__dict__, "total": self.total}


def attention_bytes(cfg: dict[str, Any], ratio: int) -> float:
    """FP8 linears (vllm/models/deepseek_v4/attention.py), and the compressors' and the
    indexer's weight projection in bf16 (built without a quant config: compressor.py)."""
    h, heads, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["head_dim"]
    q_lora, o_groups, o_lora = cfg["q_lora_rank"], cfg["o_groups"], cfg["o_lora_rank"]
    fp8 = h * (q_lora + d)  # wq_a + wkv
    fp8 += q_lora * heads * d  # wq_b
    fp8 += heads * d * o_lora  # wo_a: each of o_groups groups maps heads*d/o_groups
    fp8 += o_groups * o_lora * h  # wo_b
    bf16 = 0
    if ratio > 1:  # compressor: kv and gate, overlapping windows on ratio 4
        bf16 += 2 * h * d * (2 if ratio == 4 else 1)
    if ratio == 4:  # indexer: its query projection (fp8), head weights and compressor
        fp8 += q_lora * cfg["index_n_heads"] * cfg["index_head_dim"]
        bf16 += h * cfg["index_n_heads"] + 2 * h * 2 * cfg["index_head_dim"]
    # The mHC mixing of attention and FFN: fp32 [(2 + hc) hc, hc h] each.
    hc = cfg["hc_mult"]
    mixing = 2 * (2 + hc) * hc * hc * h * 4
    return fp8 * FP8 + bf16 * BF16 + mixing


def expert_params(cfg: dict[str, Any]) -> float:
    return 3.0 * cfg["hidden_size"] * cfg["moe_intermediate_size"]


def expert_bytes(cfg: dict[str, Any]) -> float:
    return expert_params(cfg) * (FP4 if cfg.get("expert_dtype", "fp4") == "fp4" else FP8)


def distinct_experts(cfg: dict[str, Any], tokens: int) -> float:
    """Expected distinct routed experts per layer when ``tokens`` route uniformly."""
    experts, per_token = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    return experts * (1 - (1 - per_token / experts) ** tokens)


def layer_dense_bytes(cfg: dict[str, Any], ratio: int) -> float:
    shared = expert_params(cfg) * cfg.get("n_shared_experts", 1) * FP8
    router = cfg["hidden_size"] * cfg["n_routed_experts"] * BF16
    return attention_bytes(cfg, ratio) + shared + router


def kv_bytes_per_request(cfg: dict[str, Any], ratio: int, context: int) -> float:
    """One request's attended cache in one layer: the sliding window (fp8 latent of
    head_dim plus the rope part in bf16), the compressed entries (all of them on ratio
    128, the indexer's top-k on ratio 4) and, on ratio 4, the indexer's keys it scores."""
    d, rope = cfg["head_dim"], cfg["qk_rope_head_dim"]
    entry = (d - rope) + rope * BF16
    window = min(context, cfg["sliding_window"]) * entry
    if ratio == 128:
        return window + context / 128 * entry
    if ratio == 4:
        compressed = min(context / 4, cfg["index_topk"]) * entry
        # The indexer scores every compressed key: fp8 of index_head_dim and an fp32 scale.
        return window + compressed + context / 4 * (cfg["index_head_dim"] + 4)
    return window


def step_bytes(cfg: dict[str, Any], batch: int, k: int, context: int) -> StepBytes:
    """Bytes one decode step reads at ``batch`` requests of ``context`` tokens, k drafts."""
    layers = cfg["num_hidden_layers"]
    ratios = cfg["compress_ratios"]
    tokens = batch * (k + 1)
    dense = sum(layer_dense_bytes(cfg, ratios[i]) for i in range(layers))
    experts = layers * distinct_experts(cfg, tokens) * expert_bytes(cfg)
    head = cfg["vocab_size"] * cfg["hidden_size"] * BF16
    kv = batch * sum(kv_bytes_per_request(cfg, ratios[i], context) for i in range(layers))
    mtp = 0.0
    for step in range(k):
        # vLLM runs the MTP layer window-only (compress ratio 1, deepseek_v4/attention.py)
        # with its own e_proj/h_proj; the first pass takes every verified token
        # (llm_base_proposer.py set_inputs_first_pass), later ones one per request.
        passed = tokens if step == 0 else batch
        mtp += (
            layer_dense_bytes(cfg, 1)
            + 2 * cfg["hidden_size"] ** 2 * FP8
            + distinct_experts(cfg, passed) * expert_bytes(cfg)
            + batch * kv_bytes_per_request(cfg, 1, context)
            + head
        )
    return StepBytes(dense, experts, head, kv, mtp)


def floor_seconds(
    cfg: dict[str, Any], batch: int, k: int, context: int, bandwidth: float = H200_HBM_BYTES_PER_S
) -> float:
    return step_bytes(cfg, batch, k, context).total / bandwidth
