"""DeepSeek-V4's CPU KV compressor ops, in eager torch.

Mirrors vLLM's `csrc/cpu/sgl-kernels/compressor.cpp` (called from
`vllm/models/deepseek_v4/cpu/cpu_compressor.py`):

- `save_partial_states_cpu`: write each token's raw kv and (score + ape) into its
  compressor state-cache row.
- `compress_norm_rope_store_cpu` (head_dim 512) and
  `compress_norm_rope_store_indexer_cpu` (head_dim 128): for every token whose
  position ends a group of `compress_ratio` tokens, softmax-pool the window of state
  rows per channel, RMSNorm, GPT-J RoPE on the last 64 dims, quantize to fp8 and
  store into the paged KV cache.

Numerics follow the compiled native kernel (read in its disassembly), not just the
C++ text, so that the cache bytes match bit for bit
(tests/model_overrides/kernels/test_cpu_ops_compressor.py):
the window accumulation `acc += e * kv` and the per-lane square sum are fused
multiply-adds (`torch.addcmul` where ATen fuses it, else emulated in float64), the
square sum is reduced over the 16 AVX-512 lanes as a pairwise tree, exp is SLEEF's
`expf_u10` (reproduced here: `torch.exp` goes through MKL and differs in ~10% of
lanes), sqrt is correctly rounded (`torch.sqrt` on float32 is not), RoPE is
`fma(x, cos, x_swapped * -+sin)`. Not reproduced: NaN/inf inputs and windows with no
valid slot (the native kernel then divides 0 by 0); duplicate slots in one call
(a race in the native kernel).
"""

import functools

import torch

from . import EagerOp

_FP8_MAX = 448.0
_QUANT_EPS = 1e-4  # as float32, like the C++ `1e-4f`
_ROPE_DIM = 64
_LANES = 16  # AVX-512 float lanes: the width of the native square-sum accumulator

# head_dim 512 ("fp8_ds_mla"): per token 448 fp8 NoPE bytes + 64 bf16 RoPE values,
# then, after all the block's tokens, 7 UE8M0 scale bytes + 1 zero pad byte per token.
_MAIN_HEAD_DIM = 512
_MAIN_NOPE_DIM = _MAIN_HEAD_DIM - _ROPE_DIM
_MAIN_QUANT_BLOCK = 64
_MAIN_TOKEN_BYTES = _MAIN_NOPE_DIM + 2 * _ROPE_DIM  # 576
_MAIN_SCALE_BYTES = _MAIN_NOPE_DIM // _MAIN_QUANT_BLOCK + 1  # 8

# head_dim 128 (indexer): per token 128 fp8 bytes, then a raw float32 scale per token.
_INDEXER_HEAD_DIM = 128
_INDEXER_SCALE_BYTES = 4

# Bound on the gathered [window, tokens, head_dim] block per chunk of boundary tokens.
_CHUNK_ELEMENTS = 1 << 18


def _fma_f32_exact(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Single-rounded float32 `a * b + c`, emulated in float64.

    The product of two float32 values is exact in float64; rounding the float64 sum
    to float32 is a double rounding only where that sum lies exactly halfway between
    two float32 values, and there the exact residual of the sum (TwoSum) decides.
    """
    p = a.double() * b.double()
    c64 = c.double()
    s = p + c64
    # float64 mantissa bits below float32 precision: exactly `100...0` at a midpoint
    tie = (s.view(torch.int64) & ((1 << 29) - 1)) == (1 << 28)
    if bool(tie.any()):
        bb = s - p
        err = (p - (s - bb)) + (c64 - bb)
        toward = torch.where(err > 0, float("inf"), float("-inf")).to(s.dtype)
        s = torch.where(tie & (err != 0), torch.nextafter(s, toward), s)
    return s.float()


@functools.cache
def _addcmul_is_fused() -> bool:
    """Whether `torch.addcmul` computes a fused (single-rounded) multiply-add here.

    PyTorch's AVX2/AVX-512 kernels compile `self + t1 * t2` to an FMA (~10x cheaper
    than the float64 emulation); its default-ISA build rounds twice. Probed on
    contiguous, strided and broadcast operands, where fused and unfused differ.
    """
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(2, 1031, generator=g) for _ in range(3))
    probes = [
        (a, b, c),
        (a[:, ::2], b[:, ::2], c[:, ::2]),
        (a, b, c[:, :1]),
        (a[:, :1], b, c),
        (a, b, c[0, 0]),
    ]
    return all(torch.equal(torch.addcmul(z, x, y), _fma_f32_exact(x, y, z)) for x, y, z in probes)


def _fma_f32(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Single-rounded float32 `a * b + c` (what AVX-512 `vfmadd` computes)."""
    if _addcmul_is_fused():
        return torch.addcmul(c, a, b)
    return _fma_f32_exact(a, b, c)


