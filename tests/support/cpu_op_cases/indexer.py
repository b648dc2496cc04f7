"""Cases for the sparse-indexer ops (model_overrides/kernels/cpu_ops/indexer.py) against
native `_C`.

Shapes: index heads 4 x 128 with rope 64 (the test model) and 64 x 128 (DSV4-Flash); K-cache
pages of 256 tokens (the test model's block size) and 64. Query rows are decode rows (one
request each) and prefill rows (consecutive tokens of a request sharing its page-table row,
causal lengths). Sequence lengths 0, 1, < 512, exactly 512, just over and far over 512, and
longer than `max_seq_len`. Top-k inputs with many ties (few distinct values, all equal,
relu-style zeros around the 512 boundary).

The K-cache is built in the layout `fp8_paged_mqa_logits_cpu` reads (and
`compress_norm_rope_store_indexer_cpu` writes): per page `block_size` x 128 e4m3 bytes, then
`block_size` raw fp32 power-of-two scales; bf16 keys quantised per token like the
compressor does.
"""

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from model_overrides.kernels.cpu_ops.indexer import (
    fp8_paged_mqa_logits_cpu,
    fused_indexer_q_rope_quant_cpu,
    topk_transform_512_cpu,
)
from tests.support.op_oracle import OpCase

HEAD_DIM = 128
ROPE = 64
FP8_MAX = 448.0
TOPK = 512


# --- fused_indexer_q_rope_quant_cpu -------------------------------------------------------


def _cos_sin_cache(max_pos: int, rot: int, base: float = 10000.0) -> torch.Tensor:
    """[max_pos, rot] fp32: cos of the rot/2 frequencies, then sin (vLLM's layout)."""
    inv_freq = 1.0 / base ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot)
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).float()


def _index_q(g: torch.Generator, t: int, h: int, spread: float = 1.0) -> torch.Tensor:
    """[t, h, 128] fp32 holding bf16 values (the wq_b projection's output), magnitudes
    varying per token and head."""
    scale = torch.exp(spread * torch.randn(t, h, 1, generator=g))
    return (torch.randn(t, h, HEAD_DIM, generator=g) * scale).bfloat16().float()


def _q_rope_case(
    t: int,
    h: int,
    seed: int,
    spread: float = 1.0,
    edit: Callable[[torch.Tensor], None] | None = None,
) -> OpCase:
    g = torch.Generator().manual_seed(seed)
    max_pos = 4096
    positions = torch.randint(0, max_pos, (t,), generator=g)
    index_q = _index_q(g, t, h, spread)
    if edit is not None:
        edit(index_q)
    weights = torch.randn(t, h, generator=g).bfloat16().float()
    args = (
        positions,
        index_q,
        _cos_sin_cache(max_pos, ROPE),
        torch.empty(t, h, HEAD_DIM, dtype=torch.float8_e4m3fn),
        weights,
        HEAD_DIM**-0.5,
        h**-0.5,
        torch.empty(t, h),
    )
    return OpCase(
        "fused_indexer_q_rope_quant_cpu",
        args,
        fused_indexer_q_rope_quant_cpu,
        lambda args, ret: {"q_fp8": args[3].view(torch.uint8), "weights_out": args[7]},
    )


def _power_of_two_edges(q: torch.Tensor) -> None:
    """Per (token, head) amax = 448 * 2^k * (1 + n * 2^-23) in a NoPE dim (exact in fp32):
    amax / 448 at and just above a power of two, where ceil(log2f(.)) is decided by
    log2f's rounding. Also heads below the 1e-4 amax floor."""
    t, h, _ = q.shape
    q[..., :ROPE] = q[..., :ROPE].clamp(-1.0, 1.0) * 2.0**-12  # nope far below the edge
    q[..., ROPE:] = q[..., ROPE:].clamp(-1.0, 1.0) * 2.0**-12
    for i in range(t):
        for j in range(h):
            k = (i + 3 * j) % 16 - 14  # 2^-14 .. 2^1
            n = (i * h + j) % 6
            q[i, j, (i + j) % ROPE] = -FP8_MAX * 2.0**k * (1.0 + n * 2.0**-23)
    q[0, 0] *= 1e-6  # amax < 1e-4: the floor sets the scale


