"""Eager DSV4 sparse-MLA attention ops: `fused_qnorm_rope_kv_insert_cpu`,
`flash_mla_with_kvcache_cpu`, `inverse_gptj_rope_o_proj_cpu`.

Mirrors vLLM's `csrc/cpu/sgl-kernels/store_cache.cpp` (the Q/KV prologue and the output
de-rotation) and `csrc/cpu/sgl-kernels/flash_mla.cpp` (the attention). Call sites:
`vllm/models/deepseek_v4/cpu/cpu_sparse.py` (`_fused_qnorm_rope_kv_insert`, `forward_mqa`,
`_o_proj`).

KV cache ("fp8_ds_mla", DSV4 flavour; one row of the 2-D uint8 view per block of `bs` tokens):

    [bs x 576 B: 448 fp8-e4m3 NoPE bytes + 64 bf16 RoPE values (128 B, little-endian)]
    [bs x   8 B: 7 UE8M0 scale bytes (one per 64 NoPE dims, value 2^(byte-127)) + 1 zero byte]
    [any padding up to the row stride: never touched]

Rotary tables are `[max_pos, 64]` fp32, cos in the first 32 columns and sin in the last 32;
rotation is GPT-J style (interleaved even/odd pairs) on the last 64 of the 512 head dims.
"""

import torch

from model_overrides.kernels.cpu_ops import EagerOp

HEAD_DIM = 512
ROPE_DIM = 64
NOPE_DIM = HEAD_DIM - ROPE_DIM  # 448
QUANT_BLOCK = 64
NUM_QUANT_BLOCKS = NOPE_DIM // QUANT_BLOCK  # 7
TOKEN_DATA_BYTES = NOPE_DIM + 2 * ROPE_DIM  # 576
SCALE_BYTES = NUM_QUANT_BLOCKS + 1  # 8
FP8_MAX = 448.0
QUANT_EPS = 1e-4
FP8_MIN_NORMAL = 2.0**-6
ATTN_BLOCK_N = 128  # flash_mla.cpp's BLOCK_N: keys per online-softmax step
# Tokens per gathered [tokens, BLOCK_N, 512] K tile (bounds memory: 32 MiB of fp32 at 128).
ATTN_TOKEN_CHUNK = 128


# ---------------------------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------------------------


def _cos_sin(cos_sin_cache: torch.Tensor, positions: torch.Tensor, rope_dim: int):
    """cos, sin rows ([n, rope_dim/2] fp32) for `positions`."""
    rows = cos_sin_cache.index_select(0, positions)
    half = rope_dim // 2
    return rows[:, :half], rows[:, half:]


def _fma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """fp32 a*b + c with one rounding (an FMA), via fp64.

    a*b is exact in fp64 when a has <= 29 significant bits (bf16/fp16 inputs times fp32
    tables); the fp64 sum is then exact unless the exponents are far apart, where the double
    rounding can at worst differ from a true FMA in a case we never observed.
    """
    return (a.double() * b.double() + c.double()).float()


