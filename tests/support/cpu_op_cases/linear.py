"""Cases for the packed-linear ops (model_overrides/kernels/cpu_ops/linear.py) against native `_C`.

DSV4's calls (vllm/models/deepseek_v4/cpu/cpu_sparse.py): `wo_a` dequantised to bf16 and
viewed [o_groups, o_lora, heads_per_group * head_dim] is packed once with
`convert_weight_packed`; per step `bmm_cpu(z [G, T, o_lora], o [G, T, K], packed, True, None)`.
Test model: G 2, o_lora 64, K 4 * 512; DSV4-Flash: G 8, o_lora 1024, K 8 * 512. T in {1, 5, 300}
(T <= 4 and T > 4 take different kernels: AVX512-BF16 dot products vs oneDNN brgemm).

Packing is compared byte for byte for every dtype the kernel packs (bf16, fp16, fp8_e4m3,
int8 with its s8s8 compensation, uint8 nibbles) and for the small-N fp32 form, including a
16-row tail block. GEMMs also cover bias, strided rows in and out, fp8 weights with a
per-tensor scale (as amx_mla.py uses bmm_cpu) and is_vnni=False. Left out because the
native op kills the process: fp16 GEMMs (the binary needs AMX-FP16 for them and aborts on
this CPU) and weight_packed_linear with M = 0 (SIGFPE); ours computes both.
"""

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from model_overrides.kernels.cpu_ops.linear import (
    bmm_cpu,
    convert_weight_packed,
    weight_packed_linear,
)
from tests.support.op_oracle import OpCase

TOKENS = (1, 5, 300)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """An integer view, so that equality is bitwise (fp8 has no torch.equal; NaN != NaN)."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def _weight(g: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.int8:
        return torch.randint(-128, 128, shape, generator=g, dtype=torch.int32).to(dtype)
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, generator=g, dtype=torch.int32).to(dtype)
    w = torch.randn(shape, generator=g)
    if dtype == torch.float8_e4m3fn:
        return (w * 64).clamp(-448, 448).to(dtype)  # normal and subnormal e4m3 values
    return (w / shape[-1] ** 0.5).to(dtype)


def _pack_outputs(args: tuple, ret: Any) -> dict[str, Any]:
    return {
        "packed": _bits(ret),
        "dtype": str(ret.dtype),
        "weight_after": _bits(args[0]),  # the schema says mutable; the kernel only reads
    }


def _pack(shape: tuple[int, ...], dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> OpCase:
    g = torch.Generator().manual_seed(seed)
    w = _weight(g, shape, dtype)
    return OpCase("convert_weight_packed", (w,), convert_weight_packed, _pack_outputs)


def _out(index: int) -> Callable[[tuple, Any], dict[str, Any]]:
    return lambda args, ret: {"out": args[index]}


def _linear(
    m: int,
    n: int,
    k: int,
    bias: bool = True,
    row_pad: int = 0,
    out_pad: int = 0,
    seed: int = 0,
) -> OpCase:
    """weight_packed_linear on a weight packed by the native op (in the child, before the
    case runs: both sides get the same packed tensor)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k + row_pad, generator=g).to(torch.bfloat16)[:, :k]
    w = _weight(g, (n, k), torch.bfloat16)
    b = torch.randn(n, generator=g) if bias else None
    out = torch.zeros(m, n + out_pad, dtype=torch.bfloat16)[:, :n]
    packed = torch.ops._C.convert_weight_packed(w)
    return OpCase("weight_packed_linear", (out, x, packed, b, True), weight_packed_linear, _out(0))


