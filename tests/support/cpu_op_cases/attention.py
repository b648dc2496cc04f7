"""Cases for the sparse-MLA attention ops (model_overrides/kernels/cpu_ops/attention.py)
against native `_C`.

Shapes follow `vllm/models/deepseek_v4/cpu/cpu_sparse.py`: head_dim 512 (448 NoPE + 64
RoPE), 8 heads (the test model; the CPU path pads no heads) or 64 (DSV4-Flash), SWA window
128 over 256-token cache blocks, compressed caches of ratio 4 (block 64, the indexer's
top-512) and 128 (block 2, every compressed token so far), cos/sin tables [max_pos, 64].

Batches hold several requests of different lengths, as decode (1 token each), prefill
(many tokens) or both, with slots resolved through block tables exactly like
`forward_mqa` does (-1 for window positions before 0 and for unused top-k entries). The
caches start out as random bytes (stale data nobody may read) and every slot a case reads is
written through the eager KV writer, whose bytes the insert cases show equal the native
ones.
"""

import math
from collections.abc import Callable
from functools import partial

import torch

from model_overrides.kernels.cpu_ops.attention import (
    HEAD_DIM,
    ROPE_DIM,
    SCALE_BYTES,
    TOKEN_DATA_BYTES,
    _insert_kv,
    flash_mla_with_kvcache_cpu,
    fused_qnorm_rope_kv_insert_cpu,
    inverse_gptj_rope_o_proj_cpu,
)
from tests.support.op_oracle import OpCase

SWA_BLOCK = 256
WINDOW = 128
TOPK = 512
MAX_POS = 4096
EPS = 1e-6
SCALE = HEAD_DIM**-0.5


def cos_sin_cache(max_pos: int = MAX_POS, theta: float = 10000.0) -> torch.Tensor:
    """[max_pos, 64] fp32: cos of the 32 rotary frequencies, then their sin."""
    inv_freq = theta ** (-torch.arange(0, ROPE_DIM, 2, dtype=torch.float64) / ROPE_DIM)
    freqs = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).float().contiguous()


def _stale_cache(g: torch.Generator, blocks: int, block_size: int, pad: int = 0) -> torch.Tensor:
    """[blocks, block bytes] uint8 of random bytes; `pad` extra bytes per row make the 2-D
    view's row stride exceed its width (only visible to ops that keep the view)."""
    width = block_size * (TOKEN_DATA_BYTES + SCALE_BYTES)
    full = torch.randint(0, 256, (blocks, width + pad), generator=g, dtype=torch.uint8)
    return full[:, :width]


