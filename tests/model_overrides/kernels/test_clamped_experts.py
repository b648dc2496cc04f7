"""The routed-expert clamp override: the eager clamped experts against a per-token
statement of DSV4's routed MoE, and the patch's probe on the installed vLLM."""

import pytest
import torch

from model_overrides.kernels import clamped_experts as ce
from model_overrides.patches import cpu_moe_swiglu_clamp as patch

LIMIT = 10.0


def reference(x, w1, w3, w2, weights, ids, limit):
    """Per token and expert, straight from DSV4's definition, in fp32."""
    out = torch.zeros(x.shape[0], w2.shape[1])
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = int(ids[t, k])
            gate = (x[t].float() @ w1[e].float().T).clamp(max=limit)
            up = (x[t].float() @ w3[e].float().T).clamp(-limit, limit)
            out[t] += weights[t, k] * ((torch.nn.functional.silu(gate) * up) @ w2[e].float().T)
    return out


def _case(tokens: int, scale: float, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    experts, hidden, inter, k = 16, 64, 32, 4
    x = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    w1 = (torch.randn(experts, inter, hidden, generator=gen) * scale).to(torch.bfloat16)
    w3 = (torch.randn(experts, inter, hidden, generator=gen) * scale).to(torch.bfloat16)
    w2 = (torch.randn(experts, hidden, inter, generator=gen) * 0.05).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:k] for _ in range(tokens)])
    weights = torch.rand(tokens, k, generator=gen)
    return x, w1, w3, w2, weights, ids.to(torch.int32)


@pytest.mark.parametrize("tokens,gather", [(3, True), (40, False)])
def test_clamped_experts_match_the_definition(tokens: int, gather: bool, monkeypatch):
    monkeypatch.setattr(ce, "GATHER_BYTES", 1 << 40 if gather else 0)
    x, w1, w3, w2, weights, ids = _case(tokens, scale=0.8)
    pre = torch.einsum("th,eih->tei", x.float(), w3.float())
    assert (pre.abs() > LIMIT).float().mean() > 0.05  # the clamp binds in this case
    out = torch.empty(tokens, 64, dtype=torch.bfloat16)
    ce.clamped_experts(out, x, torch.cat([w1, w3], dim=1), w2, weights, ids, LIMIT)
    expected = reference(x, w1, w3, w2, weights, ids, LIMIT)
    unclamped = reference(x, w1, w3, w2, weights, ids, float("inf"))
    error = (out.float() - expected).abs().max()
    # bf16 products and one bf16 rounding of the activation: well under 1% of the output,
    # while dropping the clamp moves it by far more.
    assert error < 0.01 * expected.abs().max()
    assert (unclamped - expected).abs().max() > 20 * error


def test_the_installed_vllm_drops_the_limit_and_the_patch_says_so():
    cls = patch._experts_class()
    assert cls is not None
    original = getattr(cls.apply, "__wrapped__", cls.apply)
    assert "cpu_fused_moe(" in __import__("inspect").getsource(original)
    assert patch.drops_limit(type("Upstream", (), {"apply": original}))


# -- the backend filter: kernels that drop the limit are not selected -------------------


def test_filter_list_is_what_the_contract_rule_finds_dropping():
    from model_overrides.contracts import clamp_contract
    from model_overrides.patches import moe_clamp_filter

    for variant in ("nvidia", "amd", "xpu", "cpu"):
        dropping = {
            c.verdict.kernel for r in clamp_contract.results_for(variant) for c in r.dropped
        }
        eager = {"CPUUnquantizedExperts", "X86CPUUnquantizedExperts"}
        eager |= {"ArmCPUUnquantizedExperts", "PowerCPUUnquantizedExperts"}
        listed = {name for _, name in moe_clamp_filter.DROPPING.get(variant, ())}
        assert listed == dropping - eager, variant


def test_a_filtered_kernel_refuses_a_config_with_a_limit():
    import types

    from model_overrides.patches import moe_clamp_filter as f

    classes = f._classes()
    assert {"CPUExpertsFp8", "CPUExpertsFp8W8A8"} <= set(classes)  # importable on the CPU
    cls = classes["CPUExpertsFp8"]
    assert f.takes_no_limit(cls)
    originals = {c: c.__dict__.get("is_supported_config") for c in classes.values()}
    try:
        f.apply()
        assert f.verify() is None
        ok, reason = cls.is_supported_config(cls, types.SimpleNamespace(swiglu_limit=10.0))
        assert not ok and "swiglu_limit" in reason
    finally:
        for c, original in originals.items():
            if original is None:
                del c.is_supported_config
            else:
                c.is_supported_config = original
