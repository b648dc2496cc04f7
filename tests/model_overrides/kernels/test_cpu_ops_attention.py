"""The eager sparse-MLA attention ops (model_overrides/kernels/cpu_ops/attention.py) against
vLLM's native `_C` ones.

Cases: tests/support/cpu_op_cases/attention.py.

- `fused_qnorm_rope_kv_insert_cpu`: bit-exact, both the returned q and every byte of the
  KV cache (fp8 NoPE, UE8M0 scales, pad byte, bf16 RoPE, untouched stale bytes).
- `inverse_gptj_rope_o_proj_cpu`: bit-exact (fp32 output).
- `flash_mla_with_kvcache_cpu` (bf16 output): the same algorithm (same dequantised bf16 K/V,
  128-key online-softmax steps, probabilities rounded to bf16 before P @ V, sink folded in at
  the end), but fp32 dot products and sums run in another order and torch.exp stands in for
  the kernel's exp_u20 approximation. An output sitting next to a bf16 rounding boundary can
  therefore round the other way (e.g. native 2.0, eager 2.0156, fp64 2.0080), and native and
  eager have the same error against an fp64 reference. Measured over the cases: at most
  0.15% of outputs differ, mostly by one bf16 ulp of their own (near-zero outputs of large
  cancelling terms by more, as fp32 sum order decides them); max |diff| <= 2.4e-3 of the
  largest output. Bound: one bf16 ulp of the largest output (<= 2^-7 of it) and 0.5%
  of elements. A token with no valid slot gets exactly 0 on both sides.

The native op indexes the cache by its real row stride; the oracle clones inputs (which
makes them contiguous), so the strided case is checked here, eager against eager.
"""

import pytest
import torch

from model_overrides.kernels.cpu_ops.attention import (
    HEAD_DIM,
    SCALE_BYTES,
    TOKEN_DATA_BYTES,
    flash_mla_with_kvcache_cpu,
    fused_qnorm_rope_kv_insert_cpu,
)
from tests.support.cpu_op_cases.attention import CASES, cos_sin_cache
from tests.support.native_ops import assert_within_bf16, compare_with_native


@pytest.fixture(scope="module")
def results() -> dict:
    return compare_with_native("tests.support.cpu_op_cases.attention")


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_native(results: dict, case: str) -> None:
    outputs = results[case]
    assert outputs, case
    for name, d in outputs.items():
        where = f"{case}/{name}: {d}"
        assert d["shape_equal"] and d["dtype_equal"], where
        if not case.startswith("attn_"):
            assert d["exact"], where
            continue
        assert d["nan_equal"], where
        if name == "dead_row":
            assert d["exact"] and d["max_ref"] == 0.0, where
            continue
        assert_within_bf16(d, where)


def test_strided_cache_rows() -> None:
    """A cache view whose row stride exceeds its width (a layer's slice of a pooled buffer):
    the same bytes as a contiguous cache, padding untouched, and the same attention."""
    g = torch.Generator().manual_seed(7)
    bs, blocks, pad, t = 16, 4, 40, 24
    width = bs * (TOKEN_DATA_BYTES + SCALE_BYTES)
    pooled = torch.randint(0, 256, (blocks, width + pad), generator=g, dtype=torch.uint8)
    strided = pooled.clone()[:, :width]
    dense = pooled[:, :width].clone()
    q = torch.randn(t, 8, HEAD_DIM, generator=g).to(torch.bfloat16)
    kv = torch.randn(t, HEAD_DIM, generator=g).to(torch.bfloat16)
    positions = torch.randint(0, 4096, (t,), generator=g)
    slots = torch.randperm(blocks * bs, generator=g)[:t]
    csc = cos_sin_cache()
    q_strided = fused_qnorm_rope_kv_insert_cpu(q, kv, positions, strided, slots, csc, 8, 1e-6, bs)
    q_dense = fused_qnorm_rope_kv_insert_cpu(q, kv, positions, dense, slots, csc, 8, 1e-6, bs)
    assert strided.stride(0) == width + pad
    assert torch.equal(q_strided, q_dense) and torch.equal(strided, dense)
    padding = strided.as_strided((blocks, pad), (width + pad, 1), width)
    assert torch.equal(padding, pooled[:, width:])

    window = torch.where(
        torch.rand(t, 8, generator=g) < 0.8, slots[torch.randint(0, t, (t, 8), generator=g)], -1
    )
    outs = []
    for cache in (strided, dense):
        out = torch.empty(t, 8, HEAD_DIM, dtype=torch.bfloat16)
        sink = torch.zeros(8)
        flash_mla_with_kvcache_cpu(out, q, cache, window, bs, cache, window, bs, sink, 0.05)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
