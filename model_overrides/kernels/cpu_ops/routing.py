"""DSV4 MoE routing: `biased_topk_cpu` and `hash_topk_cpu`, in eager torch.

Mirrors vLLM's csrc/cpu/sgl-kernels/topk.cpp, bit for bit where that is testable:

- Scores use the kernel's fp32 formulas with its exact primitives: ATen's fast `exp_u20`
  (a polynomial with fused multiply-adds) and SLEEF's `logf_u10` (ATen's vectorised log),
  both replayed op by op with every FMA emulated exactly in fp64, and IEEE sqrt. torch's
  own exp/log/sqrt (MKL VML here) differ in the last bit, which would reorder near-ties.
- The top-k is `std::partial_sort` (libstdc++'s heap select, then heap sort) with a
  "greater score" comparator. With distinct scores that is simply the k largest in
  descending order; rows with tied (or NaN) scores among the k+1 largest replay the exact
  heap algorithm, because its tie-breaking depends on the heap's internal order (not on
  the expert index).
- Weights are summed in expert-slot order in fp32, like the kernel's scalar loops.
- A fused shared expert's id comes from the kernel's per-thread LCG, seeded by the first
  token of each `at::parallel_for` chunk; we replay that chunking with
  `torch.get_num_threads()` (with one shared expert the id is simply `num_experts`).
"""

import torch

from model_overrides.kernels.cpu_ops import EagerOp

# The kernel is only instantiated for these (num_experts -> routed top-k) pairs.
_BIASED_SHAPES = {64: (6, 8), 128: (6, 8), 256: (6, 8, 9), 384: (6, 8)}
_HASH_SHAPES = {64: (6, 7, 8), 128: (6, 7, 8), 256: (6, 7, 8), 384: (6, 7, 8)}


def _f32(x: float) -> float:
    """`x` rounded to fp32, as a Python float (the value of a C++ `float` literal)."""
    return float(torch.tensor(x, dtype=torch.float32))


def _bits(i: int) -> float:
    return float(torch.tensor([i], dtype=torch.int32).view(torch.float32))


# ATen vec512 `exp_u20` constants (torch/include/ATen/cpu/vec/vec512/vec512_float.h).
_LOG2E = _bits(0x3FB8AA3B)
_LN2 = _bits(0x3F317218)
_LN_FLT_MIN = _bits(0xC2AEAC50 - (1 << 32))
_LN_FLT_MAX = _bits(0x42B17218)
# SLEEF `xlogf_u1` constants (sleefsimdsp.c).
_LN2_HI = _f32(0.69314718246459960938)
_LN2_LO = _f32(-1.904654323148236017e-09)
_LOG_C = tuple(_f32(c) for c in (0.3027294874, 0.3996108174, 0.6666694880))
_POLY = tuple(_f32(c) for c in (0.00828929059, 0.0418978221, 0.166676521, 0.499991506, 0.999999701))


def _fma(a: torch.Tensor, b: torch.Tensor | float, c: torch.Tensor | float) -> torch.Tensor:
    """fp32 fused multiply-add, correctly rounded once (as `_mm512_fmadd_ps`).

    a*b of two fp32 values is exact in fp64; the fp64 sum's rounding error is recovered
    with TwoSum and folded in by round-to-odd, so the final fp64->fp32 rounding is exact.
    """
    p = a.double() * b
    c64 = c.double() if isinstance(c, torch.Tensor) else c
    s = p + c64
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)
    fix = (err != 0) & ((s.view(torch.int64) & 1) == 0)
    if bool(fix.any()):
        toward = torch.where(err > 0, float("inf"), float("-inf")).to(torch.float64)
        s = torch.where(fix, torch.nextafter(s, toward), s)
    return s.float()


def _exp_u20(x: torch.Tensor) -> torch.Tensor:
    """ATen's `Vectorized<float>::exp_u20` (vec512_float.h), bit for bit, on fp32."""
    below = x < _LN_FLT_MIN
    src = torch.where(x.isnan(), _LN_FLT_MAX, x.clamp(_LN_FLT_MIN, _LN_FLT_MAX))
    fx = _fma(src, _LOG2E, 0.5).floor()
    r = _fma(-fx, _LN2, src)
    res = _fma(r, _POLY[0], _POLY[1])
    for coef in (*_POLY[2:], 1.0):
        res = _fma(r, res, coef)
    two_pow = ((fx - 1).to(torch.int32) + 127).bitwise_left_shift(23).view(torch.float32)
    two_pow = torch.where(below, 0.0, two_pow)
    return res * two_pow * 2.0


def _getexp(x: torch.Tensor) -> torch.Tensor:
    """`_mm512_getexp_ps` for positive normal x: floor(log2(x)) as fp32."""
    return (((x.view(torch.int32) >> 23) & 0xFF) - 127).float()