def _pow2(exponent: torch.Tensor) -> torch.Tensor:
    """2**exponent as float32 for integer exponents in [-126, 127], built from bits."""
    bits = (exponent.to(torch.int32) + 127) << 23
    return bits.view(torch.float32)


def _f32(x: float) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32)


# SLEEF 3.8 `xexpf` (Sleef_expf16_u10 / Sleef_expf8_u10, what `Vectorized<float>::exp`
# calls in the native kernel; `torch.exp` gives different bits): round(d / ln 2) = q,
# Cody-Waite reduction, degree-5 polynomial, all with FMA, scaled by 2**q in two steps.
_EXP_R_LN2 = 1.442695040888963407359924681001892137426645954152985934135449406931
_EXP_L2U = 0.693145751953125
_EXP_L2L = 1.428606765330187045e-06
_EXP_POLY = (
    0.000198527617612853646278381,
    0.00139304355252534151077271,
    0.00833336077630519866943359,
    0.0416664853692054748535156,
    0.166666671633720397949219,
    0.5,
)


def _sleef_expf(d: torch.Tensor) -> torch.Tensor:
    """Bit-exact SLEEF `expf_u10` of a float32 tensor (0 below -104, inf above 100)."""
    dc = d.clamp(-105.0, 101.0)  # lanes outside are overwritten below; keeps q small
    q = torch.round(dc * _f32(_EXP_R_LN2))  # round half to even, like vcvtps2dq
    s = _fma_f32(q, _f32(-_EXP_L2U), dc)
    s = _fma_f32(q, _f32(-_EXP_L2L), s)
    u = _f32(_EXP_POLY[0]).expand_as(s)
    for coeff in _EXP_POLY[1:]:
        u = _fma_f32(u, s, _f32(coeff))
    u = _fma_f32(s * s, u, s) + _f32(1.0)
    qi = q.to(torch.int32)
    half = qi >> 1
    u = u * _pow2(half) * _pow2(qi - half)
    u = torch.where(d < -104.0, 0.0, u)
    return torch.where(d > 100.0, float("inf"), u)


def _sqrt_f32(x: torch.Tensor) -> torch.Tensor:
    """Correctly rounded float32 sqrt of non-negative float32 `x` (like `vsqrtss`).

    `torch.sqrt` on float32 is off by one ulp in ~20% of lanes on x86 (MKL). Take
    the float64 root rounded to float32, then move one ulp if `x` lies outside the
    rounding interval of the result (interval ends have 25 bits: squares are exact).
    """
    r = torch.sqrt(x.double()).float()
    r64, x64 = r.double(), x.double()
    lo = (torch.nextafter(r, torch.zeros_like(r)).double() + r64) / 2
    hi = (torch.nextafter(r, torch.full_like(r, float("inf"))).double() + r64) / 2
    r = torch.where(x64 < lo * lo, torch.nextafter(r, torch.zeros_like(r)), r)
    return torch.where(x64 > hi * hi, torch.nextafter(r, torch.full_like(r, float("inf"))), r)


