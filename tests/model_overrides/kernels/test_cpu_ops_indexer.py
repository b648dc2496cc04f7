"""Eager sparse-indexer ops (model_overrides/kernels/cpu_ops/indexer.py) against vLLM's native
`_C` ops, run in a child process (tests/support/op_oracle.py); cases in
tests/support/cpu_op_cases/indexer.py.

Exact: the fp8 query bytes and folded weights of `fused_indexer_q_rope_quant_cpu`, and the
top-512 selections of `topk_transform_512_cpu` (as sets per row, page slots paired with raw
positions; rows of <= 512 keys also in the kernel's order; columns past 512 untouched). The
kernel writes longer rows in its heap's array order, which we do not reproduce.

`fp8_paged_mqa_logits_cpu` logits follow the kernel's fp32 rounding points except the dot,
which is exact and rounded once (the kernel rounds in 16 fp32 lanes and a lane tree).
Measured on this machine: on indexer-like inputs ~0.5% of logits differ (at most 163 of
~28k in a case), by 1 fp32 ulp of the logit: max_abs <= 0.2 fp32 ulp of the case's largest
logit. With element magnitudes spread over 2^20 (`logits_wide_dynamic_range`, where the
kernel's lane sums round often) about half differ, max_abs ~0.96 ulp of the largest logit.
Bounds below: max_abs within 2 fp32 ulps of the largest logit; the share of differing
logits (of all [B, max_seq_len] positions; unwritten ones are zeroed on both sides).
"""

import math

import pytest
import torch

from tests.support.cpu_op_cases.indexer import CASES, _indexer_cache
from tests.support.native_ops import compare_with_native

EPS32 = torch.finfo(torch.float32).eps
# Share of logits allowed to differ from the kernel's (by a lane-sum rounding).
MISMATCH_SHARE = {"logits_wide_dynamic_range": 0.5}
MISMATCH_SHARE_DEFAULT = 0.02


@pytest.fixture(scope="module")
def results() -> dict:
    return compare_with_native("tests.support.cpu_op_cases.indexer")


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_native(results: dict, case: str) -> None:
    outputs = results[case]
    assert outputs, f"{case}: no outputs compared"
    for name, diff in outputs.items():
        assert diff["shape_equal"] and diff["dtype_equal"], (case, name, diff)
        if not case.startswith("logits"):
            assert diff["exact"], (case, name, diff)
            continue
        assert diff["nan_equal"], (case, name, diff)
        assert diff["max_abs"] <= 2 * EPS32 * diff["max_ref"], (case, name, diff)
        share = MISMATCH_SHARE.get(case, MISMATCH_SHARE_DEFAULT)
        assert diff["mismatched"] <= max(2, share * math.prod(diff["shape"])), (case, diff)


def test_logits_pooled_cache_stride() -> None:
    """A layer's K-cache is a view into a pooled allocation (page stride > page bytes): the
    same scores as from a compact copy (the oracle's clones are always compact)."""
    from model_overrides.kernels.cpu_ops.indexer import fp8_paged_mqa_logits_cpu

    case = CASES["logits_test_model_prefill"]()
    q, cache, weight, seq_lens, table, block_size, max_len = case.args
    pooled = torch.zeros(cache.size(0), cache.size(1) + 4096, dtype=torch.uint8)
    pooled[:, 7 : 7 + cache.size(1)] = cache
    view = pooled[:, 7 : 7 + cache.size(1)]
    assert view.stride(0) > view.size(1)
    compact = fp8_paged_mqa_logits_cpu(q, cache, weight, seq_lens, table, block_size, max_len)
    strided = fp8_paged_mqa_logits_cpu(q, view, weight, seq_lens, table, block_size, max_len)
    assert torch.equal(compact, strided)


def test_logits_unwritten_positions_are_minus_inf() -> None:
    from model_overrides.kernels.cpu_ops.indexer import fp8_paged_mqa_logits_cpu

    g = torch.Generator().manual_seed(0)
    cache = _indexer_cache(g, 4, 64)
    q = torch.randn(2, 4, 128, generator=g).to(torch.float8_e4m3fn)
    lens = torch.tensor([0, 70], dtype=torch.int32)
    table = torch.tensor([[3, 1], [2, 0]], dtype=torch.int32)
    out = fp8_paged_mqa_logits_cpu(q, cache, torch.ones(2, 4), lens, table, 64, 100)
    assert out.shape == (2, 100) and out.dtype == torch.float32
    assert torch.isneginf(out[0]).all() and torch.isneginf(out[1, 70:]).all()
    assert torch.isfinite(out[1, :70]).all()


def test_schemas_and_fake() -> None:
    from model_overrides.kernels.cpu_ops.indexer import OPS

    assert [op.name for op in OPS] == [
        "fused_indexer_q_rope_quant_cpu",
        "fp8_paged_mqa_logits_cpu",
        "topk_transform_512_cpu",
    ]
    for op in OPS:
        assert op.schema.startswith(op.name + "(")
    logits = OPS[1]
    assert logits.fake is not None and all(op.fake is None for op in (OPS[0], OPS[2]))
    q = torch.empty(3, 4, 128, dtype=torch.float8_e4m3fn, device="meta")
    out = logits.fake(q, None, None, None, None, 256, 77)
    assert out.shape == (3, 77) and out.dtype == torch.float32


@pytest.mark.parametrize("case", ["logits_test_model_prefill", "topk_decode_mixed_lens"])
def test_blocking_does_not_change_results(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scoring/selection in small work blocks (as for long prefills) gives the same output."""
    from model_overrides.kernels.cpu_ops import indexer

    built = CASES[case]()
    whole_args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in built.args)
    whole = built.outputs(whole_args, built.impl(*whole_args))
    monkeypatch.setattr(indexer, "_SCORE_BLOCK", 3000)
    block_args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in built.args)
    blocked = built.outputs(block_args, built.impl(*block_args))
    for name, value in whole.items():
        assert torch.equal(value, blocked[name]), name


def test_topk_rows_all_short_in_narrow_scores() -> None:
    """A prefill chunk whose every row sees fewer than 512 keys, in a scores matrix narrower
    than 512 columns: positions 0..n-1 in order, then -1 (the heap path is never taken)."""
    case = CASES["topk_narrow_scores"]()
    case.impl(*case.args)
    lens, out_page, out_raw = case.args[1], case.args[3], case.args[5]
    for row, n in enumerate(lens.tolist()):
        assert out_raw[row, :n].tolist() == list(range(n))
        assert (out_raw[row, n:] == -1).all() and (out_page[row, n:] == -1).all()
        assert (out_page[row, :n] >= 0).all()
