"""The golden checkpoint in DeepSeek-V4's FP8 release format (DeepSeek-V4-Flash-Base's layout).

What a real FP8-expert V4 checkpoint carries, and vLLM 0.32 reads through
``DeepseekV4FP8Config`` (vllm/models/deepseek_v4/quant_config.py):

- config.json: ``quantization_config`` (quant_method fp8, fmt e4m3, scale_fmt ue8m0,
  128x128 blocks, dynamic activations) and ``expert_dtype: "fp8"``;
- every linear layer vLLM builds with the quant config (attention wq_a/wkv/wq_b/wo_a/wo_b,
  indexer wq_b, shared and routed experts, MTP e_proj/h_proj): ``<name>.weight`` in
  float8_e4m3fn and ``<name>.scale`` in float32, one per 128x128 block (ceil-divided),
  each a power of two (a ue8m0 value). vLLM maps ``.scale`` to ``weight_scale_inv``
  (``_make_deepseek_v4_weights_mapper``). Float32, not float8_e8m0fnu: for fp8 experts vLLM
  registers float32 scale parameters, and its DSV4 loader reinterprets e8m0 expert scales
  as raw exponent bytes (nvidia/model.py ``load_weights``), so e8m0 there would load wrong;
- everything vLLM builds unquantized stays as designed: embeddings, head, norms, hc_*,
  attn_sink, compressors and indexer.weights_proj (built with quant_config=None), the
  router gate (GateLinear without a quant config) and its bias / tid2eid.

Two dimensions are padded with zeros to whole blocks: moe_intermediate_size 64 -> 128 and
o_lora_rank 64 -> 128 (per output group). vLLM's CUDA path needs both: its shared-expert MLP
rounds the intermediate size down to whole blocks (nvidia/model.py DeepseekV4MLP:
64 // 128 = 0), the grouped wo_a einsum views its scales per group
(fp8_utils.deepgemm_post_process_fp8_weight_block), and 64-wide routed experts would be
re-blocked to 64x64 for Triton only (fused_moe/oracle/fp8.py refine_fp8_moe_block_shape),
not the 128x128 path real checkpoints take. The padded units compute silu(0) * 0 = 0 and
meet zero columns of w2 / wo_b, so the model is the same function.

Exactness: a weight survives exactly when weight / scale is an e4m3 number. With
power-of-two scales that holds for everything that carries the design (zeros, and the 1.0
entries of the MTP e_proj permutation: 1 / 2**-8 = 256), so the designed text and MTP
acceptance are unchanged. The seeded values inside attention, indexer and experts are
rounded to e4m3: |w - dequant(w)| <= max(|w| / 16, scale / 1024) (half an ulp of 3
mantissa bits, or of the subnormal step 2**-9).
"""

import re
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

from serving.bench_model.shapes import RELEASE_QUANTIZATION

Tensors = dict[str, torch.Tensor]

BLOCK = 128
FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max
# Floor for a block's absolute maximum (as DeepSeek's and DeepGEMM's quantizers): an
# all-zero block gets a finite power-of-two scale and quantizes to zeros.
_AMAX_FLOOR = 1e-4
_QUANTIZED = re.compile(
    r"\.(attn\.(wq_a|wkv|wq_b|wo_a|wo_b)|attn\.indexer\.wq_b"
    r"|ffn\.shared_experts\.w[123]|ffn\.experts\.\d+\.w[123]|e_proj|h_proj)\.weight$"
)
_EXPERT_IN = re.compile(r"\.ffn\.(shared_experts|experts\.\d+)\.w[13]\.weight$")
_EXPERT_OUT = re.compile(r"\.ffn\.(shared_experts|experts\.\d+)\.w2\.weight$")


def is_quantized(name: str) -> bool:
    """Whether a real FP8 V4 checkpoint stores this tensor in FP8 (with a ``.scale``)."""
    return _QUANTIZED.search(name) is not None


