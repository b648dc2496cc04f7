"""Compile jobs: what one worker process compiles, described so another process can redo it.

Two kinds, each read from vLLM's own objects so the jobs are the keys vLLM's warm-up would
compile (vLLM 0.34 source, ``vllm/model_executor/warmup/``):
- ``jit_key``: one key of a kernel in the runner's ``JitWarmupRegistry`` (TileLang's mHC
  kernels and vLLM's other JIT owners). The registry expands each registration through
  ``kernel.get_warmup_keys``; a worker builds the kernel's class anew (``VllmJitKernel``
  takes no arguments) and calls ``compile(key)``, which writes the tool's disk cache.
- ``fp8_gemm_nt``: one FP8 weight shape of DeepGEMM's dense GEMM and a run of its M values
  (``deep_gemm_warmup._deep_gemm_linear_data`` and ``_get_fp8_gemm_nt_m_values`` pick them,
  as DeepGEMM's own warm-up does); a worker allocates tensors of that layout and calls
  ``vllm.utils.deep_gemm.fp8_gemm_nt`` once per M, which JIT-compiles each config.
- ``hc_prenorm_gemm``: one kernel of DeepGEMM's mHC pre-norm GEMM (``tf32_hc_prenorm_gemm``).
  DeepGEMM specializes it on N, K and the split-K count alone
  (``csrc/jit_kernels/impls/sm90_tf32_hc_prenorm_gemm.hpp``); vLLM picks the count from the
  batch's token count and the GPU's SM count (``kernels/mhc/tilelang.py``,
  ``compute_num_split``), so prefill chunks past the CUDA-graph sizes reach counts that no
  warm-up compiles: each was a stall in traffic. The jobs are every count a batch of
  up to ``max_num_batched_tokens`` tokens can take, for each mix shape the model holds.
- ``o_proj_einsum``: DeepSeek-V4's grouped output projection (``wo_a``), an FP8 batched
  GEMM through DeepGEMM's ``fp8_einsum`` (``models/deepseek_v4/nvidia/ops/o_proj.py``,
  ``deep_gemm_fp8_o_proj``) that no warm-up of vLLM's runs. DeepGEMM picks its block
  config from the token count, so a prefill chunk of a new size compiled one while
  serving (a TTFT stall, docs/cold-start.md). A worker runs vLLM's own o_proj at every token
  count of its run, up to ``max_num_batched_tokens``: every count, not vLLM's relaxed M
  list, whose wave model is the dense GEMM's and leaves out the group count.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass, field, replace
from typing import Any, Literal

JobKind = Literal["jit_key", "fp8_gemm_nt", "hc_prenorm_gemm", "o_proj_einsum"]
# DeepGEMM M values per job: a weight shape has ~100-400 of them at 2-5 s each.
GEMM_M_PER_JOB = 8
# DeepGEMM's mHC GEMM: its M block (the token tile vLLM's split count is computed over)
# and its bounds on N (``n <= 32 and n % 8 == 0``) and K (``k % 64 == 0``).
HC_BLOCK = 64
# The model's mHC mix weights (``models/deepseek_v4/nvidia/model.py``): the attention and
# FFN mixes over hc_mult copies of the hidden state, and the first layer's broadcast mix.
HC_MIX_ATTRS = ("hc_attn_fn", "hc_ffn_fn", "hc_attn_fn_broadcast")
# Token counts per o_proj job: one call each is cheap, and a config DeepGEMM picks over a
# run of counts is compiled once per run, so longer runs repeat fewer compiles.
O_PROJ_M_PER_JOB = 512


@dataclass(frozen=True)
class CompileJob:
    kind: JobKind
    owner: str  # "module:QualName" of the kernel class, or the GEMM's weight shape
    payload: bytes  # the pickled key, or the pickled GEMM case
    label: str = ""  # for logs: the key's repr, cut

    def fingerprint(self) -> str:
        return hashlib.sha256(f"{self.kind}|{self.owner}|".encode() + self.payload).hexdigest()


@dataclass(frozen=True)
class GemmCase:
    """A DeepGEMM dense FP8 GEMM: the weight and scale layouts and the M values to run."""

    n: int
    k: int
    weight_stride: tuple[int, ...]
    weight_dtype: str
    scale_shape: tuple[int, ...]
    scale_stride: tuple[int, ...]
    scale_dtype: str
    block_m: int
    m_values: tuple[int, ...]
    device_index: int


@dataclass(frozen=True)
class HcPrenormCase:
    """One mHC pre-norm GEMM kernel: the mix's N and K, the split count and a token count
    that takes it."""

    n: int
    k: int
    num_splits: int
    tokens: int
    device_index: int


@dataclass(frozen=True)
class TensorLayout:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str

    @classmethod
    def of(cls, tensor: Any) -> TensorLayout:
        return cls(tuple(tensor.shape), tuple(tensor.stride()), str(tensor.dtype).split(".")[-1])

    def zeros(self, device: Any) -> Any:
        """A zero tensor of this layout (FP8 zeros by way of a byte view: the scales'
        UE8M0 packing asserts zero sign and mantissa bits, as DeepGEMM's warm-up notes)."""
        import torch

        out = torch.empty_strided(
            self.shape, self.stride, dtype=getattr(torch, self.dtype), device=device
        )
        # One-byte types (FP8 among them) through a byte view: the zero bit pattern.
        (out.view(torch.uint8) if out.element_size() == 1 else out).zero_()
        return out


@dataclass(frozen=True)
class OProjCase:
    """One attention layout's grouped ``wo_a`` projection and a run of token counts: what
    ``deep_gemm_fp8_o_proj`` takes from the layer (``nvidia/flashmla.py``, ``_o_proj``)."""

    n_groups: int
    heads_per_group: int
    nope_dim: int
    rope_dim: int
    o_lora_rank: int
    einsum_recipe: tuple[int, int, int]
    tma_aligned_scales: bool
    weight: TensorLayout
    scale_name: str  # the scale's attribute on wo_a, as the function looks it up
    scale: TensorLayout
    cos_sin_cache: TensorLayout
    m_values: tuple[int, ...]
    device_index: int

    def layout(self) -> OProjCase:
        return replace(self, m_values=(), device_index=0)

    def call_kwargs(self) -> dict[str, Any]:
        return {
            "n_groups": self.n_groups,
            "heads_per_group": self.heads_per_group,
            "nope_dim": self.nope_dim,
            "rope_dim": self.rope_dim,
            "o_lora_rank": self.o_lora_rank,
            "einsum_recipe": self.einsum_recipe,
            "tma_aligned_scales": self.tma_aligned_scales,
        }


@dataclass
class JobResult:
    index: int
    ok: bool
    seconds: float
    kind: str = ""
    error: str = ""


@dataclass
class JobSet:
    jobs: list[CompileJob] = field(default_factory=list)
    # Kernels whose keys could not be described for another process (their class needs
    # constructor arguments or a key does not pickle): vLLM's warm-up compiles them itself.
    left_to_vllm: list[str] = field(default_factory=list)


def owner_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def _rebuildable(kernel: Any) -> bool:
    """Whether a worker can build the kernel's class with no arguments, as this one was."""
    import inspect

    try:
        params = inspect.signature(type(kernel)).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(
        p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params
    )


def registry_jobs(registry: Any, vllm_config: Any, out: JobSet) -> None:
    """One job per key the registry's warm-up would compile (``JitWarmupRegistry.warmup``
    expands registrations the same way: ``vllm_config`` for a bare registration)."""
    import inspect

    for kernel, registrations in registry._registrations.items():
        owner = owner_name(kernel)
        if not _rebuildable(kernel):
            out.left_to_vllm.append(owner)
            continue
        keys: dict[Any, None] = {}
        for args, kwargs in registrations:
            params = inspect.signature(kernel.get_warmup_keys).parameters
            if not args and not kwargs and "vllm_config" in params:
                kwargs = {"vllm_config": vllm_config}
            for key in kernel.get_warmup_keys(*args, **kwargs):
                keys[key] = None
        try:
            payloads = [(pickle.dumps(key), repr(key)[:160]) for key in keys]
        except Exception:  # a key of objects that do not travel
            out.left_to_vllm.append(owner)
            continue
        out.jobs += [CompileJob("jit_key", owner, data, label) for data, label in payloads]


def deep_gemm_jobs(model: Any, max_tokens: int, out: JobSet) -> None:
    """DeepGEMM's dense FP8 GEMM warm-up, cut into jobs: each weight shape the model's FP8
    linears use once, its M values in runs of ``GEMM_M_PER_JOB``."""
    import vllm.envs as envs
    from vllm.model_executor.warmup import deep_gemm_warmup as dgw
    from vllm.utils.deep_gemm import get_mk_alignment_for_contiguous_layout, is_deep_gemm_supported

    if not is_deep_gemm_supported() or envs.VLLM_DEEP_GEMM_WARMUP == "skip":
        return
    block_m = get_mk_alignment_for_contiguous_layout()[0]
    seen: set[tuple[int, ...]] = set()
    for module in model.modules():
        data = dgw._deep_gemm_linear_data(module)
        if data is None:
            continue
        w, ws = data
        if tuple(w.size()) in seen:
            continue
        seen.add(tuple(w.size()))
        m_values = dgw._get_fp8_gemm_nt_m_values(w, max_tokens)
        n, k = w.size()
        for start in range(0, len(m_values), GEMM_M_PER_JOB):
            case = GemmCase(
                n=n,
                k=k,
                weight_stride=tuple(w.stride()),
                weight_dtype=str(w.dtype).removeprefix("torch."),
                scale_shape=tuple(ws.size()),
                scale_stride=tuple(ws.stride()),
                scale_dtype=str(ws.dtype).removeprefix("torch."),
                block_m=block_m,
                m_values=tuple(m_values[start : start + GEMM_M_PER_JOB]),
                device_index=w.device.index or 0,
            )
            label = f"fp8_gemm_nt n={n} k={k} m={case.m_values[0]}..{case.m_values[-1]}"
            out.jobs.append(CompileJob("fp8_gemm_nt", f"{n}x{k}", pickle.dumps(case), label))


def _vllm_hc_splits(k: int, tokens: int) -> set[int]:
    """The split counts vLLM 0.34's mHC call sites choose (``kernels/mhc/tilelang.py``:
    ``compute_num_split`` directly, and ``warmup.compute_mhc_pre_num_splits``' buckets)."""
    from vllm.model_executor.kernels.mhc.tilelang_kernels import compute_num_split
    from vllm.model_executor.kernels.mhc.warmup import compute_mhc_pre_num_splits
    from vllm.utils.math_utils import cdiv

    return {
        compute_num_split(HC_BLOCK, k, cdiv(tokens, HC_BLOCK)),
        compute_mhc_pre_num_splits(k, tokens),
    }


def hc_prenorm_jobs(model: Any, max_tokens: int, out: JobSet, split_for: Any = None) -> None:
    """One job per (mix shape, split count) the model's mHC GEMMs can reach.
    ``split_for(k, tokens)``: the split counts vLLM may choose (default: its own code)."""
    import torch

    if split_for is None:
        from vllm.utils.deep_gemm import is_deep_gemm_supported

        if not is_deep_gemm_supported():  # vLLM runs TileLang's unsplit GEMM instead
            return
    chooser = split_for or _vllm_hc_splits
    shapes: dict[tuple[int, int], int] = {}
    for module in model.modules():
        for attr in HC_MIX_ATTRS:
            fn = getattr(module, attr, None)
            if not isinstance(fn, torch.Tensor) or fn.dim() != 2 or fn.dtype != torch.float32:
                continue
            n, k = fn.shape
            if n <= 32 and n % 8 == 0 and k % HC_BLOCK == 0:
                shapes.setdefault((n, k), fn.device.index or 0)
    for (n, k), device in sorted(shapes.items()):
        cases: dict[int, int] = {}
        for tokens in range(1, max_tokens + 1, HC_BLOCK):
            for splits in chooser(k, tokens):
                cases.setdefault(splits, tokens)
        for splits, tokens in sorted(cases.items()):
            case = HcPrenormCase(n, k, splits, tokens, device)
            label = f"tf32_hc_prenorm_gemm n={n} k={k} splits={splits}"
            out.jobs.append(CompileJob("hc_prenorm_gemm", f"{n}x{k}", pickle.dumps(case), label))


def o_proj_case(module: Any, m_values: tuple[int, ...] = ()) -> OProjCase | None:
    """The layer's grouped FP8 ``wo_a`` as an ``OProjCase``; None for any other module (an
    attention layer without DeepGEMM's einsum recipe, or a BF16 ``wo_a``: torch.bmm)."""
    recipe = getattr(module, "_einsum_recipe", None)
    wo_a = getattr(module, "wo_a", None)
    weight = getattr(wo_a, "weight", None)
    if recipe is None or weight is None or str(weight.dtype) != "torch.float8_e4m3fn":
        return None
    scale_name = "weight_scale" if hasattr(wo_a, "weight_scale") else "weight_scale_inv"
    return OProjCase(
        n_groups=module.n_local_groups,
        heads_per_group=module.n_local_heads // module.n_local_groups,
        nope_dim=module.nope_head_dim,
        rope_dim=module.rope_head_dim,
        o_lora_rank=module.o_lora_rank,
        einsum_recipe=tuple(recipe),
        tma_aligned_scales=bool(module._tma_aligned_scales),
        weight=TensorLayout.of(weight),
        scale_name=scale_name,
        scale=TensorLayout.of(getattr(wo_a, scale_name)),
        cos_sin_cache=TensorLayout.of(module.rotary_emb.cos_sin_cache),
        m_values=m_values,
        device_index=weight.device.index or 0,
    )


def o_proj_cases(model: Any, max_tokens: int) -> list[OProjCase]:
    """Each distinct o_proj layout in the model (the target's layers and the MTP drafter's
    share one) with every token count from 1 to ``max_tokens``, in runs."""
    layouts: dict[OProjCase, OProjCase] = {}
    for module in model.modules():
        if (case := o_proj_case(module)) is not None:
            layouts.setdefault(case.layout(), case)
    return [
        replace(case, m_values=tuple(range(start, min(start + O_PROJ_M_PER_JOB, max_tokens + 1))))
        for case in layouts.values()
        for start in range(1, max_tokens + 1, O_PROJ_M_PER_JOB)
    ]


def o_proj_jobs(model: Any, max_tokens: int, out: JobSet) -> None:
    """DeepGEMM's o_proj einsum kernels, one job per run of token counts."""
    from vllm.utils.deep_gemm import is_deep_gemm_supported

    if not is_deep_gemm_supported():
        return
    for case in o_proj_cases(model, max_tokens):
        owner = "x".join(map(str, case.weight.shape))
        label = f"o_proj_einsum {owner} m={case.m_values[0]}..{case.m_values[-1]}"
        out.jobs.append(CompileJob("o_proj_einsum", owner, pickle.dumps(case), label))


def run_job(job: CompileJob) -> None:
    """Compile one job in this process (a worker's side)."""
    if job.kind == "jit_key":
        import importlib

        module_name, _, qualname = job.owner.partition(":")
        cls: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        cls().compile(pickle.loads(job.payload))
    elif job.kind == "fp8_gemm_nt":
        _run_gemm(pickle.loads(job.payload))
    elif job.kind == "hc_prenorm_gemm":
        _run_hc_prenorm(pickle.loads(job.payload))
    elif job.kind == "o_proj_einsum":
        _run_o_proj(pickle.loads(job.payload))
    else:
        raise ValueError(f"unknown compile job kind {job.kind!r}")


def _run_gemm(case: GemmCase) -> None:
    import torch
    from vllm.utils.deep_gemm import fp8_gemm_nt

    torch.cuda.set_device(case.device_index)
    device = torch.device("cuda", case.device_index)
    max_m = max(case.m_values)
    weight = torch.zeros((case.n, case.k), dtype=torch.float32, device=device).to(
        getattr(torch, case.weight_dtype)
    )
    weight = weight.as_strided((case.n, case.k), case.weight_stride)
    scale = torch.empty_strided(
        case.scale_shape, case.scale_stride, dtype=getattr(torch, case.scale_dtype), device=device
    )
    scale.zero_()
    # As DeepGEMM's warm-up: activations of the largest M, scales zero (UE8M0 packing
    # asserts zero sign and mantissa bits), views of the first M rows.
    act = torch.zeros((max_m, case.k), device=device, dtype=torch.float8_e4m3fn)
    act_scale = torch.zeros((max_m, case.k // case.block_m), device=device, dtype=torch.float32)
    out = torch.empty((max_m, case.n), device=device, dtype=torch.bfloat16)
    for m in case.m_values:
        fp8_gemm_nt((act[:m], act_scale[:m]), (weight, scale), out[:m])
    torch.cuda.synchronize(device)


def _run_hc_prenorm(case: HcPrenormCase) -> None:
    import torch
    from vllm.utils.deep_gemm import tf32_hc_prenorm_gemm

    torch.cuda.set_device(case.device_index)
    device = torch.device("cuda", case.device_index)
    m = case.tokens
    x = torch.zeros((m, case.k), dtype=torch.bfloat16, device=device)
    fn = torch.zeros((case.n, case.k), dtype=torch.float32, device=device)
    out = torch.empty((case.num_splits, m, case.n), dtype=torch.float32, device=device)
    sqrsum = torch.empty((case.num_splits, m), dtype=torch.float32, device=device)
    tf32_hc_prenorm_gemm(x, fn, out, sqrsum, case.num_splits)
    torch.cuda.synchronize(device)


def _run_o_proj(case: OProjCase) -> None:
    import types

    import torch
    from vllm.models.deepseek_v4.nvidia.ops.o_proj import deep_gemm_fp8_o_proj

    torch.cuda.set_device(case.device_index)
    device = torch.device("cuda", case.device_index)
    max_m = max(case.m_values)
    heads = case.n_groups * case.heads_per_group
    o = torch.zeros(
        (max_m, heads, case.nope_dim + case.rope_dim), dtype=torch.bfloat16, device=device
    )
    positions = torch.zeros(max_m, dtype=torch.int64, device=device)
    cos_sin_cache = case.cos_sin_cache.zeros(device)
    wo_a = types.SimpleNamespace(weight=case.weight.zeros(device))
    setattr(wo_a, case.scale_name, case.scale.zeros(device))
    for m in case.m_values:  # the layer's own call: inverse RoPE, FP8 quant, the einsum
        deep_gemm_fp8_o_proj(
            o[:m], positions[:m], cos_sin_cache, wo_a, lambda z: z, **case.call_kwargs()
        )
    torch.cuda.synchronize(device)
