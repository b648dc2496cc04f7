"""The golden checkpoint in DeepSeek-V4's FP8 release format, checked with vLLM's own code.

vLLM resolves it to ``DeepseekV4FP8Config`` with fp8 experts, its DSV4 weights mappers put
every scale on a ``weight_scale_inv`` parameter, its ue8m0 quantizer gives the same bytes
and its dequantizer gives back the design: exactly wherever the design carries the output
(zeros, one-hot rows, everything left unquantized), within e4m3 rounding elsewhere. So the
designed text and MTP acceptance are unchanged by quantization; this file checks the
weights, not an engine (vLLM's CPU backend has no FP8 kernels without AMX).
"""

import json
import os
import random
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from serving.golden import GoldenDesign, write_golden_model
from serving.golden.architecture import golden_config
from serving.golden.fp8 import BLOCK, block_padded, is_quantized, quantize_block
from serving.golden.weights import golden_tensors, one_hot_rows
from serving.golden.writer import read_design

FP8_DESIGN = GoldenDesign(weight_format="fp8")
# DeepSeek-V4-Flash(-Base)'s config.json, as published.
RELEASE_QUANTIZATION = {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "scale_fmt": "ue8m0",
    "weight_block_size": [128, 128],
}
# The linears vLLM 0.32 builds with the checkpoint's quant config: attention.py (fused
# wq_a+wkv, wq_b, wo_a, wo_b; the indexer's wq_b), nvidia/model.py (shared-expert MLP,
# routed experts), nvidia/mtp.py (e_proj, h_proj). Unquantized: what is built with
# quant_config=None or none (compressor.py's fused wkv+wgate, the indexer's weights_proj,
# the router's GateLinear) and what Fp8Config.get_quant_method leaves alone (embeddings,
# head).
VLLM_QUANTIZED = {
    "attn.wq_a",
    "attn.wkv",
    "attn.wq_b",
    "attn.wo_a",
    "attn.wo_b",
    "attn.indexer.wq_b",
    "ffn.shared_experts.w1",
    "ffn.shared_experts.w2",
    "ffn.shared_experts.w3",
    "ffn.experts.w1",
    "ffn.experts.w2",
    "ffn.experts.w3",
    "e_proj",
    "h_proj",
}
# Zero or one-hot by design: what carries the residual stream and the draft to the head.
DESIGN_CARRIERS = (".attn.wo_b.weight", ".w2.weight", ".e_proj.weight", ".h_proj.weight")


@pytest.fixture(scope="module")
def fp8_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_golden_model(tmp_path_factory.mktemp("golden-fp8"), FP8_DESIGN)


