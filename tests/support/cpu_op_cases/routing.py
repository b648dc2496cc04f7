"""Cases for the routing ops (model_overrides/kernels/cpu_ops/routing.py) against native `_C`.

DSV4's calls (vllm/model_executor/layers/fused_moe/router/cpu_router.py): fp32 router logits
[T, 256], fp32 correction bias, "sqrtsoftplus", top-6 (test model) or top-8, renormalize,
routed_scaling_factor 1.5 (test model) or 2.5, no fused shared expert; hash layers pass
tid2eid[input_ids] (int32 [T, topk]). T in {1, 5, 300}: 300 tokens span both threads'
`parallel_for` chunks. Beyond that: "sigmoid"/"softmax", bf16/fp16 logits, the other
(num_experts, top-k) pairs the kernel instantiates, 1 and 2 fused shared experts (2 draws
the kernel's per-chunk random ids), renormalize / scaling off, logits past the
sqrtsoftplus branch points (-15, 20), and heavy ties (integer logits, zero or repeated
bias) where the top-k order is libstdc++'s heap order rather than by index.
"""

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from model_overrides.kernels.cpu_ops.routing import biased_topk_cpu, hash_topk_cpu
from tests.support.op_oracle import OpCase

TOKENS = (1, 5, 300)


def _outputs(args: tuple, ret: Any) -> dict[str, Any]:
    return {"weights": ret[0], "ids": ret[1]}


def _defined_slots(shared: int) -> Callable[[tuple, Any], dict[str, Any]]:
    """hash_topk_cpu never writes slots routed_topk .. topk-2 (there are some only with
    2+ fused shared experts): compare the routed slots and the shared slot."""

    def outputs(args: tuple, ret: Any) -> dict[str, Any]:
        keep = [*range(args[1].shape[1]), ret[0].shape[1] - 1]
        return {"weights": ret[0][:, keep], "ids": ret[1][:, keep]}

    return outputs if shared > 1 else _outputs


def _logits(g: torch.Generator, t: int, e: int, kind: str) -> torch.Tensor:
    if kind == "normal":  # router logits of real magnitude
        return torch.randn(t, e, generator=g) * 2
    if kind == "wide":  # both sqrtsoftplus cut-offs and exp_u20's clamps
        return torch.rand(t, e, generator=g) * 130 - 90
    if kind == "ties":  # few distinct values: ties inside and at the edge of the top-k
        return torch.randint(-3, 3, (t, e), generator=g).float()
    raise ValueError(kind)


def _bias(g: torch.Generator, e: int, kind: str) -> torch.Tensor:
    if kind == "random":  # like the test checkpoint's gate.bias
        return torch.randn(e, generator=g) * 0.1
    if kind == "zero":
        return torch.zeros(e)
    if kind == "groups":  # 8 distinct values: more ties on top of tied logits
        return (torch.arange(e) % 8).float() * 0.25
    raise ValueError(kind)


def _biased(
    t: int,
    topk: int = 6,
    e: int = 256,
    func: str = "sqrtsoftplus",
    rsf: float | None = 1.5,
    logits: str = "normal",
    bias: str = "random",
    dtype: torch.dtype = torch.float32,
    bias_dtype: torch.dtype = torch.float32,
    renormalize: bool = True,
    apply_rsf: bool = True,
    shared: int = 0,
    seed: int = 0,
) -> OpCase:
    g = torch.Generator().manual_seed(seed)
    x = _logits(g, t, e, logits).to(dtype)
    b = _bias(g, e, bias).to(bias_dtype)
    args = (x, x, b, topk, renormalize, func, shared, rsf, apply_rsf)
    return OpCase("biased_topk_cpu", args, biased_topk_cpu, _outputs)


def _hash(
    t: int,
    topk: int = 6,
    e: int = 256,
    func: str = "sqrtsoftplus",
    rsf: float = 1.5,
    logits: str = "normal",
    dtype: torch.dtype = torch.float32,
    shared: int = 0,
    seed: int = 0,
) -> OpCase:
    g = torch.Generator().manual_seed(seed)
    x = _logits(g, t, e, logits).to(dtype)
    tid2eid = torch.randint(0, e, (t, topk - shared), generator=g, dtype=torch.int32)
    if t > 1:
        tid2eid[1] = tid2eid[1, 0]  # the same expert in every slot
    args = (x, tid2eid, topk, func, shared, e, rsf)
    return OpCase("hash_topk_cpu", args, hash_topk_cpu, _defined_slots(shared))