def _lane_tree_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim (16 lanes) the way `_mm512_reduce_add_ps` compiles:
    halves 8+8, then 4+4, then 2+2, then 1+1."""
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x[..., 0]


def _ceil_log2(x: torch.Tensor) -> torch.Tensor:
    """Exact `ceil(log2(x))` for positive finite float32 `x`, as int32.

    The native kernel calls `ceilf(log2f(x))`; it only ever sees x = bf16 / 448 (or
    1e-4f), which are exact powers of two or far from one, so both agree."""
    mantissa, exponent = torch.frexp(x)  # x = m * 2**e, m in [0.5, 1)
    return torch.where(mantissa == 0.5, exponent - 1, exponent)


def _to_fp8_bytes(x: torch.Tensor) -> torch.Tensor:
    """float32 already within [-448, 448] -> e4m3fn bytes, round to nearest even
    (the native vector conversion patched with the exact scalar one for subnormals
    equals torch's conversion there)."""
    return x.to(torch.float8_e4m3fn).view(torch.uint8)


def save_partial_states_cpu(
    kv: torch.Tensor,
    score: torch.Tensor,
    ape: torch.Tensor,
    positions: torch.Tensor,
    state_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write `[kv | score + ape[position % ratio]]` into state-cache row `slot`.

    kv/score: [num_tokens, state_width] fp32 (rows may be strided); ape:
    [compress_ratio, state_width]; state_cache: [num_blocks, block_size,
    2 * state_width] fp32 (its block stride may exceed block_size rows); tokens
    with slot -1 are skipped. Mirrors `save_partial_states_impl` in
    csrc/cpu/sgl-kernels/compressor.cpp.
    """
    state_width = kv.shape[1]
    ratio = ape.shape[0]
    block_size = state_cache.shape[1]
    slots = slot_mapping.reshape(-1)
    tokens = torch.nonzero(slots >= 0).squeeze(1)
    if tokens.numel() == 0:
        return
    slot = slots[tokens]
    block_idx = torch.div(slot, block_size, rounding_mode="trunc")
    pos_in_block = slot - block_idx * block_size
    ape_rows = ape[torch.remainder(positions.reshape(-1)[tokens], ratio)]
    state_cache[block_idx, pos_in_block, :state_width] = kv[tokens]
    state_cache[block_idx, pos_in_block, state_width:] = score[tokens] + ape_rows


def _pool_norm_rope(
    state_cache: torch.Tensor,
    gather_slots: torch.Tensor,
    positions: torch.Tensor,
    rms_norm_weight: torch.Tensor,
    rms_norm_eps: float,
    cos_sin_cache: torch.Tensor,
    compress_ratio: int,
    head_dim: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax-pool, RMSNorm and RoPE for a chunk of boundary tokens.

    Returns (normed, roped): `normed` [T, head_dim] fp32 after RMSNorm (before RoPE),
    `roped` [T, 64] the rotated last 64 dims.
    """
    window = gather_slots.shape[1]
    state_width = state_cache.shape[2] // 2
    state_block_size = state_cache.shape[1]

    # Gather window-major, [W, T, D], so each window step below is contiguous.
    slots = gather_slots.t()
    valid = (slots >= 0)[:, :, None]
    slot = slots.clamp(min=0)
    block_idx = torch.div(slot, state_block_size, rounding_mode="trunc")
    pos_in_block = slot - block_idx * state_block_size
    # Window entries at or past `compress_ratio` (the newer half of an overlapping
    # ratio-4 window) read the second head_dim half of the row's kv and score.
    w = torch.arange(window, device=slots.device)
    head_offset = torch.where(w >= compress_ratio, head_dim, 0)
    cols = (head_offset[:, None] + torch.arange(head_dim, device=slots.device))[:, None, :]
    bi, pi = block_idx[:, :, None], pos_in_block[:, :, None]
    kv = torch.where(valid, state_cache[bi, pi, cols], 0.0)
    score = torch.where(valid, state_cache[bi, pi, cols + state_width], float("-inf"))

    # Per-channel softmax over the window, accumulated in window order like the C++
    # (skipped entries there are exp(-inf) = 0 here: adding them is an exact no-op).
    e = _sleef_expf(score - score.amax(dim=0))
    acc = torch.zeros_like(e[0])
    denom = torch.zeros_like(e[0])
    for j in range(window):
        denom = denom + e[j]
        acc = _fma_f32(e[j], kv[j], acc)
    pooled = acc / denom  # [T, D]

    # RMSNorm: square sum accumulated per AVX-512 lane with FMA, then a tree reduce.
    lanes = pooled.view(-1, head_dim // _LANES, _LANES)
    sq = torch.zeros_like(lanes[:, 0])
    for j in range(lanes.shape[1]):
        sq = _fma_f32(lanes[:, j], lanes[:, j], sq)
    sq_sum = _lane_tree_sum(sq)
    eps = torch.tensor(rms_norm_eps, dtype=torch.float32)
    inv_rms = 1.0 / _sqrt_f32(sq_sum / head_dim + eps)
    normed = pooled * inv_rms[:, None] * rms_norm_weight.reshape(1, head_dim)

    # GPT-J (interleaved) RoPE at the group's first position, on the last 64 dims.
    compressed_pos = torch.div(positions, compress_ratio, rounding_mode="trunc") * compress_ratio
    cs = cos_sin_cache[compressed_pos]
    cos, sin = cs[:, : _ROPE_DIM // 2], cs[:, _ROPE_DIM // 2 : _ROPE_DIM]
    x = normed[:, head_dim - _ROPE_DIM :].reshape(-1, _ROPE_DIM // 2, 2)
    x_even, x_odd = x[..., 0], x[..., 1]
    out_even = _fma_f32(x_even, cos, x_odd * -sin)
    out_odd = _fma_f32(x_odd, cos, x_even * sin)
    roped = torch.stack([out_even, out_odd], dim=-1).reshape(-1, _ROPE_DIM)
    return normed, roped


def _boundary_tokens(
    positions: torch.Tensor, kv_slot_mapping: torch.Tensor, compress_ratio: int
) -> torch.Tensor:
    """Tokens that end a compression group and have a KV-cache slot (C `%` semantics)."""
    ends = torch.fmod(positions + 1, compress_ratio) == 0
    return torch.nonzero(ends & (kv_slot_mapping >= 0)).squeeze(1)


def _quantize_main(normed: torch.Tensor, roped: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8_ds_mla bytes for T tokens: ([T, 576] data, [T, 8] scales)."""
    nope = normed[:, :_MAIN_NOPE_DIM].to(torch.bfloat16).float()
    tiles = nope.view(-1, _MAIN_NOPE_DIM // _MAIN_QUANT_BLOCK, _MAIN_QUANT_BLOCK)
    amax = tiles.abs().amax(dim=-1)
    scale = torch.clamp(amax / _FP8_MAX, min=torch.tensor(_QUANT_EPS, dtype=torch.float32))
    exponent = _ceil_log2(scale)
    inv = 1.0 / _pow2(exponent)
    fp8 = _to_fp8_bytes((tiles * inv[..., None]).clamp(-_FP8_MAX, _FP8_MAX))
    rope = roped.to(torch.bfloat16).view(torch.uint8)
    data = torch.cat([fp8.reshape(-1, _MAIN_NOPE_DIM), rope], dim=1)
    scale_bytes = torch.remainder(exponent + 127, 256).to(torch.uint8)
    pad = torch.zeros_like(scale_bytes[:, :1])
    return data, torch.cat([scale_bytes, pad], dim=1)


def _quantize_indexer(
    normed: torch.Tensor, roped: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Indexer bytes for T tokens: ([T, 128] fp8 data, [T, 4] float32 scale)."""
    nope_dim = _INDEXER_HEAD_DIM - _ROPE_DIM
    full = torch.cat([normed[:, :nope_dim], roped], dim=1).to(torch.bfloat16).float()
    floor = torch.tensor(_QUANT_EPS, dtype=torch.float32)  # the C++ amax starts at 1e-4f
    absmax = torch.clamp(full.abs().amax(dim=-1), min=floor)
    scale = _pow2(_ceil_log2(absmax / _FP8_MAX))
    inv = 1.0 / scale
    fp8 = _to_fp8_bytes((full * inv[:, None]).clamp(-_FP8_MAX, _FP8_MAX))
    return fp8, scale[:, None].contiguous().view(torch.uint8)


def _compress_store(
    state_cache: torch.Tensor,
    gather_slots: torch.Tensor,
    positions: torch.Tensor,
    kv_slot_mapping: torch.Tensor,
    rms_norm_weight: torch.Tensor,
    rms_norm_eps: float,
    cos_sin_cache: torch.Tensor,
    kv_cache_2d: torch.Tensor,
    kv_cache_block_size: int,
    compress_ratio: int,
    head_dim: int,
) -> None:
    positions = positions.reshape(-1)
    kv_slot_mapping = kv_slot_mapping.reshape(-1)
    if head_dim == _MAIN_HEAD_DIM:
        quantize, token_bytes, scale_bytes = _quantize_main, _MAIN_TOKEN_BYTES, _MAIN_SCALE_BYTES
    else:
        quantize = _quantize_indexer
        token_bytes, scale_bytes = _INDEXER_HEAD_DIM, _INDEXER_SCALE_BYTES
    dev = kv_cache_2d.device
    data_cols = torch.arange(token_bytes, device=dev)
    scale_cols = kv_cache_block_size * token_bytes + torch.arange(scale_bytes, device=dev)

    tokens = _boundary_tokens(positions, kv_slot_mapping, compress_ratio)
    chunk = max(1, _CHUNK_ELEMENTS // (gather_slots.shape[1] * head_dim))
    for start in range(0, tokens.numel(), chunk):
        t = tokens[start : start + chunk]
        normed, roped = _pool_norm_rope(
            state_cache,
            gather_slots[t],
            positions[t],
            rms_norm_weight,
            rms_norm_eps,
            cos_sin_cache,
            compress_ratio,
            head_dim,
        )
        data, scales = quantize(normed, roped)
        slot = kv_slot_mapping[t]
        block_idx = torch.div(slot, kv_cache_block_size, rounding_mode="trunc")
        pos_in_block = slot - block_idx * kv_cache_block_size
        rows = block_idx[:, None]
        kv_cache_2d[rows, pos_in_block[:, None] * token_bytes + data_cols] = data
        kv_cache_2d[rows, pos_in_block[:, None] * scale_bytes + scale_cols] = scales


def compress_norm_rope_store_cpu(
    state_cache: torch.Tensor,
    gather_slots: torch.Tensor,
    positions: torch.Tensor,
    kv_slot_mapping: torch.Tensor,
    rms_norm_weight: torch.Tensor,
    rms_norm_eps: float,
    cos_sin_cache: torch.Tensor,
    kv_cache_2d: torch.Tensor,
    kv_cache_block_size: int,
    compress_ratio: int,
) -> None:
    """Main (head_dim 512) compressor: pool -> RMSNorm -> RoPE -> fp8_ds_mla store.

    For each token with `(position + 1) % compress_ratio == 0` and a KV slot >= 0:
    softmax over the window `gather_slots[t]` (state rows, -1 = skip) per channel,
    RMSNorm (fp32), GPT-J RoPE of dims 448:512 at position `pos // ratio * ratio`,
    then write into block `slot // block_size` of `kv_cache_2d` (uint8 rows):
    token bytes at `pos_in_block * 576` = 448 fp8 e4m3 NoPE values (7 tiles of 64,
    each scaled by a power of two) + 64 bf16 RoPE values; scale bytes at
    `block_size * 576 + pos_in_block * 8` = 7 UE8M0 exponents (+127) and a 0.
    Mirrors `compress_norm_rope_store_impl` in csrc/cpu/sgl-kernels/compressor.cpp.
    """
    _compress_store(
        state_cache,
        gather_slots,
        positions,
        kv_slot_mapping,
        rms_norm_weight,
        rms_norm_eps,
        cos_sin_cache,
        kv_cache_2d,
        kv_cache_block_size,
        compress_ratio,
        _MAIN_HEAD_DIM,
    )


def compress_norm_rope_store_indexer_cpu(
    state_cache: torch.Tensor,
    gather_slots: torch.Tensor,
    positions: torch.Tensor,
    kv_slot_mapping: torch.Tensor,
    rms_norm_weight: torch.Tensor,
    rms_norm_eps: float,
    cos_sin_cache: torch.Tensor,
    kv_cache_2d: torch.Tensor,
    kv_cache_block_size: int,
    compress_ratio: int,
) -> None:
    """Indexer (head_dim 128) compressor: pool -> RMSNorm -> RoPE -> fp8 store.

    Same pooling/RMSNorm/RoPE (dims 64:128) as `compress_norm_rope_store_cpu`; then
    the whole post-RoPE vector is rounded to bf16 and quantized to fp8 e4m3 with one
    power-of-two scale `2**ceil(log2(max(amax, 1e-4) / 448))`: 128 fp8 bytes at
    `pos_in_block * 128`, the scale as raw float32 at `block_size * 128 +
    pos_in_block * 4`. Mirrors `compress_norm_rope_store_indexer_impl` in
    csrc/cpu/sgl-kernels/compressor.cpp.
    """
    _compress_store(
        state_cache,
        gather_slots,
        positions,
        kv_slot_mapping,
        rms_norm_weight,
        rms_norm_eps,
        cos_sin_cache,
        kv_cache_2d,
        kv_cache_block_size,
        compress_ratio,
        _INDEXER_HEAD_DIM,
    )


_STORE_ARGS = (
    "(Tensor state_cache, Tensor gather_slots, Tensor positions, Tensor kv_slot_mapping, "
    "Tensor rms_norm_weight, float rms_norm_eps, Tensor cos_sin_cache, "
    "Tensor(a!) kv_cache_2d, int kv_cache_block_size, int compress_ratio) -> ()"
)

OPS: tuple[EagerOp, ...] = (
    EagerOp(
        "save_partial_states_cpu",
        "save_partial_states_cpu(Tensor kv, Tensor score, Tensor ape, Tensor positions, "
        "Tensor(a!) state_cache, Tensor slot_mapping) -> ()",
        save_partial_states_cpu,
    ),
    EagerOp(
        "compress_norm_rope_store_cpu",
        "compress_norm_rope_store_cpu" + _STORE_ARGS,
        compress_norm_rope_store_cpu,
    ),
    EagerOp(
        "compress_norm_rope_store_indexer_cpu",
        "compress_norm_rope_store_indexer_cpu" + _STORE_ARGS,
        compress_norm_rope_store_indexer_cpu,
    ),
)