def _round_up(n: int) -> int:
    return -(-n // BLOCK) * BLOCK


def fp8_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The bf16 golden config with the FP8 release fields and block-padded dimensions."""
    return cfg | {
        "moe_intermediate_size": _round_up(cfg["moe_intermediate_size"]),
        "o_lora_rank": _round_up(cfg["o_lora_rank"]),
        "expert_dtype": "fp8",
        "quantization_config": dict(RELEASE_QUANTIZATION),
    }


def quantize_block(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """128x128 block FP8 with ue8m0 scales: ``weight ~= fp8 * scale`` per block.

    ``weight`` is [..., rows, cols]; the scale is [..., ceil(rows/128), ceil(cols/128)], each
    the smallest power of two with amax / scale <= 448, so nothing saturates and dividing by
    it is exact: the only rounding is the cast to e4m3.
    """
    *lead, rows, cols = weight.shape
    padded = F.pad(weight.float(), (0, -cols % BLOCK, 0, -rows % BLOCK))
    grid = (padded.shape[-2] // BLOCK, padded.shape[-1] // BLOCK)
    blocks = padded.view(*lead, grid[0], BLOCK, grid[1], BLOCK)
    amax = blocks.abs().amax(dim=(-3, -1)).clamp(min=_AMAX_FLOOR)
    scale = torch.exp2(torch.ceil(torch.log2(amax / FP8_MAX)))
    quantized = (blocks / scale[..., :, None, :, None]).to(FP8).view_as(padded)
    return quantized[..., :rows, :cols].contiguous(), scale


def _pad_rows(weight: torch.Tensor, rows: int, groups: int = 1) -> torch.Tensor:
    grouped = weight.view(groups, -1, weight.shape[1])
    return F.pad(grouped, (0, 0, 0, rows - grouped.shape[1])).reshape(-1, weight.shape[1])


def _pad_cols(weight: torch.Tensor, cols: int, groups: int = 1) -> torch.Tensor:
    grouped = weight.view(weight.shape[0], groups, -1)
    return F.pad(grouped, (0, cols - grouped.shape[2])).reshape(weight.shape[0], -1)


def block_padded(name: str, weight: torch.Tensor, cfg: dict[str, Any]) -> torch.Tensor:
    """``weight`` of the bf16 golden ``cfg`` at the FP8 config's block-padded sizes."""
    groups = cfg["o_groups"]
    if name.endswith(".attn.wo_a.weight"):
        return _pad_rows(weight, _round_up(cfg["o_lora_rank"]), groups)
    if name.endswith(".attn.wo_b.weight"):
        return _pad_cols(weight, _round_up(cfg["o_lora_rank"]), groups)
    inter = _round_up(cfg["moe_intermediate_size"])
    if ".shared_experts." in name:
        inter *= cfg["n_shared_experts"]
    if _EXPERT_IN.search(name):
        return _pad_rows(weight, inter)
    if _EXPERT_OUT.search(name):
        return _pad_cols(weight, inter)
    return weight


def fp8_groups(groups: Iterable[Tensors], cfg: dict[str, Any]) -> Iterator[Tensors]:
    """The designed shards (of the bf16 ``cfg``) as FP8 release shards."""
    for tensors in groups:
        padded = {name: block_padded(name, tensor, cfg) for name, tensor in tensors.items()}
        # Same-shaped weights (a layer's 256 experts) quantize as one batch: thousands of
        # small reductions cost far more than a few large ones.
        by_shape: dict[torch.Size, list[str]] = {}
        for name in filter(is_quantized, padded):
            by_shape.setdefault(padded[name].shape, []).append(name)
        scales: Tensors = {}
        for names in by_shape.values():
            weights, blocks = quantize_block(torch.stack([padded[n] for n in names]))
            for name, weight, scale in zip(names, weights, blocks, strict=True):
                # Clones: safetensors refuses tensors that share storage.
                padded[name], scales[name] = weight.clone(), scale.clone()
        out: Tensors = {}
        for name, tensor in padded.items():
            out[name] = tensor
            if name in scales:
                out[name.removesuffix(".weight") + ".scale"] = scales[name]
        yield out
