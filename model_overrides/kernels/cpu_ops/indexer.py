"""Eager sparse-attention indexer ops: `fused_indexer_q_rope_quant_cpu`,
`fp8_paged_mqa_logits_cpu`, `topk_transform_512_cpu`.

Mirror vLLM's `csrc/cpu/sgl-kernels/indexer.cpp`, `paged_mqa_logits.cpp` and `topk.cpp`
(the last op is at the end of that file). The indexer scores every cached (compressed) key
of a request for each query token, `sum_h w_h * relu(q_h . k) * k_scale`, and keeps the 512
best keys per query token.

Indexer K-cache page layout (written by `compress_norm_rope_store_indexer_cpu`,
compressor.cpp): a page of `block_size` tokens is `block_size * 128` fp8 e4m3 bytes (token
major), then `block_size` raw fp32 scales (one per token, a power of two); pages may sit
further apart than their byte width (`kvcache_fp8.stride(0)`, one layer of a pooled
allocation).
"""

import math

import torch

from model_overrides.kernels.cpu_ops import EagerOp

_FP8_MAX = 448.0
_INDEX_HEAD_DIM = 128
_TOPK = 512
# Work-block cap, in elements: (query rows x heads x keys) float64 dots scored at once
# (128 MiB), (rows x keys) in the top-k masks; long prefills and contexts go in pieces.
_SCORE_BLOCK = 1 << 24


def fused_indexer_q_rope_quant_cpu(
    positions: torch.Tensor,
    index_q: torch.Tensor,
    index_q_cos_sin_cache: torch.Tensor,
    index_q_fp8: torch.Tensor,
    index_weights: torch.Tensor,
    index_weights_softmax_scale: float,
    index_weights_head_scale: float,
    index_weights_out: torch.Tensor,
) -> None:
    """RoPE + per-(token, head) fp8 quantisation of the indexer query (indexer.cpp).

    `index_q` [T, H, D] fp32: the leading `D - rot` dims pass through, the last `rot` get
    GPT-J (interleaved pair) RoPE at `positions` with `cos_sin_cache[pos] = [cos | sin]`,
    computed as `fma(x_even, cos, -(x_odd * sin))` / `fma(x_odd, cos, x_even * sin)` and
    rounded to bf16. One power-of-two scale per (token, head),
    `2^ceil(log2(max(1e-4, amax) / 448))`, over all D dims; `index_q_fp8` gets
    `clamp(x / scale, +-448)` in e4m3 and `index_weights_out` gets
    `((w * scale) * softmax_scale) * head_scale`, all fp32.
    """
    torch._check(
        positions.dim() == 1 and positions.dtype == torch.int64,
        lambda: "fused_indexer_q_rope_quant_cpu: positions must be a 1D int64 tensor",
    )
    torch._check(
        index_q.dim() == 3 and index_q.dtype == torch.float32,
        lambda: "fused_indexer_q_rope_quant_cpu: index_q must be a 3D float32 tensor",
    )
    torch._check(
        index_q_cos_sin_cache.dim() == 2 and index_q_cos_sin_cache.dtype == torch.float32,
        lambda: "fused_indexer_q_rope_quant_cpu: index_q_cos_sin_cache must be 2D float32",
    )
    torch._check(
        index_q_fp8.shape == index_q.shape and index_q_fp8.dtype == torch.float8_e4m3fn,
        lambda: "fused_indexer_q_rope_quant_cpu: index_q_fp8 must be float8_e4m3fn like index_q",
    )
    torch._check(
        index_weights.dim() == 2 and index_weights.dtype == torch.float32,
        lambda: "fused_indexer_q_rope_quant_cpu: index_weights must be a 2D float32 tensor",
    )
    torch._check(
        index_weights_out.shape == index_weights.shape and index_weights_out.dtype == torch.float32,
        lambda: "fused_indexer_q_rope_quant_cpu: index_weights_out must match index_weights",
    )
    num_tokens, num_heads, head_dim = index_q.shape
    half = index_q_cos_sin_cache.size(-1) // 2
    rot = 2 * half
    nope = head_dim - rot
    torch._check(
        head_dim % 16 == 0 and nope % 16 == 0 and half % 16 == 0,
        lambda: (
            "fused_indexer_q_rope_quant_cpu: head_dim, head_dim-rot_dim, and rot_dim/2 "
            "must be multiples of 16"
        ),
    )
    if num_tokens == 0:
        return

    q = index_q
    cos_sin = index_q_cos_sin_cache[positions]  # [T, rot]
    cos = cos_sin[:, None, :half].double()
    sin = cos_sin[:, None, half:rot]
    pairs = q[..., nope:].reshape(num_tokens, num_heads, half, 2)
    x_even, x_odd = pairs[..., 0], pairs[..., 1]
    # The kernel's fma: the fp32 product x * cos is exact in float64 and the other term is
    # an fp32 product rounded on its own, so one float64 add and a rounding to fp32 give
    # the fused result (bar a double rounding, ~2^-29 likely per element).
    rot_even = (x_even.double() * cos + (-(x_odd * sin)).double()).float()
    rot_odd = (x_odd.double() * cos + (x_even * sin).double()).float()
    roped = torch.stack((rot_even, rot_odd), dim=-1).reshape(num_tokens, num_heads, rot)
    roped = roped.bfloat16().float()

    amax = torch.maximum(q[..., :nope].abs().amax(-1), roped.abs().amax(-1))
    amax = amax.clamp_min(1e-4)  # the kernel's running max starts at 1e-4
    # std::log2 on a float is glibc's log2f, correctly rounded in practice: the float64
    # log2 rounded to fp32 is that value (it matters when amax / 448 lies just above a
    # power of two and log2f rounds down onto the integer).
    ratio = amax / _FP8_MAX
    exponent = torch.ceil(torch.log2(ratio.double()).float())
    scale = torch.exp2(exponent)
    inv_scale = 1.0 / scale

    values = torch.cat((q[..., :nope], roped), dim=-1)
    scaled = (values * inv_scale[..., None]).clamp(-_FP8_MAX, _FP8_MAX)
    index_q_fp8.copy_(scaled.to(torch.float8_e4m3fn))

    w = index_weights * scale
    w = w * torch.tensor(index_weights_softmax_scale, dtype=torch.float32)
    w = w * torch.tensor(index_weights_head_scale, dtype=torch.float32)
    index_weights_out.copy_(w)


