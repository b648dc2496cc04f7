"""Eager mHC (multi-stream hyper-connection) ops: `hc_pre_fused_cpu`, `hc_post_fused_cpu`,
`hc_head_fused_cpu`.

Mirrors vLLM's `csrc/cpu/sgl-kernels/mhc.cpp`. The gate math is vLLM's plain-torch reference
(`vllm/model_executor/kernels/mhc/torch.py`) with the native kernel's fixed choices: one merged
`hc_eps` (pre-gate eps and Sinkhorn eps) and a post-gate multiplier of 2.0. All math is fp32;
outputs in `x.dtype` (bf16 or fp16) are rounded once, at the end, like the kernel. The
weighted stream sums follow the kernel's fp32 fused-multiply-add chain (see `_fma_sum`), so
given the same gates they are bit-identical to the kernel's.
"""

import functools
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import torch

from model_overrides.kernels.cpu_ops import EagerOp

_REFERENCE = "vllm.model_executor.kernels.mhc.torch"


@functools.cache
def _reference() -> ModuleType:
    """vLLM's plain-torch mHC reference module, without its package's side effects.

    Importing `vllm.model_executor.kernels.mhc` runs its `cpu.py`, which imports
    `vllm._custom_ops` and so loads a `_C*` kernel library chosen by CPU ISA. These ops must
    not do that (they run where a `_C*` library may already be loaded, e.g. the test oracle),
    so unless the package is already imported, `torch.py` (which imports only torch) is
    loaded from its file.
    """
    if _REFERENCE in sys.modules:
        return sys.modules[_REFERENCE]
    vllm_spec = importlib.util.find_spec("vllm")
    assert vllm_spec is not None and vllm_spec.origin is not None, "vllm is not installed"
    path = Path(vllm_spec.origin).parent / "model_executor" / "kernels" / "mhc" / "torch.py"
    spec = importlib.util.spec_from_file_location("_dsv4_vllm_mhc_torch_reference", path)
    assert spec is not None and spec.loader is not None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_streams(op: str, x: torch.Tensor) -> None:
    torch._check(
        x.dim() == 3 and x.dtype in (torch.bfloat16, torch.float16),
        lambda: f"{op}: x must be bf16/fp16 [T, hc, d]",
    )
    torch._check(x.size(1) >= 2, lambda: f"{op}: hc_mult must be >= 2")