def _gptj_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Forward GPT-J rotation of fp32 pairs (x[2i], x[2i+1]) as the compiled C++ does it.

    `apply_gptj_rope_inplace` (store_cache.cpp) writes `e*cos - o*sin` and `e*sin + o*cos`;
    the vLLM 0.32.0 binary contracts each into one FMA, rounding `o*sin` resp. `o*cos` first
    (vfmsub231ps / vfmadd132ps in its disassembly), which this reproduces bit for bit.
    """
    e, o = x[..., 0::2], x[..., 1::2]
    even = _fma(e, cos, -(o * sin))
    odd = _fma(e, sin, o * cos)
    return torch.stack((even, odd), dim=-1).flatten(-2)


# ---------------------------------------------------------------------------------------------
# fused_qnorm_rope_kv_insert_cpu
# ---------------------------------------------------------------------------------------------


def _inv_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """1 / sqrt(sum(x^2) / D + eps) over the last dim, bit-exact to store_cache.cpp.

    The kernel sums the squares one after another in fp32 (scalar mulss/addss), which no
    torch reduction reproduces (they sum pairwise or in fp64), hence the loop over the 512
    dims (vectorised over tokens and heads). torch.sqrt on fp32 CPU tensors is not always
    correctly rounded, so the root is taken in fp64 (exact after rounding back to fp32).
    """
    d = x.shape[-1]
    squares = (x * x).reshape(-1, d).t().contiguous()  # [D, rows], each row contiguous
    total = squares[0].clone()
    for i in range(1, d):
        total.add_(squares[i])
    mean = total.reshape(x.shape[:-1]) / float(d) + torch.tensor(eps, dtype=torch.float32)
    return 1.0 / torch.sqrt(mean.double()).float()


def _quantize_nope(nope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """UE8M0-scaled fp8 of [n, 448] bf16-valued fp32: (fp8 bytes [n, 448], scales [n, 7]).

    Per 64-dim tile: scale = 2^ceil(log2(max(amax / 448, 1e-4))), stored as exponent + 127;
    values x / scale, clamped to +-448, rounded to e4m3 (round to nearest even). Like the
    kernel's `cvt_fp32x16_to_fp8x16`, magnitudes below e4m3's smallest normal (2^-6) are
    flushed to a signed zero instead of being encoded as subnormals.
    """
    n = nope.shape[0]
    tiles = nope.view(n, NUM_QUANT_BLOCKS, QUANT_BLOCK)
    scale = (tiles.abs().amax(dim=-1) / FP8_MAX).clamp_min(QUANT_EPS)
    # ceil(log2(scale)) exactly: scale = m * 2^e with m in [0.5, 1).
    mant, exp = torch.frexp(scale)
    exponent = torch.where(mant == 0.5, exp - 1, exp)
    # 2^-exponent built from its bits (exact; exponent is within [-13, 9] here).
    inv = ((127 - exponent) << 23).view(torch.float32)
    scaled = (tiles * inv.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX)
    fp8 = scaled.to(torch.float8_e4m3fn).view(torch.uint8)
    sign_zero = torch.signbit(scaled).to(torch.uint8) << 7
    fp8 = torch.where(scaled.abs() < FP8_MIN_NORMAL, sign_zero, fp8)
    return fp8.reshape(n, NOPE_DIM), (exponent + 127).to(torch.uint8)


def _insert_kv(
    kv: torch.Tensor,
    positions: torch.Tensor,
    cache_2d: torch.Tensor,
    slot_mapping: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    block_size: int,
) -> None:
    """RoPE + bf16 round trip + UE8M0 fp8 quant of kv rows, written at their slots."""
    n_insert = slot_mapping.shape[0]
    idx = (slot_mapping >= 0).nonzero().squeeze(-1)
    if idx.numel() == 0:
        return
    slots = slot_mapping.index_select(0, idx)
    x = kv[:n_insert].index_select(0, idx).float()
    cos, sin = _cos_sin(cos_sin_cache, positions[:n_insert].index_select(0, idx), ROPE_DIM)
    rope = _gptj_rope(x[:, NOPE_DIM:], cos, sin).to(torch.bfloat16)
    # The kernel rounds the whole row through bf16 (a no-op for bf16 kv's NoPE part).
    nope = x[:, :NOPE_DIM].to(torch.bfloat16).float()
    fp8, scales = _quantize_nope(nope)

    block = torch.div(slots, block_size, rounding_mode="floor").unsqueeze(-1)
    pos = (slots % block_size).unsqueeze(-1)
    data = torch.cat((fp8, rope.contiguous().view(torch.uint8)), dim=-1)
    data_cols = pos * TOKEN_DATA_BYTES + torch.arange(TOKEN_DATA_BYTES)
    cache_2d[block, data_cols] = data
    scale_bytes = torch.cat((scales, scales.new_zeros(scales.shape[0], 1)), dim=-1)
    scale_cols = block_size * TOKEN_DATA_BYTES + pos * SCALE_BYTES + torch.arange(SCALE_BYTES)
    cache_2d[block, scale_cols] = scale_bytes


def fused_qnorm_rope_kv_insert_cpu(
    q: torch.Tensor,
    kv: torch.Tensor,
    positions: torch.Tensor,
    swa_kv_cache_2d: torch.Tensor,
    slot_mapping: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    q_head_padded: int,
    eps: float,
    cache_block_size: int,
) -> torch.Tensor:
    """Q: per-head weight-free RMSNorm then GPT-J RoPE on the last 64 dims, into a zeroed
    [T, q_head_padded, 512] tensor (q's dtype). KV: the first `slot_mapping.numel()` rows get
    GPT-J RoPE (no norm), a bf16 round trip and UE8M0 fp8 quantisation, and are written into
    the fp8_ds_mla cache at their slots (slot < 0: skipped). Mirrors store_cache.cpp.
    """
    torch._check(
        q.dim() == 3 and q.dtype in (torch.bfloat16, torch.float16),
        lambda: "fused_qnorm_rope_kv_insert_cpu: q must be bf16/fp16 [T, H, head_dim]",
    )
    torch._check(kv.dim() == 2 and kv.dtype == q.dtype, lambda: "kv dtype must match q")
    torch._check(
        swa_kv_cache_2d.dim() == 2 and swa_kv_cache_2d.dtype == torch.uint8,
        lambda: "swa_kv_cache_2d must be a 2-D uint8 tensor",
    )
    torch._check(q.size(2) == HEAD_DIM, lambda: "head_dim must be 512")
    torch._check(q_head_padded >= q.size(1), lambda: "q_head_padded must be >= num_heads_q")
    torch._check(cos_sin_cache.dtype == torch.float32, lambda: "cos_sin_cache must be fp32")
    num_tokens, num_heads, _ = q.shape

    x = q.float()
    x = x * _inv_rms(x, eps).unsqueeze(-1)
    cos, sin = _cos_sin(cos_sin_cache, positions, ROPE_DIM)
    rope = _gptj_rope(x[..., NOPE_DIM:], cos.unsqueeze(1), sin.unsqueeze(1))
    q_out = q.new_zeros(num_tokens, q_head_padded, HEAD_DIM)
    q_out[:, :num_heads, :NOPE_DIM] = x[..., :NOPE_DIM]
    q_out[:, :num_heads, NOPE_DIM:] = rope

    _insert_kv(kv, positions, swa_kv_cache_2d, slot_mapping, cos_sin_cache, cache_block_size)
    return q_out


def _fused_qnorm_rope_kv_insert_fake(
    q: torch.Tensor,
    kv: torch.Tensor,
    positions: torch.Tensor,
    swa_kv_cache_2d: torch.Tensor,
    slot_mapping: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    q_head_padded: int,
    eps: float,
    cache_block_size: int,
) -> torch.Tensor:
    return q.new_empty((q.shape[0], q_head_padded, q.shape[2]))


# ---------------------------------------------------------------------------------------------
# flash_mla_with_kvcache_cpu
# ---------------------------------------------------------------------------------------------


def _fp8_decode_table() -> torch.Tensor:
    """fp32 value of each e4m3 byte as flash_mla.cpp's `CVT_FP8_TO_BF16_EXT` decodes it.

    That conversion treats every byte as a normal number: exponent field 0 (zero and the
    subnormals) decodes to 2^-7 * (1 + m/8), so an encoded zero reads back as +-2^-7 (times
    the tile scale), not 0. Byte 0x7f/0xff (NaN in e4m3fn) reads as +-480.
    """
    b = torch.arange(256, dtype=torch.int32)
    e = ((b >> 3) & 0xF).float()
    m = (b & 7).float()
    v = torch.exp2(e - 7.0) * (1.0 + m / 8.0)
    return torch.where(b >= 128, -v, v)


_FP8_TABLE = _fp8_decode_table()


def _dequant_rows(cache_2d: torch.Tensor, slots: torch.Tensor, block_size: int) -> torch.Tensor:
    """bf16 K/V rows [n, 512] of the given (valid) slots, as flash_mla.cpp dequantises them:
    NoPE = bf16(decoded fp8 * 2^(scale byte - 127)), with scale byte 0 -> 0 and 0xff -> NaN
    (the kernel's exact fp32 product (fp8 * 2^8) * (scale * 2^-8) is the same number); RoPE
    = the stored bf16 values."""
    n = slots.shape[0]
    block = torch.div(slots, block_size, rounding_mode="floor").unsqueeze(-1)
    pos = (slots % block_size).unsqueeze(-1)
    data = cache_2d[block, pos * TOKEN_DATA_BYTES + torch.arange(TOKEN_DATA_BYTES)]
    scale_cols = block_size * TOKEN_DATA_BYTES + pos * SCALE_BYTES + torch.arange(NUM_QUANT_BLOCKS)
    sbytes = cache_2d[block, scale_cols].to(torch.int32)
    scale = (sbytes << 23).view(torch.float32)  # byte 0 -> 0.0
    scale = torch.where(sbytes == 255, torch.nan, scale)
    fp8 = _FP8_TABLE[data[:, :NOPE_DIM].long()].view(n, NUM_QUANT_BLOCKS, QUANT_BLOCK)
    nope = (fp8 * scale.unsqueeze(-1)).view(n, NOPE_DIM).to(torch.bfloat16)
    rope = data[:, NOPE_DIM:].contiguous().view(torch.bfloat16)
    return torch.cat((nope, rope), dim=-1)


def _unique_rows(
    cache_2d: torch.Tensor, slots: torch.Tensor, block_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Dequantise each distinct valid slot once.

    Returns (rows [u + 1, 512] fp32 holding bf16 values, the last one zero; index [T, K]
    into rows, invalid slots -> the zero row; valid [T, K]). Valid means
    0 <= slot < num_blocks * block_size, the kernel's `is_valid_sparse_index`.
    """
    total = cache_2d.shape[0] * block_size
    valid = (slots >= 0) & (slots < total)
    uniq, inverse = torch.unique(torch.where(valid, slots, -1), return_inverse=True)
    has_invalid = bool(uniq.numel()) and int(uniq[0]) < 0
    real = uniq[1:] if has_invalid else uniq
    # fp32 holding the bf16 values: the products below are then exact fp32 ones.
    rows = torch.cat((_dequant_rows(cache_2d, real, block_size).float(), torch.zeros(1, HEAD_DIM)))
    index = inverse - 1 if has_invalid else inverse
    index = torch.where(valid, index, real.numel())
    return rows, index, valid


def flash_mla_with_kvcache_cpu(
    out: torch.Tensor,
    q: torch.Tensor,
    window_cache_2d: torch.Tensor,
    window_slots: torch.Tensor,
    window_block_size: int,
    compressed_cache_2d: torch.Tensor,
    compressed_slots: torch.Tensor,
    compressed_block_size: int,
    attn_sink: torch.Tensor,
    scale: float,
) -> None:
    """Sparse MQA over fp8_ds_mla caches: for each token and head, softmax(q.k * scale) over
    its window slots and compressed slots jointly (slot < 0 or past the cache: masked), plus
    a per-head sink logit in the denominator with no value; out = weights @ V with V = K
    (all 512 dims, RoPE part included). A head with no valid slot gets 0. Writes `out` (bf16).

    Mirrors flash_mla.cpp's online softmax: keys in steps of 128 (window first, then
    compressed), fp32 scores, exp relative to the running max, fp32 denominator, but the
    probabilities rounded to bf16 before the P @ V product (fp32 accumulation); the sink
    enters at the end as out *= 1 / (1 + exp(sink - lse)).
    """
    torch._check(
        q.dim() == 3 and q.size(2) == HEAD_DIM and q.dtype == torch.bfloat16,
        lambda: "flash_mla_with_kvcache_cpu: q must be bf16 [num_tokens, num_heads, 512]",
    )
    torch._check(
        out.shape == q.shape and out.dtype == torch.bfloat16,
        lambda: "flash_mla_with_kvcache_cpu: out must be bf16 [num_tokens, num_heads, 512]",
    )
    torch._check(
        window_slots.dim() == 2 and window_slots.size(0) == q.size(0) and window_slots.size(1) > 0,
        lambda: "window_slots must be [num_tokens, num_window>0]",
    )
    torch._check(
        compressed_slots.dim() == 2 and compressed_slots.size(0) == q.size(0),
        lambda: "compressed_slots must be [num_tokens, num_compressed]",
    )
    torch._check(attn_sink.numel() == q.size(1), lambda: "attn_sink must have num_heads entries")
    num_tokens, num_heads, _ = q.shape
    parts = [(window_cache_2d, window_slots, window_block_size)]
    if compressed_slots.size(1) > 0:
        parts.append((compressed_cache_2d, compressed_slots, compressed_block_size))
    parts = [(*_unique_rows(c, s, bs), s.size(1)) for c, s, bs in parts]
    sink = attn_sink.float().reshape(1, num_heads)
    scale32 = torch.tensor(scale, dtype=torch.float32)

    for t0 in range(0, num_tokens, ATTN_TOKEN_CHUNK):
        t1 = min(t0 + ATTN_TOKEN_CHUNK, num_tokens)
        qc = q[t0:t1].float()
        n = t1 - t0
        m = torch.full((n, num_heads), -torch.inf)
        s = torch.zeros(n, num_heads)
        acc = torch.zeros(n, num_heads, HEAD_DIM)
        for rows, index, valid, width in parts:
            for k0 in range(0, width, ATTN_BLOCK_N):
                k1 = min(k0 + ATTN_BLOCK_N, width)
                ok = valid[t0:t1, k0:k1]
                if not bool(ok.any()):
                    continue
                kv = rows[index[t0:t1, k0:k1]]  # [n, k, 512]
                logits = torch.bmm(qc, kv.transpose(1, 2)) * scale32  # [n, H, k]
                logits = logits.masked_fill(~ok.unsqueeze(1), -torch.inf)
                m_new = torch.maximum(m, logits.amax(dim=-1))
                live = torch.isfinite(m_new)
                m_safe = torch.where(live, m_new, 0.0)
                delta = torch.where(live, torch.exp(m - m_safe), 1.0)
                p = torch.exp(logits - m_safe.unsqueeze(-1))
                p = torch.where(live.unsqueeze(-1), p, 0.0)
                s = s * delta + p.sum(dim=-1)
                pv = torch.bmm(p.to(torch.bfloat16).float(), kv)
                acc = acc * delta.unsqueeze(-1) + pv
                m = m_new
        lonely = ~torch.isfinite(m) | (s == 0)
        s_safe = torch.where(lonely, 1.0, s)
        lse = m + torch.log(s_safe)
        inv_s = (1.0 / s_safe) * (1.0 / (1.0 + torch.exp(sink - lse)))
        res = torch.where(lonely.unsqueeze(-1), 0.0, acc * inv_s.unsqueeze(-1))
        out[t0:t1].copy_(res.to(torch.bfloat16))


# ---------------------------------------------------------------------------------------------
# inverse_gptj_rope_o_proj_cpu
# ---------------------------------------------------------------------------------------------


def inverse_gptj_rope_o_proj_cpu(
    o: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor, rope_dim: int
) -> torch.Tensor:
    """fp32 copy of o ([T, H, D], bf16/fp16) with its last `rope_dim` dims rotated by R(-pos):
    even' = e*cos + o*sin, odd' = o*cos - e*sin (GPT-J pairs). Mirrors the AVX-512 loop in
    store_cache.cpp, including its FMA (second product rounded first, then one fused add).
    """
    torch._check(o.dim() == 3, lambda: "inverse_gptj_rope_o_proj_cpu: o must be 3-D")
    torch._check(
        o.dtype in (torch.bfloat16, torch.float16), lambda: "o must be bf16/fp16 (reduced types)"
    )
    nope = o.size(2) - rope_dim
    torch._check(
        nope >= 0 and nope % 16 == 0 and (rope_dim // 2) % 16 == 0,
        lambda: "head_dim-rope_dim and rope_dim/2 must be multiples of 16",
    )
    torch._check(cos_sin_cache.dtype == torch.float32, lambda: "cos_sin_cache must be fp32")
    x = o.float()
    cos, sin = _cos_sin(cos_sin_cache, positions, rope_dim)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    e, od = x[..., nope::2], x[..., nope + 1 :: 2]
    even = _fma(e, cos, od * sin)
    odd = _fma(od, cos, e * -sin)
    out = torch.empty_like(x)
    out[..., :nope] = x[..., :nope]
    out[..., nope:] = torch.stack((even, odd), dim=-1).flatten(-2)
    return out


def _inverse_gptj_rope_o_proj_fake(
    o: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor, rope_dim: int
) -> torch.Tensor:
    return o.new_empty(o.shape, dtype=torch.float32)


OPS: tuple[EagerOp, ...] = (
    EagerOp(
        "fused_qnorm_rope_kv_insert_cpu",
        "fused_qnorm_rope_kv_insert_cpu(Tensor q, Tensor kv, Tensor positions, "
        "Tensor(a!) swa_kv_cache_2d, Tensor slot_mapping, Tensor cos_sin_cache, "
        "int q_head_padded, float eps, int cache_block_size) -> Tensor",
        fused_qnorm_rope_kv_insert_cpu,
        _fused_qnorm_rope_kv_insert_fake,
    ),
    EagerOp(
        "flash_mla_with_kvcache_cpu",
        "flash_mla_with_kvcache_cpu(Tensor(a!) out, Tensor q, Tensor window_cache_2d, "
        "Tensor window_slots, int window_block_size, Tensor compressed_cache_2d, "
        "Tensor compressed_slots, int compressed_block_size, Tensor attn_sink, float scale) -> ()",
        flash_mla_with_kvcache_cpu,
    ),
    EagerOp(
        "inverse_gptj_rope_o_proj_cpu",
        "inverse_gptj_rope_o_proj_cpu(Tensor o, Tensor positions, Tensor cos_sin_cache, "
        "int rope_dim) -> Tensor",
        inverse_gptj_rope_o_proj_cpu,
        _inverse_gptj_rope_o_proj_fake,
    ),
)
