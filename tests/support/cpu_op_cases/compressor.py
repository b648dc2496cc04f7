"""Cases for the KV compressor ops (model_overrides/kernels/cpu_ops/compressor.py).

Each case is a batch laid out the way `DeepseekV4CPUCompressor.forward`
(vllm/models/deepseek_v4/cpu/cpu_compressor.py) lays it out: several requests with
different cached-context lengths and new-token counts (prefill, chunked prefill,
decode, and mixes) crossing compression boundaries, padding tokens with slot -1,
paged state caches (block size 4 for ratio 4, 8 for ratio 128; block stride padded
like a page of the pooled KV allocation) and paged compressed KV caches (256 //
ratio tokens per block, rows padded too) filled with random bytes, so that bytes the
op must not touch are checked as well. Shapes: head_dim 512 (main, "fp8_ds_mla")
and 128 (indexer), rope 64, ratios 4 (overlapping window of 8) and 128, eps 1e-6 and
the compressor RoPE table (theta 160000) of the test model. Edge cases: tiles of tiny
values (the 1e-4 scale floor and fp8 subnormals), peaked and tied scores, huge
values, and batches where every token is skipped.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from model_overrides.kernels.cpu_ops.compressor import (
    compress_norm_rope_store_cpu,
    compress_norm_rope_store_indexer_cpu,
    save_partial_states_cpu,
)
from tests.support.op_oracle import OpCase

ROPE = 64
EPS = 1e-6
ROPE_THETA = 160000.0
KV_TOKENS_PER_PAGE = 256  # fp8_ds_mla block size of the uncompressed cache


@dataclass
class Batch:
    ratio: int
    head_dim: int
    positions: torch.Tensor  # [N] int64
    state_slots: torch.Tensor  # [N] int64, -1 = padding
    gather_slots: torch.Tensor  # [N, window] int64, -1 = before the request's start
    kv_slots: torch.Tensor  # [N] int64, compressed-cache slot, -1 = skip
    state_cache: torch.Tensor  # [blocks, block_size, 2 * coff * head_dim] fp32 (strided)
    kv_cache_block_size: int
    num_kv_blocks: int


def _window(ratio: int) -> int:
    return 2 * ratio if ratio == 4 else ratio


def _state_width(ratio: int, head_dim: int) -> int:
    return (2 if ratio == 4 else 1) * head_dim


def _batch(
    g: torch.Generator,
    ratio: int,
    head_dim: int,
    reqs: list[tuple[int, int]],
    pad: int = 2,
    drop_state: float = 0.0,
    drop_kv: float = 0.1,
) -> Batch:
    """reqs: (tokens already cached, new tokens) per request, in batch order."""
    state_bs = 4 if ratio == 4 else 8
    kv_bs = KV_TOKENS_PER_PAGE // ratio
    window = _window(ratio)
    totals = [start + n for start, n in reqs]

    def block_table(per_req: list[int]) -> torch.Tensor:
        phys = torch.randperm(sum(per_req) + 3, generator=g)
        table = torch.zeros(len(per_req), max(per_req), dtype=torch.int64)
        at = 0
        for r, nb in enumerate(per_req):
            table[r, :nb] = phys[at : at + nb]
            at += nb
        return table

    state_bt = block_table([-(-t // state_bs) for t in totals])
    kv_bt = block_table([t // ratio // kv_bs + 1 for t in totals])
    req = torch.cat([torch.full((n,), r, dtype=torch.int64) for r, (_, n) in enumerate(reqs)])
    pos = torch.cat([torch.arange(s, s + n, dtype=torch.int64) for s, n in reqs])

    def to_slot(local: torch.Tensor, rows: torch.Tensor, table: torch.Tensor, bs: int):
        safe = local.clamp(min=0)
        slot = table[rows, safe // bs] * bs + safe % bs
        return torch.where(local >= 0, slot, -1)

    state_slots = to_slot(pos, req, state_bt, state_bs)
    win = pos[:, None] - window + 1 + torch.arange(window)
    gather = to_slot(win, req[:, None].expand_as(win), state_bt, state_bs)
    kv_slots = to_slot(pos // ratio, req, kv_bt, kv_bs)
    if drop_state:
        state_slots[torch.rand(len(pos), generator=g) < drop_state] = -1
    if drop_kv:
        kv_slots[torch.rand(len(pos), generator=g) < drop_kv] = -1
    # padding tokens (position 0, no slots), as in a padded batch
    pos = torch.cat([pos, torch.zeros(pad, dtype=torch.int64)])
    state_slots = torch.cat([state_slots, torch.full((pad,), -1, dtype=torch.int64)])
    kv_slots = torch.cat([kv_slots, torch.full((pad,), -1, dtype=torch.int64)])
    gather = torch.cat([gather, gather[:1].expand(pad, -1)])

    width = 2 * _state_width(ratio, head_dim)
    blocks = int(state_bt.max()) + 1
    base = torch.randn(blocks, state_bs * width + 48, generator=g)  # page-padded stride
    state = base[:, : state_bs * width].view(blocks, state_bs, width)
    state[..., width // 2 :] *= 2.0  # score half: logits of a few units
    return Batch(
        ratio, head_dim, pos, state_slots, gather, kv_slots, state, kv_bs, int(kv_bt.max()) + 1
    )


def _kv_score(g: torch.Generator, b: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """kv, score: column halves of one fused [N, 2 * state_width] projection; ape."""
    sw = _state_width(b.ratio, b.head_dim)
    kv_score = torch.randn(len(b.positions), 2 * sw, generator=g)
    kv_score[:, sw:] *= 2.0
    kv, score = kv_score.split([sw, sw], dim=-1)
    ape = torch.randn(b.ratio, sw, generator=g) * 0.5
    return kv, score, ape


def _cos_sin(max_pos: int) -> torch.Tensor:
    inv_freq = 1.0 / ROPE_THETA ** (torch.arange(0, ROPE, 2, dtype=torch.float64) / ROPE)
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq
    return torch.cat([angles.cos(), angles.sin()], dim=-1).float().contiguous()


def _token_bytes(head_dim: int) -> tuple[int, int]:
    return (576, 8) if head_dim == 512 else (128, 4)


def _kv_cache(g: torch.Generator, b: Batch) -> torch.Tensor:
    """Random bytes, [blocks, block_size * (token + scale bytes)] with a padded row."""
    data, scale = _token_bytes(b.head_dim)
    row = b.kv_cache_block_size * (data + scale)
    base = torch.randint(0, 256, (b.num_kv_blocks, row + 64), generator=g, dtype=torch.uint8)
    return base[:, :row]


def _decode(
    cache: torch.Tensor, slots: torch.Tensor, block_size: int, head_dim: int
) -> dict[str, torch.Tensor]:
    """Dequantized values at the written slots (diagnostics next to the raw bytes)."""
    data, scale = _token_bytes(head_dim)
    rows = cache[slots // block_size]
    p = (slots % block_size)[:, None]
    tok = rows.gather(1, p * data + torch.arange(data))
    sc = rows.gather(1, block_size * data + p * scale + torch.arange(scale))
    if head_dim == 512:
        fp8 = tok[:, :448].contiguous().view(torch.float8_e4m3fn).float().view(-1, 7, 64)
        exps = sc[:, :7].to(torch.int32) - 127
        nope = fp8 * torch.pow(2.0, exps.float())[..., None]
        rope = tok[:, 448:].contiguous().view(torch.bfloat16).float()
        return {"nope": nope.reshape(-1, 448), "rope": rope}
    fp8 = tok.contiguous().view(torch.float8_e4m3fn).float()
    return {"values": fp8 * sc.contiguous().view(torch.float32)}


def _cancel_rope(g: torch.Generator, b: Batch, cos_sin: torch.Tensor) -> None:
    """Make every even RoPE output cancel to rounding noise: all window rows of each
    compressed token get rope pairs r * (sin, cos) of that token's angle, so
    x_even * cos - x_odd * sin is ~0 and its bits expose any one-ulp slip upstream
    (pooling, exp, RMSNorm, FMAs). Each (row, half) belongs to one compressed token."""
    state, hd, ratio = b.state_cache, b.head_dim, b.ratio
    ends = ((b.positions + 1) % ratio == 0).nonzero().squeeze(1)
    slots = b.gather_slots[ends]  # [E, W]
    cs = cos_sin[(b.positions[ends] // ratio) * ratio]  # [E, 64]
    pair = torch.stack([cs[:, ROPE // 2 :], cs[:, : ROPE // 2]], dim=-1).reshape(-1, 1, ROPE)
    # one magnitude per token: the per-channel softmax weights then sum to 1 for both
    # lanes of a pair and keep the pair's direction
    vals = (pair * (0.5 + 1.5 * torch.rand(len(ends), 1, 1, generator=g))).expand(
        -1, slots.shape[1], -1
    )  # [E, W, 64]
    w = torch.arange(slots.shape[1])
    cols = torch.where(w >= ratio, hd, 0)[:, None] + torch.arange(hd - ROPE, hd)  # [W, 64]
    valid = slots >= 0
    sl = slots[valid]
    block, row = (sl // state.shape[1])[:, None], (sl % state.shape[1])[:, None]
    state[block, row, cols.expand_as(vals)[valid]] = vals[valid]


# --- save_partial_states_cpu ------------------------------------------------------


def _save_case(ratio: int, head_dim: int, reqs: list[tuple[int, int]], seed: int) -> OpCase:
    g = torch.Generator().manual_seed(seed)
    b = _batch(g, ratio, head_dim, reqs, drop_state=0.1)
    kv, score, ape = _kv_score(g, b)
    return OpCase(
        op="save_partial_states_cpu",
        args=(kv, score, ape, b.positions, b.state_cache, b.state_slots),
        impl=save_partial_states_cpu,
        outputs=lambda a, _: {"state_cache": a[4]},
    )


# --- compress_norm_rope_store(_indexer)_cpu ---------------------------------------


def _store_case(
    ratio: int,
    head_dim: int,
    reqs: list[tuple[int, int]],
    seed: int,
    edge: str = "",
    drop_kv: float = 0.1,
) -> OpCase:
    g = torch.Generator().manual_seed(seed)
    b = _batch(g, ratio, head_dim, reqs, drop_kv=drop_kv)
    # the state as the layer leaves it: this batch's rows written over older contents
    kv, score, ape = _kv_score(g, b)
    save_partial_states_cpu(kv, score, ape, b.positions, b.state_cache, b.state_slots)
    weight = 1.0 + 0.1 * torch.randn(head_dim, generator=g)
    state = b.state_cache
    sw = state.shape[2] // 2
    if edge == "tiny":  # whole 64-wide tiles ~1e-6 (scale floor, fp8 subnormals), others huge
        weight[64:128] = 1e-6 * torch.rand(64, generator=g)
        weight[192:200] = 3e-5
        state[..., :sw] *= torch.where(torch.rand(sw, generator=g) < 0.05, 1e4, 1.0)
    elif edge == "peaked":  # near one-hot softmax, tied scores, zero kv rows
        state[..., sw:] = torch.round(state[..., sw:] * 20.0)
        state[::3, :, :sw] = 0.0
    elif edge == "flat":  # identical scores: plain average
        state[..., sw:] = 0.5
    cos_sin = _cos_sin(int(b.positions.max()) + 1 + 64)
    if edge == "cancel":
        _cancel_rope(g, b, cos_sin)
        weight[head_dim - ROPE :] = 1.0 + 0.1 * torch.randn(
            ROPE // 2, generator=g
        ).repeat_interleave(2)
    cache = _kv_cache(g, b)
    ends = ((b.positions + 1) % ratio == 0) & (b.kv_slots >= 0)
    written = b.kv_slots[ends]
    impl = compress_norm_rope_store_cpu if head_dim == 512 else compress_norm_rope_store_indexer_cpu

    def outputs(a: tuple, _: Any) -> dict[str, torch.Tensor]:
        out = {"kv_cache": a[7]}
        out.update(_decode(a[7], written, b.kv_cache_block_size, head_dim))
        return out

    return OpCase(
        op=impl.__name__,
        args=(
            state,
            b.gather_slots,
            b.positions,
            b.kv_slots,
            weight,
            EPS,
            cos_sin,
            cache,
            b.kv_cache_block_size,
            ratio,
        ),
        impl=impl,
        outputs=outputs,
    )


# (cached tokens, new tokens) per request
PREFILL_R4 = [(0, 3), (0, 9), (5, 17), (2, 30), (0, 1), (0, 64)]
DECODE_R4 = [(3, 1), (6, 1), (7, 1), (10, 1), (99, 1), (1022, 1), (4094, 1)]
MIXED_R4 = [(11, 1), (200, 37), (0, 13), (15, 1), (64, 64)]
PREFILL_R128 = [(0, 130), (100, 60), (0, 127), (250, 200), (0, 5)]
DECODE_R128 = [(126, 1), (127, 1), (254, 1), (1022, 1), (4094, 1), (300, 1)]
MIXED_R128 = [(127, 1), (0, 300), (383, 1), (120, 20)]
LONG_R4 = [(0, 6000), (3000, 5000)]  # 2750 compressed tokens: catches 1-ulp slips
LONG_R128 = [(0, 2100), (1000, 1200)]

CASES: dict[str, Callable[[], OpCase]] = {
    "save_r4_main_prefill": partial(_save_case, 4, 512, PREFILL_R4, 1),
    "save_r4_main_decode": partial(_save_case, 4, 512, DECODE_R4, 2),
    "save_r128_main_prefill": partial(_save_case, 128, 512, PREFILL_R128, 3),
    "save_r128_main_mixed": partial(_save_case, 128, 512, MIXED_R128, 4),
    "save_r4_indexer_mixed": partial(_save_case, 4, 128, MIXED_R4, 5),
    "save_r128_indexer_decode": partial(_save_case, 128, 128, DECODE_R128, 6),
    "main_r4_prefill": partial(_store_case, 4, 512, PREFILL_R4, 11),
    "main_r4_decode": partial(_store_case, 4, 512, DECODE_R4, 12),
    "main_r4_mixed": partial(_store_case, 4, 512, MIXED_R4, 13),
    "main_r4_long": partial(_store_case, 4, 512, LONG_R4, 14),
    "main_r128_prefill": partial(_store_case, 128, 512, PREFILL_R128, 15),
    "main_r128_decode": partial(_store_case, 128, 512, DECODE_R128, 16),
    "main_r128_mixed": partial(_store_case, 128, 512, MIXED_R128, 17),
    "main_r128_long": partial(_store_case, 128, 512, LONG_R128, 18),
    "main_r4_tiny": partial(_store_case, 4, 512, MIXED_R4, 19, "tiny"),
    "main_r4_peaked": partial(_store_case, 4, 512, PREFILL_R4, 20, "peaked"),
    "main_r128_flat": partial(_store_case, 128, 512, PREFILL_R128, 21, "flat"),
    "main_r4_cancel": partial(_store_case, 4, 512, MIXED_R4, 23, "cancel"),
    "main_r128_cancel": partial(_store_case, 128, 512, PREFILL_R128, 24, "cancel"),
    "main_r4_all_skipped": partial(_store_case, 4, 512, PREFILL_R4, 22, drop_kv=1.0),
    "indexer_r4_prefill": partial(_store_case, 4, 128, PREFILL_R4, 31),
    "indexer_r4_decode": partial(_store_case, 4, 128, DECODE_R4, 32),
    "indexer_r4_mixed": partial(_store_case, 4, 128, MIXED_R4, 33),
    "indexer_r4_long": partial(_store_case, 4, 128, LONG_R4, 34),
    "indexer_r128_prefill": partial(_store_case, 128, 128, PREFILL_R128, 35),
    "indexer_r4_tiny": partial(_store_case, 4, 128, MIXED_R4, 36, "tiny"),
    "indexer_r4_peaked": partial(_store_case, 4, 128, PREFILL_R4, 37, "peaked"),
    "indexer_r4_cancel": partial(_store_case, 4, 128, MIXED_R4, 38, "cancel"),
}
