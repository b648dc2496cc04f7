"""Packed-weight GEMMs: `convert_weight_packed`, `weight_packed_linear`, `bmm_cpu`, in eager torch.

Mirrors vLLM's csrc/cpu/sgl-kernels/gemm.cpp (packing, `weight_packed_linear`) and bmm.cpp /
gemm_fp8.cpp (`bmm_cpu`). `convert_weight_packed` reproduces the native packed layout byte
for byte, so a weight packed by either side works with either side's GEMMs:

- bf16 / fp16 / fp8_e4m3: each block of 32 output rows (the last may have 16),
  [n, K] -> VNNI-2 [K/2, n, 2], written where the block's rows were.
- int8: VNNI-4 [K/4, 32, 4] per 32-row block, followed by the block's 32 int32 s8s8
  compensations (128 * row sum); rows grow to K + 4 bytes.
- uint8 (two 4-bit values per byte, mxfp4 / int4): per 32-row block and byte column k,
  the 64 nibbles (row-major, low nibble first) are re-paired as (nibble n, nibble n + 32).
- a 2-D weight with fewer than 16 rows is returned as fp32 [K, N] (weight.t()), which
  `weight_packed_linear` then multiplies in fp32.

The GEMMs accumulate in fp32 (the kernels use AVX512-BF16 dot products or oneDNN brgemm,
both fp32-accumulating, in their own order) and round once to the output dtype; bias (fp32)
is added before that rounding.
"""

import torch

from model_overrides.kernels.cpu_ops import EagerOp

TILE_N = 16  # gemm.h
TILE_K = 32
BLOCK_N = 32  # block_size_n(): rows per packed block
_TINY_M = 4  # bmm's fp8 path uses brgemm only for M > 4 (gemm.h can_use_brgemm)

_VNNI2 = (torch.bfloat16, torch.float16, torch.float8_e4m3fn)


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise RuntimeError(msg)


def _blocks(n: int) -> list[tuple[int, int]]:
    """(start, size) of the 32-row blocks of n rows."""
    return [(s, min(BLOCK_N, n - s)) for s in range(0, n, BLOCK_N)]