def _kv_rows(g: torch.Generator, n: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """kv_norm output-like rows: unit-RMS values with a per-token gain."""
    gain = torch.exp(0.5 * torch.randn(n, 1, generator=g))
    return (torch.randn(n, HEAD_DIM, generator=g) * gain).to(dtype)


def _q_rows(g: torch.Generator, t: int, h: int, dtype: torch.dtype = torch.bfloat16):
    gain = torch.exp(torch.randn(t, h, 1, generator=g))
    return (torch.randn(t, h, HEAD_DIM, generator=g) * gain).to(dtype)


# ---------------------------------------------------------------------------------------------
# fused_qnorm_rope_kv_insert_cpu
# ---------------------------------------------------------------------------------------------


def _insert_outputs(args: tuple, ret: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"q_out": ret, "cache": args[3]}


def _batch_slots(
    g: torch.Generator, lengths: list[tuple[int, int]], blocks: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions and SWA slot ids for requests given as (context, new tokens), each request
    on its own random physical blocks."""
    perm = torch.randperm(blocks, generator=g).tolist()
    positions, slots = [], []
    for ctx, new in lengths:
        pos = torch.arange(ctx, ctx + new)
        table = torch.tensor([perm.pop() for _ in range((ctx + new - 1) // SWA_BLOCK + 1)])
        positions.append(pos)
        slots.append(table[pos // SWA_BLOCK] * SWA_BLOCK + pos % SWA_BLOCK)
    return torch.cat(positions), torch.cat(slots)


def _insert(
    lengths: list[tuple[int, int]],
    seed: int,
    heads: int = 8,
    padded: int | None = None,
    dtype: torch.dtype = torch.bfloat16,
    padding_rows: int = 0,
    invalid_every: int = 0,
    kv: Callable[[torch.Generator, int], torch.Tensor] | None = None,
) -> OpCase:
    """`padding_rows` extra q/kv rows beyond slot_mapping (the DP padding case: Q is still
    normalised, KV not inserted); every `invalid_every`-th slot is -1."""
    g = torch.Generator().manual_seed(seed)
    positions, slots = _batch_slots(g, lengths, blocks=24)
    if invalid_every:
        slots[::invalid_every] = -1
    t = positions.numel() + padding_rows
    positions = torch.cat((positions, torch.randint(0, MAX_POS, (padding_rows,), generator=g)))
    q = _q_rows(g, t, heads, dtype)
    kv_rows = kv(g, t) if kv is not None else _kv_rows(g, t, dtype)
    cache = _stale_cache(g, 24, SWA_BLOCK)
    return OpCase(
        "fused_qnorm_rope_kv_insert_cpu",
        (
            q,
            kv_rows.to(dtype),
            positions,
            cache,
            slots,
            cos_sin_cache(),
            padded or heads,
            EPS,
            SWA_BLOCK,
        ),
        fused_qnorm_rope_kv_insert_cpu,
        _insert_outputs,
    )


def _hard_kv(g: torch.Generator, n: int) -> torch.Tensor:
    """Quantisation edge cases, one kind per 64-wide NoPE tile: tiles spanning 40 binades
    (many elements land below fp8's smallest normal and are flushed), all-zero tiles (the
    1e-4 scale floor), tiles whose amax / 448 is exactly a power of two, tiny tiles (scale
    floor with real values), huge tiles (bf16 range) and ties on fp8's rounding grid."""
    x = torch.randn(n, 8, 64, generator=g)
    x[:, 0] *= torch.exp2(torch.randint(-20, 20, (n, 64), generator=g).float())
    x[:, 1] = 0.0
    x[:, 2, 0] = 1.75 * torch.exp2(torch.randint(-12, 12, (n,), generator=g).float())
    x[:, 2, 1:] = x[:, 2, 1:].clamp(-1, 1) * x[:, 2, :1]
    x[:, 3] *= 1e-7
    x[:, 4] *= 1e30
    # 448 * (1 + k/16) / 2^j: halfway between fp8 neighbours once scaled
    x[:, 5] = 448.0 * (1 + torch.randint(0, 16, (n, 64), generator=g) / 16.0) / 4.0
    x[:, 5, 0] = 448.0
    return x.reshape(n, HEAD_DIM)


# ---------------------------------------------------------------------------------------------
# flash_mla_with_kvcache_cpu
# ---------------------------------------------------------------------------------------------


def _map_slots(local: torch.Tensor, req: torch.Tensor, table: torch.Tensor, bs: int):
    """Local (per-request) token indices to global slot ids through a block table (-1 kept)."""
    safe = local.clamp(min=0)
    slot = table[req.unsqueeze(-1).expand_as(local), safe // bs] * bs + safe % bs
    return torch.where(local >= 0, slot, -1)


def _write(
    g: torch.Generator, cache: torch.Tensor, slots: torch.Tensor, bs: int, csc: torch.Tensor
) -> None:
    """Quantise random kv rows into `slots` of `cache` (native-equal bytes)."""
    positions = torch.randint(0, csc.shape[0], (slots.numel(),), generator=g)
    _insert_kv(_kv_rows(g, slots.numel()), positions, cache, slots, csc, bs)


def _attention(
    lengths: list[tuple[int, int]],
    ratio: int,
    seed: int,
    heads: int = 8,
    sink: str = "random",
    q_gain: float = 1.0,
    max_model_len: int = MAX_POS,
    pad: int = 0,
    extra: str = "",
) -> OpCase:
    """One layer's call for requests given as (context, new tokens).

    ratio 0: SWA only (no compressed slots, compressed block size 1, the window cache
    passed twice, as forward_mqa does); 4: each token attends to a random top-512 of its
    (pos + 1) // 4 compressed tokens, -1 padded (fewer candidates: all of them); 128: to all
    (pos + 1) // 128 of them, in a row of width ceil(max_model_len / 128).
    extra: "dead_row" sets one token's slots all to -1 (zero output), "out_of_range" points
    some slots past the cache's last block (masked like -1).
    """
    g = torch.Generator().manual_seed(seed)
    csc = cos_sin_cache()
    n_req = len(lengths)
    positions = torch.cat([torch.arange(c, c + n) for c, n in lengths])
    req = torch.cat([torch.full((n,), i) for i, (_, n) in enumerate(lengths)])
    t = positions.numel()

    # SWA: one block table row per request, random physical blocks.
    seq_blocks = [(c + n - 1) // SWA_BLOCK + 1 for c, n in lengths]
    win_blocks = sum(seq_blocks) + 2
    perm = torch.randperm(win_blocks, generator=g)
    table = torch.zeros(n_req, max(seq_blocks), dtype=torch.int64)
    used = 0
    for i, nb in enumerate(seq_blocks):
        table[i, :nb] = perm[used : used + nb]
        used += nb
    win_cache = _stale_cache(g, win_blocks, SWA_BLOCK, pad)
    local = (positions - WINDOW + 1).clamp(min=0).unsqueeze(-1) + torch.arange(WINDOW)
    local = torch.where(local <= positions.unsqueeze(-1), local, -1)
    window_slots = _map_slots(local, req, table, SWA_BLOCK)
    _write(g, win_cache, window_slots[window_slots >= 0].unique(), SWA_BLOCK, csc)

    if ratio == 0:
        comp_cache, comp_slots, comp_bs = win_cache, window_slots.new_full((t, 0), -1), 1
    else:
        comp_bs = SWA_BLOCK // ratio
        n_comp = (positions + 1) // ratio
        comp_seq_blocks = [max(1, -(-((c + n) // ratio) // comp_bs)) for c, n in lengths]
        comp_blocks = sum(comp_seq_blocks) + 2
        perm = torch.randperm(comp_blocks, generator=g)
        comp_table = torch.zeros(n_req, max(comp_seq_blocks), dtype=torch.int64)
        used = 0
        for i, nb in enumerate(comp_seq_blocks):
            comp_table[i, :nb] = perm[used : used + nb]
            used += nb
        comp_cache = _stale_cache(g, comp_blocks, comp_bs, pad)
        if ratio == 4:
            scores = torch.rand(t, int(n_comp.max()) + 1, generator=g)
            scores[torch.arange(scores.shape[1]) >= n_comp.unsqueeze(-1)] = -1.0
            k = min(TOPK, scores.shape[1])
            top = scores.topk(k, dim=-1).indices
            top = torch.where(top < n_comp.unsqueeze(-1), top, -1)
            local_topk = torch.full((t, TOPK), -1, dtype=torch.int64)
            local_topk[:, :k] = top
        else:
            width = -(-max_model_len // ratio)
            arange = torch.arange(width)
            local_topk = torch.where(arange < n_comp.clamp(max=width).unsqueeze(-1), arange, -1)
        comp_slots = _map_slots(local_topk, req, comp_table, comp_bs)
        valid = comp_slots[comp_slots >= 0].unique()
        if valid.numel():
            _write(g, comp_cache, valid, comp_bs, csc)

    if extra == "dead_row":
        window_slots[t // 2] = -1
        comp_slots[t // 2] = -1
    elif extra == "out_of_range":
        window_slots[:, ::5] = win_blocks * SWA_BLOCK + 3
        if comp_slots.shape[1]:
            comp_slots[:, ::7] = comp_cache.shape[0] * comp_bs

    q = (_q_rows(g, t, heads) * q_gain).to(torch.bfloat16)
    if sink == "random":
        attn_sink = torch.randn(heads, generator=g)
    else:  # the parameter's initial value
        attn_sink = torch.full((heads,), -math.inf)
    out = torch.zeros(t, heads, HEAD_DIM, dtype=torch.bfloat16)
    return OpCase(
        "flash_mla_with_kvcache_cpu",
        (
            out,
            q,
            win_cache,
            window_slots.contiguous(),
            SWA_BLOCK,
            comp_cache,
            comp_slots.contiguous(),
            comp_bs,
            attn_sink,
            SCALE,
        ),
        flash_mla_with_kvcache_cpu,
        partial(_attention_outputs, t // 2 if extra == "dead_row" else None),
    )


def _attention_outputs(dead: int | None, args: tuple, ret: None) -> dict[str, torch.Tensor]:
    outputs = {"out": args[0]}
    if dead is not None:
        outputs["dead_row"] = args[0][dead]
    return outputs


# ---------------------------------------------------------------------------------------------
# inverse_gptj_rope_o_proj_cpu
# ---------------------------------------------------------------------------------------------


def _inverse_rope(
    t: int,
    heads: int,
    seed: int,
    dtype: torch.dtype = torch.bfloat16,
    head_dim: int = HEAD_DIM,
    max_pos: int = MAX_POS,
) -> OpCase:
    g = torch.Generator().manual_seed(seed)
    o = (torch.randn(t, heads, head_dim, generator=g) * 3).to(dtype)
    positions = torch.randint(0, max_pos, (t,), generator=g)
    return OpCase(
        "inverse_gptj_rope_o_proj_cpu",
        (o, positions, cos_sin_cache(max_pos), ROPE_DIM),
        inverse_gptj_rope_o_proj_cpu,
        lambda args, ret: {"out": ret},
    )


def _cases() -> dict[str, Callable[[], OpCase]]:
    decode = [(4, 1), (300, 1), (2000, 1)]  # three requests, one new token each
    prefill = [(0, 40), (600, 100)]  # a first chunk and a continued chunk
    mixed = [(70, 1), (1500, 1), (0, 37), (250, 30)]
    cases: dict[str, Callable[[], OpCase]] = {
        # fused_qnorm_rope_kv_insert_cpu
        "insert_decode_h8": partial(_insert, decode, 1),
        "insert_prefill_h8": partial(_insert, prefill, 2),
        "insert_mixed_h8_padded16": partial(_insert, mixed, 3, padded=16),
        "insert_dp_padding_rows_h8": partial(_insert, mixed, 4, padding_rows=5),
        "insert_invalid_slots_h8": partial(_insert, prefill, 5, invalid_every=3),
        "insert_quant_edges_h8": partial(_insert, prefill, 6, kv=_hard_kv),
        "insert_prefill_h64": partial(_insert, [(0, 20), (900, 12)], 7, heads=64),
        "insert_fp16_h8": partial(_insert, mixed, 8, dtype=torch.float16),
        "insert_one_block_h1_padded8": partial(_insert, [(0, 256)], 9, heads=1, padded=8),
        # flash_mla_with_kvcache_cpu
        "attn_swa_decode_h8": partial(_attention, decode, 0, 11),
        "attn_swa_prefill_h8": partial(_attention, prefill, 0, 12),
        "attn_c4_decode_h8": partial(_attention, decode, 4, 13),
        "attn_c4_prefill_h8": partial(_attention, prefill, 4, 14),
        "attn_c4_mixed_h8": partial(_attention, mixed, 4, 15),
        "attn_c128_decode_h8": partial(_attention, decode, 128, 16),
        "attn_c128_mixed_h8": partial(_attention, mixed, 128, 17),
        "attn_c4_mixed_sink_inf_h8": partial(_attention, mixed, 4, 18, sink="-inf"),
        "attn_c4_mixed_sharp_h8": partial(_attention, mixed, 4, 19, q_gain=6.0),
        "attn_c4_dead_row_h8": partial(_attention, mixed, 4, 20, extra="dead_row"),
        "attn_c128_out_of_range_h8": partial(_attention, mixed, 128, 21, extra="out_of_range"),
        "attn_c4_padded_rows_h8": partial(_attention, mixed, 4, 22, pad=64),
        "attn_c4_long_decode_h8": partial(_attention, [(3900, 1), (2100, 1)], 4, 23),
        "attn_c128_long_model_len_h8": partial(
            _attention, [(5000, 1), (300, 2)], 128, 24, max_model_len=65536
        ),
        "attn_c4_decode_h64": partial(_attention, decode, 4, 25, heads=64),
        "attn_c4_prefill_h64": partial(_attention, [(0, 24), (800, 8)], 4, 26, heads=64),
        # inverse_gptj_rope_o_proj_cpu
        "inverse_rope_t1_h8": partial(_inverse_rope, 1, 8, 31),
        "inverse_rope_t300_h8": partial(_inverse_rope, 300, 8, 32),
        "inverse_rope_t17_h64": partial(_inverse_rope, 17, 64, 33, max_pos=65536),
        "inverse_rope_fp16_t17_h8": partial(_inverse_rope, 17, 8, 34, torch.float16),
        "inverse_rope_nope0_t17_h2": partial(_inverse_rope, 17, 2, 35, head_dim=ROPE_DIM),
    }
    return cases


CASES: dict[str, Callable[[], OpCase]] = _cases()
