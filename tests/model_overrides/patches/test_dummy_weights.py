"""The dummy-weights patch, through vLLM's own DummyModelLoader: DeepSeek-V4's release
formats get usable values and balanced routing; other models keep vLLM's fill."""

import types

import pytest
import torch
from torch import nn

from model_overrides.patches import dummy_weights
from model_overrides.registry import REGISTRY, Need, Outcome, Registry

E8M0 = torch.float8_e8m0fnu


def test_balanced_hash_table_spreads_every_expert_evenly():
    table = dummy_weights.balanced_hash_table(vocab=129280, experts=256, per_token=6)
    assert table.shape == (129280, 6)
    assert all(len(set(row)) == 6 for row in table[:4096].tolist())  # distinct per token
    counts = torch.bincount(table.flatten(), minlength=256)
    assert counts.min() == counts.max() == 129280 * 6 // 256
    with pytest.raises(ValueError, match="7 experts per token of 6"):
        dummy_weights.balanced_hash_table(8, 6, 7)


class _Gate(nn.Module):
    def __init__(self, experts: int, hidden: int, hashed: bool) -> None:
        super().__init__()
        self.output_size = experts
        self.weight = nn.Parameter(torch.empty(experts, hidden))
        if hashed:
            self.tid2eid = nn.Parameter(
                torch.full((64, 4), 10**6, dtype=torch.int32), requires_grad=False
            )
        else:
            self.e_score_correction_bias = nn.Parameter(torch.empty(experts))


class _Experts(nn.Module):
    """The tensors of vLLM's Mxfp4MoEMethod (uint8 FP4 pairs and e8m0 bytes)."""

    def __init__(self, experts: int) -> None:
        super().__init__()
        for name, cols in (("w13_weight", 64), ("w2_weight", 32)):
            self.register_parameter(
                name, nn.Parameter(torch.zeros(experts, 32, cols, dtype=torch.uint8), False)
            )
            self.register_parameter(
                f"{name}_scale",
                nn.Parameter(torch.full((experts, 32, 4), 255, dtype=torch.uint8), False),
            )


class _Fp8Linear(nn.Module):
    """An FP8 block-scaled linear (DeepseekV4FP8Config: e8m0 scales with FP4 experts)."""

    def __init__(self, scale_dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(256, 256, dtype=torch.float8_e4m3fn), False)
        self.weight_scale_inv = nn.Parameter(torch.empty(2, 2, dtype=scale_dtype), False)


class _Moe(nn.Module):
    def __init__(self, hashed: bool) -> None:
        super().__init__()
        self.n_routed_experts = 16
        self.gate = _Gate(16, 64, hashed)
        self.experts = _Experts(16)


def _model() -> nn.Module:
    model = nn.Module()
    model.layers = nn.ModuleList()
    for hashed in (True, False):
        layer = nn.Module()
        layer.ffn = _Moe(hashed)
        layer.wq_a = _Fp8Linear(E8M0)
        layer.wo_b = _Fp8Linear(torch.float32)
        model.layers.append(layer)
    return model


def _config(model_type: str, architectures: list[str]) -> object:
    return types.SimpleNamespace(
        hf_config=types.SimpleNamespace(model_type=model_type, architectures=architectures)
    )


def _load(model: nn.Module, config: object) -> None:
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader.dummy_loader import DummyModelLoader

    DummyModelLoader(LoadConfig(load_format="dummy")).load_weights(model, config)


@pytest.fixture(scope="module")
def patched() -> None:
    """The patch applied as the plugin applies it (its probe reads vLLM's own fill); alone,
    so this process keeps vLLM's other code as installed."""
    # A module that ran earlier in this worker may have loaded the whole plugin.
    first_here = dummy_weights.probe().need is not Need.ALREADY_APPLIED
    alone = Registry()
    alone.add(next(p for p in REGISTRY.patches if p.name == "dsv4-dummy-weights"))
    (status,) = alone.apply_all()
    assert status.outcome is Outcome.APPLIED, status
    if first_here:
        assert "left as allocated" in status.detail  # vLLM 0.32 skips integer tensors


@pytest.mark.parametrize(
    ("model_type", "architectures"),
    [("deepseek_v4", ["DeepseekV4ForCausalLM"]), ("deepseek_mtp", ["DeepSeekV4MTPModel"])],
)
def test_dsv4_tensors_get_release_format_values(patched, model_type: str, architectures: list):
    model = _model()
    _load(model, _config(model_type, architectures))
    hashed, routed = model.layers[0], model.layers[1]
    table = hashed.ffn.gate.tid2eid
    assert table.max() < 16 and all(len(set(row)) == 4 for row in table.tolist())
    assert torch.count_nonzero(routed.ffn.gate.e_score_correction_bias) == 0
    for layer in model.layers:
        experts = layer.ffn.experts
        for name in ("w13_weight", "w2_weight"):
            assert torch.unique(getattr(experts, f"{name}_scale")).tolist() == [120]  # 2^-7
            packed = getattr(experts, name)
            assert len(torch.unique(packed)) > 200  # random FP4 pairs, not zeros
        for linear in (layer.wq_a, layer.wo_b):
            weight = linear.weight.float()
            assert weight.abs().max() <= 1 and weight.abs().mean() > 0.3  # not rounded to 0
            assert torch.unique(linear.weight_scale_inv.float()).tolist() == [2.0**-7]


def test_other_models_keep_vllms_fill(patched):
    model = _model()
    _load(model, _config("llama", ["LlamaForCausalLM"]))
    routed = model.layers[1]
    assert torch.unique(routed.ffn.experts.w13_weight).tolist() == [0]  # uint8 left alone
    # vLLM's own fill of FP8: [-1e-3, 1e-3], below e4m3's smallest steps.
    assert routed.wq_a.weight.float().abs().max() <= 2.0**-9
    assert model.layers[0].ffn.gate.tid2eid.max() == 10**6