def _tiny_and_huge(q: torch.Tensor) -> None:
    """A head spanning 2^-20 .. 2^10: fp8 subnormals and flushes to zero after scaling."""
    d = torch.arange(HEAD_DIM, dtype=torch.float32)
    q[0, 0] = (2.0 ** (d / 4.25 - 20.0)) * torch.where(d % 3 == 0, -1.0, 1.0)
    q[1, 1] = 0.0


# --- fp8 indexer K-cache and fp8_paged_mqa_logits_cpu --------------------------------------


def _quantise_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row power-of-two scale (the indexer's formula) -> (e4m3 values, fp32 scales)."""
    amax = x.abs().amax(-1).clamp_min(1e-4)
    scale = torch.exp2(torch.ceil(torch.log2(amax / FP8_MAX)))
    q = (x / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale


def _wide(g: torch.Generator, x: torch.Tensor, wide: bool) -> torch.Tensor:
    """With `wide`, scale each element by 2^-12 .. 2^8: fp8 values of very different sizes,
    so the kernel's per-product fp32 rounding inside a lane shows."""
    if not wide:
        return x
    return x * torch.exp2(torch.randint(-12, 9, x.shape, generator=g).float())


def _indexer_cache(
    g: torch.Generator, num_pages: int, block_size: int, wide: bool = False
) -> torch.Tensor:
    """[num_pages, block_size * 132] uint8: every slot holds a quantised bf16 key."""
    keys = _wide(g, torch.randn(num_pages * block_size, HEAD_DIM, generator=g), wide)
    keys = (keys * torch.exp(0.5 * torch.randn(keys.size(0), 1, generator=g))).bfloat16()
    values, scales = _quantise_rows(keys.float())
    fp8_bytes = values.view(torch.uint8).reshape(num_pages, block_size * HEAD_DIM)
    scale_bytes = scales.reshape(num_pages, block_size).contiguous().view(torch.uint8)
    return torch.cat((fp8_bytes, scale_bytes), dim=1).contiguous()


def _logits_case(
    seed: int,
    heads: int,
    block_size: int,
    requests: list[tuple[int, int]],
    max_seq_len: int | None = None,
    seq_dtype: torch.dtype = torch.int32,
    page_dtype: torch.dtype = torch.int32,
    nan_bytes: bool = False,
    wide: bool = False,
) -> OpCase:
    """`requests`: (context length, query rows); 1 row = decode (row length = context),
    n rows = prefill (causal: the last n lengths up to the context)."""
    g = torch.Generator().manual_seed(seed)
    pages_per_req = [max(1, math.ceil(n / block_size)) for n, _ in requests]
    num_pages = sum(pages_per_req) + 3  # a few pages nobody owns
    cache = _indexer_cache(g, num_pages, block_size, wide)
    perm = torch.randperm(num_pages, generator=g)
    width = max(pages_per_req) + 1
    tables, lens = [], []
    used = 0
    for (ctx, rows), n_pages in zip(requests, pages_per_req, strict=True):
        row = torch.full((width,), -1, dtype=torch.int64)  # unused entries: never read
        row[:n_pages] = perm[used : used + n_pages]
        used += n_pages
        tables += [row] * rows
        lens += [max(0, ctx - rows + 1 + i) for i in range(rows)]
    page_table = torch.stack(tables).to(page_dtype)
    seq_lens = torch.tensor(lens, dtype=seq_dtype)
    batch = len(lens)
    q = _wide(g, torch.randn(batch, heads, HEAD_DIM, generator=g), wide)
    q = q * torch.exp(torch.randn(batch, heads, 1, generator=g))
    q_fp8, q_scale = _quantise_rows(q)
    weight = torch.randn(batch, heads, generator=g) * q_scale * HEAD_DIM**-0.5 * heads**-0.5
    if nan_bytes:  # e4m3 NaN codes, which the kernel's fp8 -> bf16 conversion reads as +-480
        q_fp8.view(torch.uint8)[0, 0, :4] = torch.tensor([0x7F, 0xFF, 0x7F, 0x00])
        cache[perm[0], 5 * HEAD_DIM : 5 * HEAD_DIM + 3] = torch.tensor([0x7F, 0xFF, 0x7E])
    if max_seq_len is None:
        max_seq_len = max(lens)
    args = (q_fp8, cache, weight, seq_lens, page_table, block_size, max_seq_len)
    return OpCase(
        "fp8_paged_mqa_logits_cpu",
        args,
        fp8_paged_mqa_logits_cpu,
        partial(_written_logits, max_seq_len=max_seq_len),
    )


def _written_logits(args: tuple, ret: Any, max_seq_len: int) -> dict[str, Any]:
    """The kernel leaves positions >= seq_len unwritten (uninitialised): zero them."""
    lens = args[3].to(torch.int64).clamp(0, max_seq_len)
    unwritten = torch.arange(max_seq_len)[None, :] >= lens[:, None]
    return {"logits": ret.masked_fill(unwritten, 0.0)}


# --- topk_transform_512_cpu ---------------------------------------------------------------


def _topk_case(
    seed: int,
    lens: list[int],
    width: int,
    page_size: int,
    scores: str = "normal",
    raw: bool = True,
    out_cols: int = TOPK,
    seq_dtype: torch.dtype = torch.int32,
    page_dtype: torch.dtype = torch.int32,
    prefill_rows: int = 0,
) -> OpCase:
    g = torch.Generator().manual_seed(seed)
    if prefill_rows:  # one request's consecutive tokens: same page row, causal lengths
        lens = [lens[0] - prefill_rows + 1 + i for i in range(prefill_rows)]
    batch = len(lens)
    if scores == "normal":
        s = torch.randn(batch, width, generator=g)
    elif scores == "few_values":  # heavy ties everywhere, including at the 512th value
        s = torch.randint(0, 7, (batch, width), generator=g).float() * 0.25
    elif scores == "constant":
        s = torch.full((batch, width), 1.5)
    elif scores == "relu_zeros":  # sum_h w relu(.) > 0 for ~300 keys, exactly 0 elsewhere
        s = torch.randn(batch, width, generator=g)
        keep = torch.rand(batch, width, generator=g) < 300.0 / max(width, 1)
        s = torch.where(keep, s.abs(), torch.zeros(()))
    elif scores == "late_ties":  # ties at the boundary both before and after position T
        s = torch.randn(batch, width, generator=g).abs() + 2.0
        s[:, ::3] = 1.0
        s[:, 700::5] = 5.0
    else:
        raise ValueError(scores)
    pages = max(1, math.ceil(width / page_size))
    table = torch.stack([torch.randperm(4 * pages, generator=g)[:pages] for _ in range(batch)])
    if prefill_rows:
        table = table[:1].expand(batch, -1).contiguous()
    out_page = torch.full((batch, out_cols), -7, dtype=torch.int32)
    out_raw = torch.full((batch, out_cols), -7, dtype=torch.int32) if raw else None
    args = (
        s,
        torch.tensor(lens, dtype=seq_dtype),
        table.to(page_dtype),
        out_page,
        page_size,
        out_raw,
    )
    return OpCase(
        "topk_transform_512_cpu",
        args,
        topk_transform_512_cpu,
        partial(_topk_outputs, width=width),
    )


def _topk_outputs(args: tuple, ret: Any, width: int) -> dict[str, Any]:
    """Selections compared as sets (sorted per row, page slots kept paired with raw
    positions); rows of <= 512 keys, whose order the kernel defines, also as written;
    columns past 512 must stay untouched."""
    out_page, out_raw = args[3], args[5]
    lens = args[1].to(torch.int64).clamp(0, width)
    short = lens <= TOPK
    key = out_raw if out_raw is not None else out_page
    order = key[:, :TOPK].sort(dim=1, stable=True).indices
    outs: dict[str, Any] = {
        "page_sorted": out_page[:, :TOPK].gather(1, order),
        "page_short_rows": out_page[short, :TOPK],
        "untouched_cols": out_page[:, TOPK:],
    }
    if out_raw is not None:
        outs["raw_sorted"] = out_raw[:, :TOPK].gather(1, order)
        outs["raw_short_rows"] = out_raw[short, :TOPK]
    return outs


CASES: dict[str, Callable[[], OpCase]] = {
    # fused_indexer_q_rope_quant_cpu
    "q_rope_test_model_decode": partial(_q_rope_case, 5, 4, 1),
    "q_rope_test_model_prefill": partial(_q_rope_case, 300, 4, 2),
    "q_rope_dsv4_flash": partial(_q_rope_case, 33, 64, 3),
    "q_rope_wide_magnitudes": partial(_q_rope_case, 64, 64, 4, spread=4.0),
    "q_rope_power_of_two_edges": partial(_q_rope_case, 24, 8, 5, edit=_power_of_two_edges),
    "q_rope_subnormals": partial(_q_rope_case, 4, 4, 6, edit=_tiny_and_huge),
    # fp8_paged_mqa_logits_cpu
    "logits_test_model_decode": partial(
        _logits_case, 11, 4, 256, [(1, 1), (100, 1), (512, 1), (513, 1), (1000, 1), (3000, 1)]
    ),
    "logits_test_model_prefill": partial(_logits_case, 12, 4, 256, [(700, 40), (90, 9)]),
    "logits_mixed_int64_block64": partial(
        _logits_case,
        13,
        4,
        64,
        [(0, 1), (5, 1), (640, 3), (2000, 1)],
        max_seq_len=2100,
        seq_dtype=torch.int64,
        page_dtype=torch.int64,
    ),
    "logits_seq_len_over_max": partial(_logits_case, 14, 4, 256, [(900, 1), (300, 2)], 600),
    "logits_dsv4_flash": partial(_logits_case, 15, 64, 256, [(2500, 1), (600, 6), (40, 1)]),
    "logits_nan_codes": partial(_logits_case, 16, 4, 64, [(200, 1), (70, 1)], nan_bytes=True),
    "logits_wide_dynamic_range": partial(_logits_case, 17, 8, 64, [(1500, 1), (300, 4)], wide=True),
    # topk_transform_512_cpu
    "topk_decode_mixed_lens": partial(
        _topk_case, 21, [0, 1, 300, 511, 512, 513, 1000, 5000], 5000, 256
    ),
    "topk_seq_len_over_width": partial(_topk_case, 22, [800, 20000, 600], 900, 64),
    # a prefill chunk whose keys are all fewer than 512: no row takes the heap path
    "topk_narrow_scores": partial(_topk_case, 31, [0, 5, 288, 500], 500, 64),
    "topk_prefill_rows": partial(_topk_case, 23, [1200], 1200, 256, prefill_rows=800),
    "topk_ties_few_values": partial(
        _topk_case, 24, [400, 513, 600, 2000, 7000], 7000, 256, "few_values"
    ),
    "topk_ties_constant": partial(_topk_case, 25, [512, 513, 2048], 2048, 64, "constant"),
    "topk_ties_relu_zeros": partial(
        _topk_case, 26, [513, 900, 1500, 4000], 4000, 256, "relu_zeros"
    ),
    "topk_ties_late": partial(_topk_case, 27, [1000, 3000, 6000], 6000, 256, "late_ties"),
    "topk_no_raw_wide_out_int64": partial(
        _topk_case,
        28,
        [100, 700, 3000],
        3000,
        128,
        raw=False,
        out_cols=600,
        seq_dtype=torch.int64,
        page_dtype=torch.int64,
    ),
    "topk_page_size_1": partial(_topk_case, 29, [50, 600], 600, 1, "few_values"),
}