def _fp8_as_kernel_reads(raw: torch.Tensor) -> torch.Tensor:
    """uint8 e4m3 bytes -> float64, as vec.h's `CVT_FP8_TO_BF16` decodes them: exact for
    every finite value (subnormals included); the NaN encodings 0x7f/0xff read as +-480."""
    values = raw.view(torch.float8_e4m3fn).double()
    nan = values.isnan()
    if bool(nan.any()):
        signed = torch.where(raw >= 0x80, -480.0, 480.0).to(values.dtype)
        values = torch.where(nan, signed, values)
    return values


def fp8_paged_mqa_logits_cpu(
    q_fp8: torch.Tensor,
    kvcache_fp8: torch.Tensor,
    weight: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    block_size: int,
    max_seq_len: int,
) -> torch.Tensor:
    """Indexer logits over a paged fp8 K-cache (paged_mqa_logits.cpp).

    For row b (one query token) and cached token t < min(seq_lens[b], max_seq_len):
    `logits[b, t] = (sum_h weight[b, h] * relu(q_fp8[b, h] . k_t)) * k_scale_t`, where k_t
    and k_scale_t are read from page `page_table[b, t // block_size]`, slot
    `t % block_size`. Returns fp32 [B, max_seq_len]; the kernel leaves t >= seq_len
    unwritten (its only consumer, `topk_transform_512_cpu`, never reads them), here -inf.

    Numerics: the kernel's dot (`dot_fp8_128`) sums the 128 exact fp8 products in 16 fp32
    lanes (bf16 dot-product instructions) and tree-adds the lanes; here the dot is exact
    (float64: every product is a multiple of 2^-18 below 2^18, so 128 of them sum exactly)
    and rounded to fp32 once. The rest follows the kernel's rounding points: relu, a chain
    of fp32 fmas over the heads in head order, then an fp32 product with k_scale. Measured
    against the kernel on indexer-like inputs, ~0.5% of logits differ, by 1 fp32 ulp.
    (Reproducing the lane and tree roundings too brings that to ~0.01% but needs the 16
    lane sums of every dot materialised, several times slower.)
    """
    torch._check(
        q_fp8.dim() == 3 and q_fp8.dtype == torch.float8_e4m3fn,
        lambda: "fp8_paged_mqa_logits_cpu: q_fp8 must be a 3D float8_e4m3fn tensor",
    )
    torch._check(
        q_fp8.size(2) == _INDEX_HEAD_DIM,
        lambda: "fp8_paged_mqa_logits_cpu: q_fp8 head_dim must be 128",
    )
    torch._check(
        kvcache_fp8.dim() == 2 and kvcache_fp8.dtype == torch.uint8,
        lambda: "fp8_paged_mqa_logits_cpu: kvcache_fp8 must be a 2D uint8 tensor",
    )
    torch._check(block_size > 0, lambda: "fp8_paged_mqa_logits_cpu: block_size must be > 0")
    torch._check(
        kvcache_fp8.size(1) >= block_size * (_INDEX_HEAD_DIM + 4),
        lambda: "fp8_paged_mqa_logits_cpu: kvcache_fp8 page byte width too small",
    )
    batch, heads = q_fp8.shape[:2]
    torch._check(
        weight.dtype == torch.float32 and tuple(weight.shape) == (batch, heads),
        lambda: "fp8_paged_mqa_logits_cpu: weight must be a 2D fp32 tensor [batch, heads]",
    )
    torch._check(
        seq_lens.dim() == 1 and seq_lens.size(0) == batch,
        lambda: "fp8_paged_mqa_logits_cpu: seq_lens must be a 1D tensor [batch]",
    )
    torch._check(
        page_table.dim() == 2 and page_table.size(0) == batch,
        lambda: "fp8_paged_mqa_logits_cpu: page_table must be a 2D tensor [batch, pages]",
    )
    torch._check(max_seq_len >= 0, lambda: "fp8_paged_mqa_logits_cpu: max_seq_len < 0")

    logits = torch.full((batch, max_seq_len), -math.inf, dtype=torch.float32)
    if batch == 0 or max_seq_len == 0:
        return logits
    lens = seq_lens.to(torch.int64).clamp(0, max_seq_len)
    scale_start = block_size * _INDEX_HEAD_DIM
    q = _fp8_as_kernel_reads(q_fp8.view(torch.uint8))  # [B, H, 128] float64
    w = weight.double()
    # Rows with identical page-table rows read the same keys (a prefill request's tokens
    # are consecutive rows with the same row): score each such run against its keys once.
    _, counts = torch.unique_consecutive(page_table, dim=0, return_counts=True)
    first = 0
    for count in counts.tolist():
        rows = slice(first, first + count)
        first += count
        length = int(lens[rows].max())
        if length == 0:
            continue
        pages = page_table[rows.start, : -(-length // block_size)].to(torch.int64)
        blocks = kvcache_fp8[pages]  # [pages, page bytes]
        keys = blocks[:, :scale_start].reshape(-1, _INDEX_HEAD_DIM)[:length]
        keys_t = _fp8_as_kernel_reads(keys).T
        k_scale = blocks[:, scale_start : scale_start + 4 * block_size].contiguous()
        k_scale = k_scale.view(torch.float32).reshape(-1)[:length]
        step_rows = max(1, min(count, _SCORE_BLOCK // (heads * length)))
        step_keys = max(1, min(length, _SCORE_BLOCK // (heads * step_rows)))
        for r0 in range(rows.start, rows.stop, step_rows):
            r1 = min(rows.stop, r0 + step_rows)
            for t0 in range(0, length, step_keys):
                t1 = min(length, t0 + step_keys)
                dots = torch.matmul(q[r0:r1], keys_t[:, t0:t1]).float().clamp_min(0.0)
                score = torch.zeros(r1 - r0, t1 - t0, dtype=torch.float32)
                for h in range(heads):  # fp32 fma chain, one rounding per head
                    score = (score.double() + dots[:, h].double() * w[r0:r1, h, None]).float()
                logits[r0:r1, t0:t1] = score * k_scale[t0:t1]
    tokens = torch.arange(max_seq_len)
    return logits.masked_fill_(tokens[None, :] >= lens[:, None], -math.inf)


def fp8_paged_mqa_logits_cpu_fake(
    q_fp8: torch.Tensor,
    kvcache_fp8: torch.Tensor,
    weight: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    block_size: int,
    max_seq_len: int,
) -> torch.Tensor:
    return q_fp8.new_empty((q_fp8.size(0), max_seq_len), dtype=torch.float32)


def topk_transform_512_cpu(
    scores: torch.Tensor,
    seq_lens: torch.Tensor,
    page_tables: torch.Tensor,
    out_page_indices: torch.Tensor,
    page_size: int,
    out_raw_indices: torch.Tensor | None,
) -> None:
    """Top-512 keys per row, as raw positions and as page-table slots (topk.cpp).

    Row b looks at `n = clamp(seq_lens[b], 0, scores.size(1))` scores. If n <= 512 the
    selection is positions 0..n-1 in order, then -1 padding. Otherwise it is the set the
    kernel's streaming min-heap keeps (see `_heap_top512`). Slot j of `out_raw_indices`
    gets raw position i, slot j of `out_page_indices` gets
    `(page_tables[b, i >> log2(page_size)] << log2(page_size)) | (i & (page_size - 1))`,
    as int32; -1 slots stay -1 in both. Only the first 512 columns are written.

    Order for n > 512: the kernel writes its heap array as is, an order libstdc++'s heap
    algorithm fixes but nothing downstream uses (attention over the selected keys is
    order-free up to fp32 summation order); here it is ascending position.
    """
    torch._check(scores.dtype == torch.float32, lambda: "scores must be float32")
    torch._check(out_page_indices.dtype == torch.int32, lambda: "out_page_indices must be int32")
    torch._check(scores.dim() == 2, lambda: "scores must be a 2D tensor")
    torch._check(seq_lens.dim() == 1, lambda: "seq_lens must be a 1D tensor")
    torch._check(page_tables.dim() == 2, lambda: "page_tables must be a 2D tensor")
    torch._check(out_page_indices.dim() == 2, lambda: "out_page_indices must be a 2D tensor")
    batch, max_seq_len = scores.shape
    torch._check(seq_lens.size(0) == batch, lambda: "seq_lens row count must match scores")
    torch._check(page_tables.size(0) == batch, lambda: "page_tables row count must match")
    torch._check(out_page_indices.size(0) == batch, lambda: "out_page_indices rows must match")
    torch._check(
        out_page_indices.size(1) >= _TOPK,
        lambda: "out_page_indices must have at least 512 columns",
    )
    if out_raw_indices is not None:
        torch._check(out_raw_indices.dtype == torch.int32, lambda: "out_raw_indices must be int32")
        torch._check(
            out_raw_indices.shape == out_page_indices.shape,
            lambda: "out_raw_indices shape must match out_page_indices",
        )
    if batch == 0:
        return
    torch._check(page_size > 0, lambda: "page_size must be positive")
    torch._check(page_size & (page_size - 1) == 0, lambda: "page_size must be a power of 2")
    page_bits = page_size.bit_length() - 1

    lens = seq_lens.to(torch.int64).clamp(0, max_seq_len)
    slots = torch.arange(_TOPK)
    raw = torch.where(slots[None, :] < lens[:, None], slots[None, :], -1)  # n <= 512 rows
    long_rows = (lens > _TOPK).nonzero().flatten()
    step = max(1, _SCORE_BLOCK // max(1, max_seq_len))  # bounds the masks' memory
    # split() of an empty tensor yields one empty chunk, and topk(512) of a row narrower
    # than 512 raises even with no rows: skip the loop when every row is short.
    for chunk in long_rows.split(step) if long_rows.numel() else ():
        raw[chunk] = _heap_top512(scores[chunk], lens[chunk])

    valid = raw >= 0
    pos = raw.clamp_min(0)
    if page_tables.size(1) == 0:  # every slot is -1 then
        physical = torch.zeros_like(pos)
    else:
        physical = page_tables.to(torch.int64).gather(1, pos >> page_bits)
    paged = (physical << page_bits) | (pos & (page_size - 1))
    out_page_indices[:, :_TOPK] = torch.where(valid, paged, -1).to(torch.int32)
    if out_raw_indices is not None:
        out_raw_indices[:, :_TOPK] = raw.to(torch.int32)


def _heap_top512(scores: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """The positions the kernel's min-heap keeps for rows longer than 512, ascending.

    The kernel heaps positions 0..511, then for i = 512..n-1 replaces the heap's minimum
    when `scores[i]` is strictly larger. The minimum is the lowest score, among equal
    scores the LOWEST position (comparator: `a < b` iff a.score > b.score, or equal scores
    and a.index > b.index). An equal score never enters (i is larger than every position in
    the heap). The heap always holds the 512 largest scores of the prefix seen so far, so
    with m the row's 512th largest score: every position scoring above m is kept; of those
    scoring exactly m, the ones that entered are those at or before T, the first position
    where the prefix holds 512 scores >= m (before T the heap minimum is below m, so they
    enter and are not evicted; after it they tie and do not enter); each later
    above-m arrival then evicts the lowest such position, so the highest-positioned
    `512 - #(> m)` of them stay. (NaN scores, which the kernel's comparisons treat
    inconsistently, are not modelled.)
    """
    rows, width = scores.shape
    positions = torch.arange(width)
    valid = positions[None, :] < lens[:, None]
    masked = scores.masked_fill(~valid, -math.inf)
    m = masked.topk(_TOPK, dim=1).values[:, -1:]  # 512th largest (values with multiplicity)
    above = valid & (scores > m)
    at_m = valid & (scores == m)
    reached = torch.cumsum(above | at_m, dim=1, dtype=torch.int32) >= _TOPK
    first_full = reached.to(torch.int8).argmax(dim=1, keepdim=True)  # T
    entered = at_m & (positions[None, :] <= first_full)
    keep = _TOPK - above.sum(dim=1, keepdim=True)
    # Rank of each entered position counted from the right; keep the `keep` highest.
    from_right = entered.flip(1).cumsum(1, dtype=torch.int32).flip(1)
    chosen = above | (entered & (from_right <= keep))
    return chosen.nonzero()[:, 1].view(rows, _TOPK)


OPS: tuple[EagerOp, ...] = (
    EagerOp(
        "fused_indexer_q_rope_quant_cpu",
        "fused_indexer_q_rope_quant_cpu(Tensor positions, Tensor index_q, "
        "Tensor index_q_cos_sin_cache, Tensor(a!) index_q_fp8, Tensor index_weights, "
        "float index_weights_softmax_scale, float index_weights_head_scale, "
        "Tensor(b!) index_weights_out) -> ()",
        fused_indexer_q_rope_quant_cpu,
    ),
    EagerOp(
        "fp8_paged_mqa_logits_cpu",
        "fp8_paged_mqa_logits_cpu(Tensor q_fp8, Tensor kvcache_fp8, Tensor weight, "
        "Tensor seq_lens, Tensor page_table, int block_size, int max_seq_len) -> Tensor",
        fp8_paged_mqa_logits_cpu,
        fp8_paged_mqa_logits_cpu_fake,
    ),
    EagerOp(
        "topk_transform_512_cpu",
        "topk_transform_512_cpu(Tensor scores, Tensor seq_lens, Tensor page_tables, "
        "Tensor(a!) out_page_indices, int page_size, Tensor(b!)? out_raw_indices) -> ()",
        topk_transform_512_cpu,
    ),
)