CASES: dict[str, Callable[[], OpCase]] = {}

# DSV4 as called: sqrtsoftplus, fp32 logits and bias, renormalize, scaling on the output.
for _t in TOKENS:
    for _k, _rsf in ((6, 1.5), (8, 2.5)):
        CASES[f"biased_dsv4_t{_t}_k{_k}"] = partial(_biased, _t, _k, rsf=_rsf, seed=_t + _k)
        CASES[f"hash_dsv4_t{_t}_k{_k}"] = partial(_hash, _t, _k, rsf=_rsf, seed=_t + _k)

CASES["biased_no_tokens"] = partial(_biased, 0, 6)
CASES["hash_no_tokens"] = partial(_hash, 0, 6)

# Ties: top-k order and membership among equal scores.
for _bias_kind in ("zero", "groups"):
    for _k in (6, 8):
        CASES[f"biased_ties_{_bias_kind}_k{_k}"] = partial(
            _biased, 300, _k, logits="ties", bias=_bias_kind, seed=_k
        )
CASES["biased_ties_sigmoid"] = partial(
    _biased, 300, 8, func="sigmoid", logits="ties", bias="zero", seed=3
)

# Scoring functions, dtypes and branch points.
CASES["biased_sigmoid"] = partial(_biased, 300, 8, func="sigmoid", rsf=2.5, seed=4)
CASES["biased_wide_logits"] = partial(_biased, 300, 8, logits="wide", seed=5)
CASES["biased_wide_sigmoid"] = partial(_biased, 300, 6, func="sigmoid", logits="wide", seed=6)
CASES["biased_bf16"] = partial(_biased, 300, 6, dtype=torch.bfloat16, seed=7)
CASES["biased_bf16_bf16bias"] = partial(
    _biased, 5, 8, dtype=torch.bfloat16, bias_dtype=torch.bfloat16, seed=8
)
CASES["hash_softmax"] = partial(_hash, 300, 8, func="softmax", seed=9)
CASES["hash_sigmoid"] = partial(_hash, 300, 6, func="sigmoid", rsf=2.5, seed=10)
CASES["hash_wide_logits"] = partial(_hash, 300, 6, logits="wide", seed=11)
CASES["hash_bf16"] = partial(_hash, 300, 6, dtype=torch.bfloat16, seed=12)
CASES["hash_fp16_softmax"] = partial(_hash, 5, 7, func="softmax", dtype=torch.float16, seed=13)

# Flags.
CASES["biased_no_renorm"] = partial(_biased, 300, 8, renormalize=False, seed=14)
CASES["biased_rsf_not_on_output"] = partial(_biased, 5, 6, apply_rsf=False, seed=15)
CASES["biased_rsf_none"] = partial(_biased, 5, 6, rsf=None, apply_rsf=False, seed=16)

# Fused shared experts (never on DSV4's CPU path, supported by the kernel).
for _shared in (1, 2):
    for _t in (5, 300):
        CASES[f"biased_shared{_shared}_t{_t}"] = partial(
            _biased, _t, 6 + _shared, shared=_shared, seed=17 + _t
        )
        CASES[f"hash_shared{_shared}_t{_t}"] = partial(
            _hash, _t, 6 + _shared, shared=_shared, seed=18 + _t
        )
CASES["hash_shared1_softmax"] = partial(_hash, 300, 8, func="softmax", shared=1, seed=19)
CASES["biased_shared1_no_renorm"] = partial(_biased, 300, 7, shared=1, renormalize=False, seed=20)

# The other expert counts / top-k the kernel instantiates.
for _e, _ks in ((64, (6, 8)), (128, (6, 8)), (256, (9,)), (384, (6, 8))):
    for _k in _ks:
        CASES[f"biased_e{_e}_k{_k}"] = partial(_biased, 300, _k, e=_e, seed=_e + _k)
for _e, _k in ((64, 7), (128, 8), (256, 7), (384, 6)):
    CASES[f"hash_e{_e}_k{_k}"] = partial(_hash, 300, _k, e=_e, seed=_e + _k)