def _fma_sum(terms: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """sum_k a_k * b_k (broadcast) in fp32 in the kernel's order: acc = a_0 * b_0, then
    acc = fma(a_k, b_k, acc) for k = 1, 2, ...

    `torch.addcmul` is a fused multiply-add in ATen's AVX2 and AVX-512 CPU kernels, so this is
    bit-identical to the kernel there (measured with ATEN_CPU_CAPABILITY=avx2 and avx512).
    ATen's non-SIMD build (capability "default") and summing rounded products instead
    differ from the kernel by 1 ulp in ~1 of 10^4 bf16 outputs.
    """
    (a, b), *rest = terms
    acc = a.float() * b.float()
    for a, b in rest:
        acc = torch.addcmul(acc, a.float(), b.float())
    return acc


def _collapse(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """sum_h gate[t, h] * x[t, h, :] (fp32 FMA chain, rounded once to x.dtype): [T, d]."""
    return _fma_sum((gate[:, h, None], x[:, h]) for h in range(x.size(1))).to(x.dtype)


def hc_pre_fused_cpu(
    x: torch.Tensor,
    hc_fn: torch.Tensor,
    hc_scale: torch.Tensor,
    hc_base: torch.Tensor,
    hc_mult: int,
    sinkhorn_iters: int,
    rms_eps: float,
    hc_eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """mHC pre block on x [T, hc, d]: returns (layer_input [T, d], post [T, hc], comb [T, hc, hc]).

    mixes = (x.flatten(1) @ hc_fn.T) / rms(x.flatten(1)); pre = sigmoid(...) + hc_eps;
    post = 2 * sigmoid(...); comb = Sinkhorn(softmax(...)) with eps hc_eps, `sinkhorn_iters`
    row+column passes (at least one, like the kernel); layer_input = sum_h pre_h * x_h.
    """
    _check_streams("hc_pre_fused_cpu", x)
    torch._check(x.size(1) == hc_mult, lambda: "hc_pre_fused_cpu: x must be [T, hc_mult, d]")
    post, comb, _, pre = _reference().mhc_pre_delayed_torch(
        x, hc_fn, hc_scale, hc_base, rms_eps, hc_eps, hc_eps, 2.0, sinkhorn_iters
    )
    return _collapse(x, pre), post.squeeze(-1).contiguous(), comb.contiguous()


def hc_pre_fused_cpu_fake(
    x: torch.Tensor,
    hc_fn: torch.Tensor,
    hc_scale: torch.Tensor,
    hc_base: torch.Tensor,
    hc_mult: int,
    sinkhorn_iters: int,
    rms_eps: float,
    hc_eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    t, _, d = x.shape
    return (
        x.new_empty((t, d)),
        x.new_empty((t, hc_mult), dtype=torch.float32),
        x.new_empty((t, hc_mult, hc_mult), dtype=torch.float32),
    )


def hc_post_fused_cpu(
    x: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor
) -> torch.Tensor:
    """mHC post block: out[t, j] = post[t, j] * x[t] + sum_i comb[t, i, j] * residual[t, i].

    x [T, d], residual [T, hc, d] (same dtype), post [T, hc] and comb [T, hc, hc] fp32;
    returns [T, hc, d] in x.dtype, accumulated in fp32 and rounded once.
    """
    torch._check(
        x.dim() == 2 and x.dtype in (torch.bfloat16, torch.float16),
        lambda: "hc_post_fused_cpu: x must be bf16/fp16 [T, d]",
    )
    torch._check(
        residual.dim() == 3 and residual.dtype == x.dtype,
        lambda: "hc_post_fused_cpu: residual must be same dtype as x [T, hc, d]",
    )
    # vLLM's `mhc_post_torch` is the same math, but sums in another order (1-ulp differences).
    terms = [(post.unsqueeze(-1), x.unsqueeze(1))]
    terms += [(comb[:, i, :, None], residual[:, i, None, :]) for i in range(residual.size(1))]
    return _fma_sum(terms).to(x.dtype)


def hc_post_fused_cpu_fake(
    x: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor
) -> torch.Tensor:
    t, d = x.shape
    return x.new_empty((t, residual.size(1), d))


def hc_head_fused_cpu(
    x: torch.Tensor,
    hc_fn: torch.Tensor,
    hc_scale: torch.Tensor,
    hc_base: torch.Tensor,
    hc_eps: float,
    norm_eps: float,
) -> torch.Tensor:
    """HC head: collapse x [T, hc, d] to [T, d] with gates from the RMS-normalised streams.

    gate = sigmoid((x.flatten(1) @ hc_fn.T) / rms(x.flatten(1)) * hc_scale + hc_base) + hc_eps,
    hc_fn [hc, hc * d], hc_scale [1], hc_base [hc] fp32; out = sum_h gate_h * x_h. Note the
    argument order (hc_eps, norm_eps): the reverse of the Python wrapper's.
    """
    _check_streams("hc_head_fused_cpu", x)
    flat = x.flatten(1).float()
    # The kernel adds per-block fp32 sums of squares and takes 1/sqrt in double; fp32 here
    # (like the pre reference) differs by fp32 rounding only.
    inv_rms = torch.rsqrt(flat.square().mean(dim=-1, keepdim=True) + norm_eps)
    mixes = (flat @ hc_fn.t()) * inv_rms
    gate = torch.sigmoid(mixes * hc_scale.reshape(1, 1) + hc_base) + hc_eps
    return _collapse(x, gate)


def hc_head_fused_cpu_fake(
    x: torch.Tensor,
    hc_fn: torch.Tensor,
    hc_scale: torch.Tensor,
    hc_base: torch.Tensor,
    hc_eps: float,
    norm_eps: float,
) -> torch.Tensor:
    t, _, d = x.shape
    return x.new_empty((t, d))


OPS: tuple[EagerOp, ...] = (
    EagerOp(
        "hc_pre_fused_cpu",
        "hc_pre_fused_cpu(Tensor x, Tensor hc_fn, Tensor hc_scale, Tensor hc_base, "
        "int hc_mult, int sinkhorn_iters, float rms_eps, float hc_eps) -> (Tensor, Tensor, Tensor)",
        hc_pre_fused_cpu,
        hc_pre_fused_cpu_fake,
    ),
    EagerOp(
        "hc_post_fused_cpu",
        "hc_post_fused_cpu(Tensor x, Tensor residual, Tensor post, Tensor comb) -> Tensor",
        hc_post_fused_cpu,
        hc_post_fused_cpu_fake,
    ),
    EagerOp(
        "hc_head_fused_cpu",
        "hc_head_fused_cpu(Tensor x, Tensor hc_fn, Tensor hc_scale, Tensor hc_base, "
        "float hc_eps, float norm_eps) -> Tensor",
        hc_head_fused_cpu,
        hc_head_fused_cpu_fake,
    ),
)