def _getmant(x: torch.Tensor) -> torch.Tensor:
    """`_mm512_getmant_ps(x, _MM_MANT_NORM_p75_1p5, ...)` for positive normal x."""
    frac = x.view(torch.int32) & 0x7FFFFF
    exp = torch.where(frac >= 0x400000, 126, 127).to(torch.int32)
    return (frac | (exp << 23)).view(torch.float32)


def _two_sum(a: torch.Tensor, b: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
    """SLEEF `dfadd2_vf2_vf_vf`: fp32 a + b as an unevaluated (hi, lo) pair."""
    s = a + b
    v = s - a
    return s, (a - (s - v)) + (b - v)


def _log(d: torch.Tensor) -> torch.Tensor:
    """SLEEF `Sleef_logf16_u10` (ATen's `Vectorized<float>::log` on AVX-512), bit for bit,
    for fp32 d >= FLT_MIN: its double-float algorithm (AVX-512 getexp/getmant branch),
    every fused multiply-add emulated exactly. The kernel calls it only on 1 + e^x."""
    e = _getexp(d * _f32(1.0 / 0.75))  # (+inf's exponent field gives SLEEF's 128 too)
    m = _getmant(d)
    # s = (ln2_hi, ln2_lo) * e
    s_hi = e * _LN2_HI
    s_lo = _fma(torch.full_like(e, _LN2_LO), e, _fma(e, _LN2_HI, -s_hi))
    # x = (m - 1) / (m + 1), double-float division
    n_hi, n_lo = _two_sum(torch.full_like(m, -1.0), m)
    q_hi, q_lo = _two_sum(torch.ones_like(m), m)
    t = torch.ones_like(q_hi) / q_hi
    x_hi = n_hi * t
    u = _fma(t, n_hi, -x_hi)
    v = _fma(-q_lo, t, _fma(-q_hi, t, 1.0))
    x_lo = _fma(x_hi, v, _fma(n_lo, t, u))
    x2 = x_hi * x_hi
    poly = _fma(torch.full_like(x2, _LOG_C[0]), x2, _LOG_C[1])
    poly = _fma(poly, x2, _LOG_C[2])
    # s += 2x  (dfadd_vf2_vf2_vf2)
    a_hi, a_lo = x_hi * 2.0, x_lo * 2.0
    r_hi = s_hi + a_hi
    r_lo = (((s_hi - r_hi) + a_hi) + s_lo) + a_lo
    # s += x^3 * poly  (dfadd_vf2_vf2_vf)
    y = (x2 * x_hi) * poly
    f_hi = r_hi + y
    f_lo = ((r_hi - f_hi) + y) + r_lo
    return f_hi + f_lo


def _sqrt(x: torch.Tensor) -> torch.Tensor:
    """Correctly rounded fp32 sqrt (`_mm512_sqrt_ps`); torch's own may use MKL's VML,
    which is not. The fp64 square root of an fp32 value rounds to the exact fp32 result."""
    return x.double().sqrt().float()


def _sigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(x) / (1.0 + _exp_u20(-x))


def _sqrtsoftplus(x: torch.Tensor) -> torch.Tensor:
    """sqrt(softplus(x)), with the kernel's branches: x > 20 -> sqrt(x), x < -15 -> e^(x/2)."""
    out = _sqrt(torch.where(x > 20.0, x, _log(1.0 + _exp_u20(x))))
    low = x < -15.0
    if bool(low.any()):
        out[low] = _exp_u20(x[low] * 0.5)
    return out


def _lane_sum(x: torch.Tensor) -> torch.Tensor:
    """Row sums the kernel's way: 16 fp32 lanes accumulate in order over the row, then
    `_mm512_reduce_add_ps` folds the lanes in halves (8, 4, 2, 1)."""
    lanes = x.reshape(x.shape[0], -1, 16)
    acc = lanes[:, 0].clone()
    for d in range(1, lanes.shape[1]):
        acc = acc + lanes[:, d]
    while acc.shape[1] > 1:
        half = acc.shape[1] // 2
        acc = acc[:, half:] + acc[:, :half]
    return acc[:, 0]


def _softmax(x: torch.Tensor) -> torch.Tensor:
    e = _exp_u20(x - x.amax(dim=1, keepdim=True))
    inv = torch.ones(x.shape[0], 1, dtype=torch.float32) / _lane_sum(e)[:, None]
    return e * inv


def _seq_sum(w: torch.Tensor, end: int) -> torch.Tensor:
    """fp32 sum of w[:, :end], left to right (the kernel's scalar loop)."""
    acc = torch.zeros(w.shape[0], dtype=torch.float32)
    for j in range(end):
        acc = acc + w[:, j]
    return acc


def _heap_partial_sort(scores: list[float], k: int) -> list[int]:
    """libstdc++ `std::partial_sort(q, q + k, q + n, greater-score)` on (score, index)
    pairs; returns the first k indices. Replayed step by step because its order among
    equal scores depends on the heap's layout."""
    a = [(s, i) for i, s in enumerate(scores)]

    def adjust(hole: int, length: int, value: tuple[float, int]) -> None:
        top, child = hole, hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if a[child][0] > a[child - 1][0]:
                child -= 1
            a[hole] = a[child]
            hole = child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            a[hole] = a[child - 1]
            hole = child - 1
        parent = (hole - 1) // 2
        while hole > top and a[parent][0] > value[0]:
            a[hole] = a[parent]
            hole = parent
            parent = (hole - 1) // 2
        a[hole] = value

    if k >= 2:  # make_heap
        for parent in range((k - 2) // 2, -1, -1):
            adjust(parent, k, a[parent])
    for i in range(k, len(a)):  # heap select
        if a[i][0] > a[0][0]:
            value, a[i] = a[i], a[0]
            adjust(0, k, value)
    for last in range(k - 1, 0, -1):  # sort_heap
        value, a[last] = a[last], a[0]
        adjust(0, last, value)
    return [i for _, i in a[:k]]


def _topk_ids(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Expert ids [T, k] (int64) in the order `std::partial_sort` leaves them."""
    n = scores.shape[1]
    vals, ids = torch.topk(scores, min(k + 1, n), dim=1, sorted=True)
    ids = ids[:, :k].clone()
    tied = (vals[:, 1:] == vals[:, :-1]).any(dim=1) | scores.isnan().any(dim=1)
    for row in tied.nonzero().flatten().tolist():
        ids[row] = torch.tensor(_heap_partial_sort(scores[row].tolist(), k))
    return ids


_LCG_A = 6364136223846793005
_LCG_C = 1442695040888963407
_U64 = (1 << 64) - 1


def _shared_expert_ids(num_tokens: int, base: int, num_shared: int) -> torch.Tensor:
    """The kernel's random fused-shared-expert id per token: an LCG per parallel_for
    chunk, seeded from the chunk's first token and stepped once per token."""
    if num_shared == 1:
        return torch.full((num_tokens,), base, dtype=torch.int32)
    threads = torch.get_num_threads()
    chunk = num_tokens
    if num_tokens > 1 and threads > 1:
        chunk = -(-num_tokens // threads)
    ids = []
    for begin in range(0, num_tokens, chunk):
        state = (begin * _LCG_A + _LCG_C) & _U64
        for _ in range(begin, min(begin + chunk, num_tokens)):
            state = (state * _LCG_A + _LCG_C) & _U64
            ids.append(base + (state >> 33) % num_shared)
    return torch.tensor(ids, dtype=torch.int32)


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise RuntimeError(msg)


def biased_topk_cpu(
    hidden_states: torch.Tensor,
    gating_output: torch.Tensor,
    correction_bias: torch.Tensor,
    topk: int,
    renormalize: bool,
    scoring_func: str,
    num_fused_shared_experts: int,
    routed_scaling_factor: float | None,
    apply_routed_scaling_factor_on_output: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat DSV4 top-k: select by score + correction_bias, weight by the unbiased score.

    scoring_func "sigmoid" or "sqrtsoftplus". With fused shared experts the last slot gets
    a shared expert id (>= num_experts) and weight sum(routed) / routed_scaling_factor.
    renormalize divides the routed weights by their sum (times routed_scaling_factor when
    apply_routed_scaling_factor_on_output; a missing factor counts as 0, as in the kernel).
    """
    num_tokens, num_experts = hidden_states.shape[0], gating_output.shape[1]
    _check(gating_output.shape[0] == num_tokens, "Number of tokens mismatch")
    _check(correction_bias.numel() == num_experts, "Bias shape mismatch")
    _check(scoring_func in ("sigmoid", "sqrtsoftplus"), f"Unsupported scoring_func: {scoring_func}")
    routed_topk = topk - num_fused_shared_experts
    _check(
        routed_topk in _BIASED_SHAPES.get(num_experts, ()),
        f"biased_topk_cpu: unsupported num_experts {num_experts} / routed_topk {routed_topk}",
    )
    factor = 0.0 if routed_scaling_factor is None else routed_scaling_factor

    x = gating_output.float()
    scores = _sigmoid(x) if scoring_func == "sigmoid" else _sqrtsoftplus(x)
    ids = _topk_ids(scores + correction_bias.float().reshape(1, -1), topk)
    weights = scores.gather(1, ids)
    ids = ids.to(torch.int32)

    shared = num_fused_shared_experts > 0
    if shared:
        ids[:, -1] = _shared_expert_ids(num_tokens, num_experts, num_fused_shared_experts)
        if _f32(factor) != 0.0:
            weights[:, -1] = _seq_sum(weights, topk - 1) / factor
    if renormalize:
        end = topk - 1 if shared else topk
        scale = torch.ones(num_tokens, dtype=torch.float32) / _seq_sum(weights, end)
        if apply_routed_scaling_factor_on_output:
            scale = scale * factor
        weights[:, :end] *= scale[:, None]
        if shared:
            weights[:, -1] *= scale
    return weights.to(hidden_states.device), ids.to(hidden_states.device)


def hash_topk_cpu(
    gating_output: torch.Tensor,
    tid2eid: torch.Tensor,
    topk: int,
    scoring_func: str,
    num_fused_shared_experts: int,
    num_experts: int,
    routed_scaling_factor: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hash-routed DSV4 layers: expert ids are the rows of tid2eid [T, routed_topk] (int32),
    weights their scores. scoring_func "softmax" (weights are the raw probabilities),
    "sigmoid" or "sqrtsoftplus" (routed weights renormalised to sum to 1, times
    routed_scaling_factor when no shared expert is fused). A fused shared expert takes the
    last slot with weight sum(routed) / routed_scaling_factor.
    """
    num_tokens = gating_output.shape[0]
    routed_topk = topk - num_fused_shared_experts
    _check(tid2eid.shape[0] == num_tokens, "tid2eid row count must match num_tokens")
    _check(tid2eid.shape[1] == routed_topk, "tid2eid column count must match routed_topk")
    _check(tid2eid.dtype == torch.int32, "tid2eid must be int32")
    _check(gating_output.shape[1] == num_experts, "num_experts mismatch")
    funcs = ("softmax", "sigmoid", "sqrtsoftplus")
    _check(scoring_func in funcs, f"Unsupported scoring_func: {scoring_func}")
    _check(
        gating_output.dtype in (torch.bfloat16, torch.float16, torch.float32),
        f"Unsupported dtype for hash_topk_cpu: {gating_output.dtype}",
    )
    _check(
        routed_topk in _HASH_SHAPES.get(num_experts, ()),
        f"hash_topk_cpu: unsupported num_experts {num_experts} / routed_topk {routed_topk}",
    )

    x = gating_output.float()
    if scoring_func == "softmax":
        scores = _softmax(x)
    else:
        scores = _sigmoid(x) if scoring_func == "sigmoid" else _sqrtsoftplus(x)
    # The kernel leaves slots routed_topk .. topk-2 (2+ shared experts) unwritten; zeros here.
    weights = torch.zeros(num_tokens, topk, dtype=torch.float32)
    ids = torch.zeros(num_tokens, topk, dtype=torch.int32)
    ids[:, :routed_topk] = tid2eid
    weights[:, :routed_topk] = scores.gather(1, tid2eid.long())

    if scoring_func != "softmax":
        total = _seq_sum(weights, routed_topk)
        scale = torch.ones(num_tokens, dtype=torch.float32) / total
        if num_fused_shared_experts == 0:
            scale = scale * routed_scaling_factor
        scale = torch.where(total > 0, scale, 1.0)
        weights[:, :routed_topk] *= scale[:, None]
    if num_fused_shared_experts > 0:
        ids[:, -1] = _shared_expert_ids(num_tokens, num_experts, num_fused_shared_experts)
        weights[:, -1] = _seq_sum(weights, routed_topk) / routed_scaling_factor
    return weights.to(gating_output.device), ids.to(gating_output.device)


def _biased_fake(hidden_states: torch.Tensor, gating_output: torch.Tensor, *args):
    n, topk = hidden_states.shape[0], args[1]
    return (
        hidden_states.new_empty((n, topk), dtype=torch.float32),
        hidden_states.new_empty((n, topk), dtype=torch.int32),
    )


def _hash_fake(gating_output: torch.Tensor, tid2eid: torch.Tensor, topk: int, *args):
    n = gating_output.shape[0]
    return (
        gating_output.new_empty((n, topk), dtype=torch.float32),
        gating_output.new_empty((n, topk), dtype=torch.int32),
    )


OPS: tuple[EagerOp, ...] = (
    EagerOp(
        "hash_topk_cpu",
        "hash_topk_cpu(Tensor gating_output, Tensor tid2eid, int topk, str scoring_func, "
        "int num_fused_shared_experts, int num_experts, float routed_scaling_factor) "
        "-> (Tensor, Tensor)",
        hash_topk_cpu,
        _hash_fake,
    ),
    EagerOp(
        "biased_topk_cpu",
        "biased_topk_cpu(Tensor hidden_states, Tensor gating_output, Tensor correction_bias, "
        "int topk, bool renormalize, str scoring_func, int num_fused_shared_experts, "
        "float? routed_scaling_factor, bool apply_routed_scaling_factor_on_output) "
        "-> (Tensor, Tensor)",
        biased_topk_cpu,
        _biased_fake,
    ),
)
