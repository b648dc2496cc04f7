"""The plain-torch DSV4 reference (tests/support/dsv4_reference.py) against vLLM's CPU semantics.

Its hyper-connection pieces and routing are checked against our eager mirrors of vLLM's
native CPU ops (model_overrides/kernels/cpu_ops, themselves tested bit for bit against the
native `_C` ops); a checkpoint whose attention writes into the residual stream is refused.
"""

from pathlib import Path

import pytest
import torch

from model_overrides.kernels.cpu_ops import mhc as mhc_ops
from model_overrides.kernels.cpu_ops import routing as routing_ops
from serving.golden import GoldenDesign, write_golden_model
from serving.golden.architecture import golden_config
from tests.support import dsv4_reference as ref

CFG = golden_config()
HC, DIM = CFG["hc_mult"], CFG["hidden_size"]


@pytest.fixture(scope="module")
def clamp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_golden_model(
        tmp_path_factory.mktemp("golden-clamp"), GoldenDesign(variant="clamp")
    )


def _streams(tokens: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(tokens, HC, DIM, generator=gen).bfloat16()


def _hc_weights(rows: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    fn = torch.randn(rows, HC * DIM, generator=gen) * 0.05
    base = torch.randn(rows, generator=gen) * 0.05
    scale = torch.tensor([1.0, 0.7, 1.3])[: 3 if rows > HC else 1]
    return fn, scale, base


def test_hyper_connections_match_vllms_cpu_ops():
    h = _streams(16)
    fn, scale, base = _hc_weights((2 + HC) * HC)
    pre, post, comb = ref.hc_gates(h.float(), fn, scale, base, CFG)
    args = (HC, CFG["hc_sinkhorn_iters"], CFG["rms_norm_eps"], CFG["hc_eps"])
    layer_input, op_post, op_comb = mhc_ops.hc_pre_fused_cpu(h, fn, scale, base, *args)
    torch.testing.assert_close(post.squeeze(-1), op_post, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(comb, op_comb, rtol=1e-5, atol=1e-6)
    # The op rounds its outputs to bf16 once: compare at that precision.
    ours = ref.hc_collapse(h.float(), pre)
    torch.testing.assert_close(ours.bfloat16(), layer_input, rtol=0, atol=0.02)
    y = _streams(16, seed=2)[:, 0]
    mixed = ref.hc_post(y.float(), h.float(), post, comb)
    op_mixed = mhc_ops.hc_post_fused_cpu(y, h, op_post, op_comb)
    torch.testing.assert_close(mixed.bfloat16(), op_mixed, rtol=0.01, atol=0.02)


def test_hc_head_matches_vllms_cpu_op():
    h = _streams(16)
    fn, scale, base = _hc_weights(HC)
    ours = ref.hc_head(h.float(), fn, scale, base, CFG)
    op = mhc_ops.hc_head_fused_cpu(h, fn, scale, base, CFG["hc_eps"], CFG["rms_norm_eps"])
    torch.testing.assert_close(ours.bfloat16(), op, rtol=0.01, atol=0.02)


def _sorted(weights: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    order = ids.argsort(dim=-1)
    return weights.gather(1, order), ids.long().gather(1, order)


def test_routing_matches_vllms_cpu_ops(clamp_dir: Path):
    model = ref.Reference(clamp_dir)
    tokens = torch.arange(32) + 8
    x = _streams(32)[:, 0].float()
    k, scale = CFG["num_experts_per_tok"], CFG["routed_scaling_factor"]
    for layer in (0, 1):  # hash-routed, then learned routing with a selection bias
        weights, experts = model.route(x, tokens, layer)
        gate = f"layers.{layer}.ffn.gate."
        logits = x @ model.ckpt.f32(gate + "weight").T
        if layer < CFG["num_hash_layers"]:
            tid2eid = model.ckpt.raw(gate + "tid2eid")[tokens].contiguous()
            op = routing_ops.hash_topk_cpu(logits, tid2eid, k, "sqrtsoftplus", 0, 256, scale)
        else:
            bias = model.ckpt.f32(gate + "bias")
            op = routing_ops.biased_topk_cpu(
                logits, logits, bias, k, True, "sqrtsoftplus", 0, scale, True
            )
        ours, theirs = _sorted(weights, experts), _sorted(*op)
        assert torch.equal(ours[1], theirs[1]), layer
        torch.testing.assert_close(ours[0], theirs[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(weights.sum(-1), torch.full((32,), scale))


def test_a_checkpoint_with_live_attention_is_refused(tmp_path: Path):
    numeric = write_golden_model(tmp_path, GoldenDesign(variant="numeric"))
    with pytest.raises(ref.AttentionNotSilent, match="wo_b.weight has"):
        ref.Reference(numeric)


def test_clamped_swiglu_is_the_definition():
    gate = torch.tensor([-20.0, 5.0, 12.0, 30.0])
    up = torch.tensor([-15.0, 3.0, 11.0, -9.0])
    got = ref.swiglu(gate, up, 10.0)
    want = torch.nn.functional.silu(torch.tensor([-20.0, 5.0, 10.0, 10.0]))
    torch.testing.assert_close(got, want * torch.tensor([-10.0, 3.0, 10.0, -9.0]))
    torch.testing.assert_close(ref.swiglu(gate, up, None), torch.nn.functional.silu(gate) * up)