@pytest.fixture(scope="module")
def checkpoint(fp8_dir: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for shard in sorted(fp8_dir.glob("*.safetensors")):
        with safe_open(str(shard), "pt") as f:
            tensors |= {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
    return tensors


@pytest.fixture(scope="module")
def design() -> dict[str, torch.Tensor]:
    """The bf16 design, padded to the FP8 config's block-aligned sizes."""
    cfg = golden_config()
    return {
        name: block_padded(name, tensor, cfg)
        for group in golden_tensors(GoldenDesign())
        for name, tensor in group.items()
    }


Batch = tuple[list[str], torch.Tensor, torch.Tensor, torch.Tensor]


@pytest.fixture(scope="module")
def quantized(checkpoint: dict[str, torch.Tensor], design: dict[str, torch.Tensor]) -> list[Batch]:
    """The quantized weights stacked by shape, a layer's experts at a time: (names, fp8
    weights, scales, designed)."""
    by_shape: dict[torch.Size, list[str]] = {}
    for name in filter(is_quantized, design):
        by_shape.setdefault(design[name].shape, []).append(name)
    chunks = [names[i : i + 256] for names in by_shape.values() for i in range(0, len(names), 256)]
    return [
        (
            names,
            torch.stack([checkpoint[n] for n in names]),
            torch.stack([checkpoint[n.removesuffix(".weight") + ".scale"] for n in names]),
            torch.stack([design[n] for n in names]),
        )
        for names in chunks
    ]


def _kind(name: str) -> str:
    """``layers.3.ffn.experts.17.w1.weight`` -> ``ffn.experts.w1``."""
    parts = name.removesuffix(".weight").split(".")[2:]
    return ".".join(p for p in parts if not p.isdigit())


def _per_element(scale: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    full = scale.repeat_interleave(BLOCK, -2).repeat_interleave(BLOCK, -1)
    return full[..., : shape[-2], : shape[-1]]


def _failing(names: list[str], ok: torch.Tensor) -> list[str]:
    return [n for n, good in zip(names, ok.flatten(1).all(1).tolist(), strict=True) if not good]


def test_manifest_records_the_format(fp8_dir: Path, golden_dir: Path):
    assert read_design(fp8_dir) == FP8_DESIGN
    assert read_design(golden_dir).weight_format == "bf16"
    with pytest.raises(ValueError, match="weight_format"):
        GoldenDesign(weight_format="fp4")


def test_config_is_the_release_format_with_block_aligned_sizes(fp8_dir: Path):
    cfg = json.loads((fp8_dir / "config.json").read_text())
    base = golden_config()
    assert cfg["quantization_config"] == RELEASE_QUANTIZATION
    assert cfg["expert_dtype"] == "fp8"
    padded = {"moe_intermediate_size", "o_lora_rank"}
    for key in padded:
        assert cfg[key] % BLOCK == 0 and base[key] <= cfg[key] < base[key] + BLOCK
    added = {"quantization_config", "expert_dtype"}
    assert {k: v for k, v in cfg.items() if k not in padded | added} == {
        k: v for k, v in base.items() if k not in padded | added
    }


@pytest.fixture
def restored_environ():
    """vLLM's config objects set process-wide variables (LD_PRELOAD among them)."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.usefixtures("restored_environ")
def test_vllm_loads_it_as_a_deepseek_v4_fp8_checkpoint(fp8_dir: Path):
    from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.quantization import get_quantization_config

    os.environ.pop("VLLM_USE_DEEP_GEMM_E8M0", None)
    model_config = ModelConfig(model=str(fp8_dir), dtype="bfloat16", max_model_len=4096)
    assert model_config.quantization == "deepseek_v4_fp8"
    assert os.environ["VLLM_USE_DEEP_GEMM_E8M0"] == "1"  # the ue8m0 DeepGEMM path
    vllm_config = VllmConfig(model_config=model_config)
    quant = vllm_config.quant_config
    assert isinstance(quant, get_quantization_config("deepseek_v4_fp8"))
    assert quant.weight_block_size == [BLOCK, BLOCK]
    assert quant.activation_scheme == "dynamic"
    assert quant.ignored_layers == []
    with set_current_vllm_config(vllm_config):
        # FP8 block experts (Fp8MoEMethod) with float32 linear scales, as Flash-Base.
        assert quant.expert_dtype == "fp8"
        assert not quant.is_scale_e8m0


def test_names_dtypes_and_shapes_are_what_vllm_loads(checkpoint: dict[str, torch.Tensor]):
    from vllm.models.deepseek_v4.cpu.model import _make_deepseek_v4_weights_mapper as cpu
    from vllm.models.deepseek_v4.nvidia.model import _make_deepseek_v4_weights_mapper as cuda

    weights = {n for n, t in checkpoint.items() if t.dtype == torch.float8_e4m3fn}
    scales = {n for n in checkpoint if n.endswith(".scale")}
    assert {_kind(n) for n in weights} == VLLM_QUANTIZED
    assert weights == {n for n in checkpoint if is_quantized(n)}
    assert scales == {n.removesuffix(".weight") + ".scale" for n in weights}
    for name in weights:
        rows, cols = checkpoint[name].shape
        scale = checkpoint[name.removesuffix(".weight") + ".scale"]
        assert scale.dtype == torch.float32
        assert scale.shape == (-(-rows // BLOCK), -(-cols // BLOCK)), name
    for mapper in (cuda("fp8"), cpu("fp8")):
        for scale in sorted(scales):
            if scale.startswith("mtp."):  # the MTP loaders map their own names
                continue
            weight = scale.removesuffix(".scale") + ".weight"
            assert mapper.apply_list([scale]) == [mapper.apply_list([weight])[0] + "_scale_inv"]
    unquantized = set(checkpoint) - weights - scales
    assert {"embed.weight", "head.weight", "layers.0.ffn.gate.weight"} <= unquantized
    assert any(".compressor.wkv." in n for n in unquantized)
    assert any(".indexer.weights_proj." in n for n in unquantized)


def test_dequantized_weights_are_the_design(
    checkpoint: dict[str, torch.Tensor], design: dict[str, torch.Tensor], quantized: list[Batch]
):
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        GroupShape,
        scaled_dequantize,
    )

    assert set(checkpoint) - {n for n in checkpoint if n.endswith(".scale")} == set(design)
    for name in (n for n in design if not is_quantized(n)):
        assert torch.equal(checkpoint[name], design[name]), name
    inexact = 0
    for names, fp8, scale, designed in quantized:
        want = designed.float()
        error = scaled_dequantize(fp8, scale, group_shape=GroupShape(BLOCK, BLOCK)).sub_(want)
        carriers = [i for i, n in enumerate(names) if n.endswith(DESIGN_CARRIERS)]
        assert not _failing([names[i] for i in carriers], error[carriers] == 0)
        inexact += int(error.count_nonzero())
        # Half an e4m3 ulp: 3 mantissa bits for normals, 2**-9 * scale below 2**-6 * scale.
        bound = torch.maximum(want.abs_().div_(16), _per_element(scale, want.shape).div_(1024))
        assert not _failing(names, error.abs_() <= bound)
    assert inexact > 0  # the seeded attention and expert weights are really rounded


def _o_proj(o: torch.Tensor, wo_a: torch.Tensor, wo_b: torch.Tensor) -> torch.Tensor:
    """As vllm/models/deepseek_v4/nvidia/ops/o_proj.py reads them: wo_a viewed
    [groups, o_lora_rank, in], wo_b over the flattened [tokens, groups, o_lora_rank]."""
    z = torch.einsum("tgi,gri->tgr", o, wo_a.view(o.shape[1], -1, wo_a.shape[1]))
    return z.flatten(1) @ wo_b.T


def _swiglu(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, w3: torch.Tensor):
    return (torch.nn.functional.silu(x @ w1.T) * (x @ w3.T)) @ w2.T


def test_padded_output_projection_is_the_same_function():
    cfg, gen = golden_config(), torch.Generator().manual_seed(0)
    groups, width = cfg["o_groups"], cfg["num_attention_heads"] * cfg["head_dim"]
    wo_a = torch.randn(
        groups * cfg["o_lora_rank"], width // groups, generator=gen, dtype=torch.float64
    )
    wo_b = torch.randn(
        cfg["hidden_size"], groups * cfg["o_lora_rank"], generator=gen, dtype=torch.float64
    )
    o = torch.randn(5, groups, width // groups, generator=gen, dtype=torch.float64)
    pa = block_padded("layers.0.attn.wo_a.weight", wo_a, cfg)
    pb = block_padded("layers.0.attn.wo_b.weight", wo_b, cfg)
    assert pa.shape[0] % BLOCK == 0 and pb.shape[1] % BLOCK == 0 and pa.shape[0] > wo_a.shape[0]
    torch.testing.assert_close(_o_proj(o, pa, pb), _o_proj(o, wo_a, wo_b))


@pytest.mark.parametrize("expert", ["experts.3", "shared_experts"])
def test_padded_experts_are_the_same_function(expert: str):
    cfg, gen = golden_config(), torch.Generator().manual_seed(1)
    inter, dim = cfg["moe_intermediate_size"], cfg["hidden_size"]
    weights = {
        "w1": torch.randn(inter, dim, generator=gen, dtype=torch.float64),
        "w2": torch.randn(dim, inter, generator=gen, dtype=torch.float64),
        "w3": torch.randn(inter, dim, generator=gen, dtype=torch.float64),
    }
    padded = {
        w: block_padded(f"layers.0.ffn.{expert}.{w}.weight", t, cfg) for w, t in weights.items()
    }
    assert padded["w1"].shape[0] % BLOCK == 0 and padded["w2"].shape[1] % BLOCK == 0
    x = torch.randn(7, dim, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(_swiglu(x, **padded), _swiglu(x, **weights))


def test_scales_are_tight_powers_of_two(quantized: list[Batch]):
    for names, fp8, scale, _ in quantized:
        # ue8m0-representable: the float8_e8m0fnu round trip is exact.
        assert torch.equal(scale.to(torch.float8_e8m0fnu).float(), scale), names[0]
        n, rows, cols = scale.shape
        q = fp8.float().abs()
        q = torch.nn.functional.pad(
            q, (0, cols * BLOCK - q.shape[-1], 0, rows * BLOCK - q.shape[-2])
        )
        block_max = q.view(n, rows, BLOCK, cols, BLOCK).amax(dim=(2, 4))
        # The smallest power of two that fits: no block saturates, none wastes a binade.
        assert not _failing(names, (block_max == 0) | ((block_max >= 224) & (block_max <= 448)))


def test_checkpoint_bytes_are_vllms_ue8m0_quantizer(
    checkpoint: dict[str, torch.Tensor], design: dict[str, torch.Tensor]
):
    from vllm.utils.deep_gemm import per_block_cast_to_fp8

    names = (
        "layers.0.attn.wq_b.weight",
        "layers.0.attn.wo_a.weight",
        "layers.3.attn.indexer.wq_b.weight",
        "layers.1.ffn.experts.7.w1.weight",
        "layers.1.ffn.shared_experts.w2.weight",
        "mtp.0.e_proj.weight",
    )
    # Eager: the same function, without compiling it for each shape.
    with torch.compiler.set_stance("force_eager"):
        for name in names:
            weight, scale = per_block_cast_to_fp8(design[name], [BLOCK, BLOCK], use_ue8m0=True)
            assert torch.equal(checkpoint[name].view(torch.uint8), weight.view(torch.uint8)), name
            assert torch.equal(checkpoint[name.removesuffix(".weight") + ".scale"], scale), name


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_permutations_quantize_exactly(seed: int):
    """Any permutation of one-hot rows (the MTP e_proj of every draft_agreement)."""
    targets = list(range(256))
    random.Random(seed).shuffle(targets)
    weight = one_hot_rows(targets)
    q, scale = quantize_block(weight)
    expanded = scale.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
    assert torch.equal(q.float() * expanded, weight.float())
