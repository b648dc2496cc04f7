"""Cases for the mHC ops (model_overrides/kernels/cpu_ops/mhc.py) against native `_C`.

Shapes: hc_mult 4, 20 Sinkhorn iterations, eps 1e-6 (the test model's config), T in
{1, 7, 300} (300 spans several of the kernel's 32-token blocks), hidden 256 (test model) and
4096 (DSV4-Flash). Weights either all zero (the test model's hc_fn/hc_base) or random with
real-checkpoint magnitudes (gate logits of order 1). Edge cases: a sharp gate scale, one
Sinkhorn pass (and 0, which the kernel also runs as one), large distinct eps values, fp16
streams and a hidden size that is not a multiple of the kernel's 32-lane vectors.
"""

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from model_overrides.kernels.cpu_ops.mhc import (
    hc_head_fused_cpu,
    hc_post_fused_cpu,
    hc_pre_fused_cpu,
)
from tests.support.op_oracle import OpCase

HC = 4
SINKHORN = 20
EPS = 1e-6
TOKENS = (1, 7, 300)
HIDDEN = (256, 4096)


def _streams(g: torch.Generator, t: int, d: int, dtype: torch.dtype) -> torch.Tensor:
    """Residual streams [t, HC, d]; magnitudes vary per token and stream like real ones."""
    scale = torch.exp(torch.randn(t, HC, 1, generator=g))
    return (torch.randn(t, HC, d, generator=g) * scale).to(dtype)


def _weights(
    g: torch.Generator, rows: int, d: int, kind: str, n_scale: int, gain: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(hc_fn [rows, HC*d], hc_scale [n_scale], hc_base [rows]), fp32."""
    if kind == "zero":  # the test model's checkpoint
        return (
            torch.zeros(rows, HC * d),
            torch.rand(n_scale, generator=g) + 0.5,
            torch.zeros(rows),
        )
    fn = torch.randn(rows, HC * d, generator=g) / (HC * d) ** 0.5
    scale = (torch.rand(n_scale, generator=g) + 0.5) * gain
    base = torch.randn(rows, generator=g)
    return fn, scale, base


def _pre(
    t: int,
    d: int,
    kind: str,
    seed: int,
    dtype: torch.dtype = torch.bfloat16,
    iters: int = SINKHORN,
    gain: float = 1.0,
    rms_eps: float = EPS,
    hc_eps: float = EPS,
) -> OpCase:
    g = torch.Generator().manual_seed(seed)
    x = _streams(g, t, d, dtype)
    fn, scale, base = _weights(g, (2 + HC) * HC, d, kind, 3, gain)
    return OpCase(
        "hc_pre_fused_cpu",
        (x, fn, scale, base, HC, iters, rms_eps, hc_eps),
        hc_pre_fused_cpu,
        lambda args, ret: {"y": ret[0], "post": ret[1], "comb": ret[2]},
    )


def _post(t: int, d: int, seed: int, dtype: torch.dtype = torch.bfloat16) -> OpCase:
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(t, d, generator=g) * 4).to(dtype)
    residual = _streams(g, t, d, dtype)
    post = 2 * torch.rand(t, HC, generator=g)  # 2 * sigmoid(.)
    comb = torch.rand(t, HC, HC, generator=g) ** 3  # roughly doubly stochastic
    for _ in range(5):
        comb = comb / comb.sum(-1, keepdim=True)
        comb = comb / comb.sum(-2, keepdim=True)
    return OpCase(
        "hc_post_fused_cpu",
        (x, residual, post, comb.contiguous()),
        hc_post_fused_cpu,
        lambda args, ret: {"out": ret},
    )


def _head(
    t: int,
    d: int,
    kind: str,
    seed: int,
    dtype: torch.dtype = torch.bfloat16,
    hc_eps: float = EPS,
    norm_eps: float = EPS,
) -> OpCase:
    g = torch.Generator().manual_seed(seed)
    x = _streams(g, t, d, dtype)
    fn, scale, base = _weights(g, HC, d, kind, 1)
    return OpCase(
        "hc_head_fused_cpu",
        (x, fn, scale, base, hc_eps, norm_eps),
        hc_head_fused_cpu,
        lambda args, ret: {"y": ret},
    )


def _cases() -> dict[str, Callable[[], OpCase]]:
    cases: dict[str, Callable[[], Any]] = {}
    seed = 0
    for d in HIDDEN:
        for t in TOKENS:
            for kind in ("zero", "rand"):
                seed += 1
                cases[f"pre_{kind}_t{t}_d{d}"] = partial(_pre, t, d, kind, seed)
                seed += 1
                cases[f"head_{kind}_t{t}_d{d}"] = partial(_head, t, d, kind, seed)
            seed += 1
            cases[f"post_t{t}_d{d}"] = partial(_post, t, d, seed)
    cases["pre_sharp_t7_d256"] = partial(_pre, 7, 256, "rand", 101, gain=8.0)
    cases["pre_one_sinkhorn_pass_t7_d256"] = partial(_pre, 7, 256, "rand", 102, iters=1)
    cases["pre_sinkhorn_iters_0_t7_d256"] = partial(_pre, 7, 256, "rand", 109, iters=0)
    # Large, distinct eps values, so a swapped or misplaced eps shows.
    for kind, seed in (("zero", 110), ("rand", 111)):
        cases[f"pre_{kind}_distinct_eps_t7_d256"] = partial(
            _pre, 7, 256, kind, seed, rms_eps=1.0, hc_eps=1e-2
        )
        cases[f"head_{kind}_distinct_eps_t7_d256"] = partial(
            _head, 7, 256, kind, seed + 10, hc_eps=1e-2, norm_eps=1.0
        )
    cases["pre_fp16_t7_d256"] = partial(_pre, 7, 256, "rand", 103, torch.float16)
    cases["pre_odd_hidden_t33_d200"] = partial(_pre, 33, 200, "rand", 104)
    cases["post_fp16_t7_d256"] = partial(_post, 7, 256, 105, torch.float16)
    cases["post_odd_hidden_t33_d200"] = partial(_post, 33, 200, 106)
    cases["head_fp16_t7_d256"] = partial(_head, 7, 256, "rand", 107, torch.float16)
    cases["head_odd_hidden_t33_d200"] = partial(_head, 33, 200, "rand", 108)
    return cases


CASES: dict[str, Callable[[], OpCase]] = _cases()