def _vnni_pack(w: torch.Tensor, vnni: int) -> torch.Tensor:
    """[..., N, K] -> each 32-row block as [K/vnni, rows, vnni], same overall shape."""
    *lead, n, k = w.shape
    parts = [
        w[..., s : s + rows, :]
        .reshape(*lead, rows, k // vnni, vnni)
        .transpose(-3, -2)
        .reshape(*lead, rows, k)
        for s, rows in _blocks(n)
    ]
    return torch.cat(parts, dim=-2)


def _vnni_unpack(p: torch.Tensor, vnni: int) -> torch.Tensor:
    """Inverse of `_vnni_pack`."""
    *lead, n, k = p.shape
    parts = [
        p[..., s : s + rows, :]
        .reshape(*lead, k // vnni, rows, vnni)
        .transpose(-3, -2)
        .reshape(*lead, rows, k)
        for s, rows in _blocks(n)
    ]
    return torch.cat(parts, dim=-2)


def _pack_int8(w: torch.Tensor) -> torch.Tensor:
    *lead, n, k = w.shape
    _check(n % BLOCK_N == 0, f"Expected N == BLOCK_N in pack_vnni<int8_t> (out features {n})")
    data = _vnni_pack(w, 4).reshape(*lead, n // BLOCK_N, BLOCK_N * k)
    comp = (w.to(torch.int32).sum(dim=-1, dtype=torch.int32) * 128).reshape(*lead, -1, BLOCK_N)
    comp = comp.contiguous().view(torch.int8)  # 32 x int32, little endian
    return torch.cat([data, comp], dim=-1).reshape(*lead, n, k + 4)


def _pack_uint8(w: torch.Tensor) -> torch.Tensor:
    *lead, n, k = w.shape
    parts = []
    for s, rows in _blocks(n):
        blk = w[..., s : s + rows, :]
        # nibbles[k, 2 * row + j]: low (j = 0) and high (j = 1) half of byte (row, k)
        nib = torch.stack([blk & 0xF, blk >> 4], dim=-1).transpose(-3, -2)
        nib = nib.reshape(*lead, k, 2 * rows)
        if rows < BLOCK_N:  # the kernel reads past 2 * rows here (uninitialised): zeros
            nib = torch.cat([nib, nib.new_zeros(*lead, k, 2 * (BLOCK_N - rows))], dim=-1)
        packed = (nib[..., BLOCK_N : BLOCK_N + rows] << 4) | nib[..., :rows]
        parts.append(packed.reshape(*lead, rows, k))
    return torch.cat(parts, dim=-2)


def convert_weight_packed(weight: torch.Tensor) -> torch.Tensor:
    """Pack a [OC, IC] or [E, OC, IC] weight for the sgl-kernel GEMMs (layouts above)."""
    _check(weight.is_contiguous(), "weight must be contiguous")
    ndim = weight.dim()
    _check(ndim in (2, 3), f"expect weight to be 2d or 3d, got {ndim}d tensor.")
    if ndim == 2 and weight.shape[0] < TILE_N:
        return weight.float().t().contiguous()
    dtype = weight.dtype
    oc, ic = weight.shape[-2:]
    actual_ic = ic * 2 if dtype == torch.uint8 else ic
    _check(oc % TILE_N == 0, f"invalid weight out features {oc}")
    _check(actual_ic % TILE_K == 0, f"invalid weight input features {actual_ic}")
    if dtype in _VNNI2:
        # bit-level copy: fp8 has no arithmetic here, so move its bytes as uint8
        raw = weight.view(torch.uint8) if dtype == torch.float8_e4m3fn else weight
        return _vnni_pack(raw, 2).view(dtype)
    if dtype == torch.int8:
        return _pack_int8(weight)
    if dtype == torch.uint8:
        return _pack_uint8(weight)
    raise RuntimeError(
        "expect weight to be bfloat16, float16, int8, fp8_e4m3 or uint8(mxfp4 or int4)."
    )


def _unpack_float(packed: torch.Tensor) -> torch.Tensor:
    """A VNNI-2 packed bf16/fp16 weight back as fp32 [..., N, K]."""
    return _vnni_unpack(packed, 2).float()


def weight_packed_linear(
    out: torch.Tensor,
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    bias: torch.Tensor | None,
    is_vnni: bool,
) -> None:
    """out[M, N] = mat1[M, K] @ W.T (+ bias, fp32), W = mat2 unpacked; a fp32 mat2 is the
    small-N form, W.T itself ([K, N]). The native op rejects is_vnni=False."""
    _check(is_vnni, "Expected is_vnni to be true, but got false.")  # the binary requires it
    packed = mat2
    _check(mat1.dim() == 2 and packed.dim() == 2, "mat1 / mat2 must be 2D tensors")
    _check(mat1.stride(-1) == 1, "mat1 must be contiguous in the last dimension")
    _check(mat1.dtype in (torch.bfloat16, torch.float16), f"unsupported dtype {mat1.dtype}")
    if packed.dtype == torch.float32:
        w_t = packed  # [K, N]
    else:
        _check(packed.dtype == mat1.dtype, "mat1 and mat2 dtypes differ")
        w_t = _unpack_float(packed).t()
    _check(w_t.shape[0] == mat1.shape[1], "mat1 and mat2 shapes cannot be multiplied")
    acc = mat1.float() @ w_t
    if bias is not None:
        acc = acc + bias.float()
    out.copy_(acc)


def bmm_cpu(
    out: torch.Tensor,
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    is_vnni: bool,
    scale: torch.Tensor | None,
) -> None:
    """out[B, M, N] = mat1[B, M, K] @ W[b].T, W = mat2 [B, N, K] unpacked (packed first
    when not is_vnni). With `scale` (0-dim fp32), mat2 is fp8_e4m3 and the fp32 result is
    multiplied by it before rounding."""
    packed = mat2 if is_vnni else convert_weight_packed(mat2)
    _check(mat1.stride(-1) == 1 and out.stride(-1) == 1, "last dim must be contiguous")
    _check(out.dim() == 3 and mat1.dim() == 3 and packed.dim() == 3, "expect 3D tensors")
    b, m, k = mat1.shape
    n = packed.shape[1]
    _check(n % 32 == 0, "tinygemm requires N to be 32x.")
    _check(packed.shape[0] == b and packed.shape[2] == k, "bmm: mat2 shape mismatch!")
    _check(out.shape[0] == b and out.shape[1] == m, "bmm: out shape mismatch!")
    if scale is None:
        _check(mat1.dtype in (torch.bfloat16, torch.float16), f"unsupported dtype {mat1.dtype}")
        acc = torch.bmm(mat1.float(), _unpack_float(packed).transpose(1, 2))
    else:
        _check(scale.dim() == 0, "bmm: expect scale to be 0-dim tensor.")
        w = _vnni_unpack(packed.view(torch.uint8), 2).view(torch.float8_e4m3fn).float()
        acc = torch.bmm(mat1.float(), w.transpose(1, 2)) * scale.float()
    out.copy_(acc)


def _convert_fake(weight: torch.Tensor) -> torch.Tensor:
    if weight.dim() == 2 and weight.shape[0] < TILE_N:
        return weight.new_empty((weight.shape[1], weight.shape[0]), dtype=torch.float32)
    if weight.dtype == torch.int8:
        return weight.new_empty((*weight.shape[:-1], weight.shape[-1] + 4))
    return torch.empty_like(weight)


OPS: tuple[EagerOp, ...] = (
    # The native schema prints as `Tensor($0! -> ) weight` (vLLM registers it as
    # `Tensor! weight`: mutable, in an anonymous alias set, though the C++ only reads it).
    # `Tensor! weight` is the spelling that parses to that same schema.
    EagerOp(
        "convert_weight_packed",
        "convert_weight_packed(Tensor! weight) -> Tensor",
        convert_weight_packed,
        _convert_fake,
    ),
    EagerOp(
        "weight_packed_linear",
        "weight_packed_linear(Tensor(a0!) out, Tensor(a1) mat1, Tensor(a2) mat2, "
        "Tensor(a3)? bias, bool is_vnni) -> ()",
        weight_packed_linear,
    ),
    EagerOp(
        "bmm_cpu",
        "bmm_cpu(Tensor(a!) out, Tensor mat1, Tensor mat2, bool is_vnni, Tensor? scale) -> ()",
        bmm_cpu,
    ),
)