def _bmm(
    b: int,
    m: int,
    n: int,
    k: int,
    fp8_scale: float | None = None,
    is_vnni: bool = True,
    out_pad: int = 0,
    seed: int = 0,
) -> OpCase:
    g = torch.Generator().manual_seed(seed)
    # DSV4 builds mat1 as o.reshape(T, G, K).transpose(0, 1).contiguous()
    x = torch.randn(m, b, k, generator=g).to(torch.bfloat16).transpose(0, 1).contiguous()
    dtype = torch.bfloat16 if fp8_scale is None else torch.float8_e4m3fn
    w = _weight(g, (b, n, k), dtype)
    scale = None if fp8_scale is None else torch.tensor(fp8_scale)
    mat2 = torch.ops._C.convert_weight_packed(w) if is_vnni else w
    # DSV4's z is fresh; a strided out (last dim contiguous) is also allowed
    out = torch.zeros(b, m, n + out_pad, dtype=torch.bfloat16)[..., :n]
    return OpCase("bmm_cpu", (out, x, mat2, is_vnni, scale), bmm_cpu, _out(0))


CASES: dict[str, Callable[[], OpCase]] = {}

# convert_weight_packed: DSV4's wo_a (test model, DSV4-Flash), then every packed dtype.
CASES["pack_wo_a_test_model"] = partial(_pack, (2, 64, 2048))
CASES["pack_wo_a_dsv4_flash"] = partial(_pack, (8, 1024, 4096), seed=1)
for _dtype in (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.int8, torch.uint8):
    _name = str(_dtype).removeprefix("torch.")
    CASES[f"pack_{_name}_2d"] = partial(_pack, (64, 256), _dtype, seed=2)
    CASES[f"pack_{_name}_3d"] = partial(_pack, (3, 96, 64), _dtype, seed=3)
for _dtype in (torch.bfloat16, torch.float16, torch.float8_e4m3fn):  # 48 rows: 32 + 16
    CASES[f"pack_{str(_dtype).removeprefix('torch.')}_tail_block"] = partial(
        _pack, (2, 48, 96), _dtype, seed=4
    )
for _dtype in (torch.bfloat16, torch.int8, torch.float32):  # fewer than 16 rows: fp32 [K, N]
    CASES[f"pack_small_n_{str(_dtype).removeprefix('torch.')}"] = partial(
        _pack, (8, 100), _dtype, seed=5
    )

# weight_packed_linear (vLLM's packed linears: small router/gate weights on AMX CPUs).
for _m in (1, 4, 5, 300):
    CASES[f"linear_m{_m}"] = partial(_linear, _m, 64, 256, seed=_m)
CASES["linear_no_bias"] = partial(_linear, 7, 96, 512, bias=False, seed=6)
CASES["linear_tail_block"] = partial(_linear, 3, 48, 256, seed=7)
CASES["linear_strided"] = partial(_linear, 6, 64, 256, row_pad=32, out_pad=16, seed=8)
CASES["linear_router_256x256"] = partial(_linear, 300, 256, 256, seed=9)
for _m in (2, 7):  # N < 16: the fp32 [K, N] weight
    CASES[f"linear_small_n_m{_m}"] = partial(_linear, _m, 8, 100, seed=10 + _m)

# bmm_cpu: DSV4's wo_a projection, then the other paths.
for _t in TOKENS:
    CASES[f"bmm_wo_a_test_model_t{_t}"] = partial(_bmm, 2, _t, 64, 2048, seed=_t)
CASES["bmm_wo_a_dsv4_flash_t5"] = partial(_bmm, 8, 5, 1024, 4096, seed=20)
CASES["bmm_no_tokens"] = partial(_bmm, 2, 0, 64, 2048, seed=24)
CASES["bmm_not_vnni"] = partial(_bmm, 2, 5, 64, 2048, is_vnni=False, seed=21)
CASES["bmm_strided_out"] = partial(_bmm, 2, 5, 64, 256, out_pad=64, seed=22)
for _m in (3, 8):  # fp8 weight, per-tensor scale; a scale that is not a power of two
    CASES[f"bmm_fp8_m{_m}"] = partial(_bmm, 4, _m, 64, 512, fp8_scale=0.37, seed=23 + _m)
