"""One o_proj compile job of the JIT pool run alone on a GPU, outside any engine: the
kernels it leaves in DeepGEMM's cache and how long it took.

    DG_JIT_CACHE_DIR=DIR python3 -m tests.gpu.o_proj_job_check [M_MAX]

The case is V4-Flash's grouped ``wo_a`` on one GPU (8 groups of o_lora_rank 1024 over 8
heads of 512, FP8 weights with 128x128 block scales) in the layout an engine holds after
loading: vLLM's ``deepgemm_post_process_fp8_weight_block`` makes the 2-D checkpoint tensors
a (groups, rank, K) weight and DeepGEMM's scale layout (``quantization/utils/fp8_utils.py``;
given 2-D tensors, DeepGEMM's einsum asserts on their rank). In an engine the pool reads the
layout from the layer itself. Every token count up to M_MAX (default 256) runs, and a few
prefill sizes above it. Each new kernel is printed with its
template arguments, so the run shows whether the job reaches the batched einsum kernels
traffic compiled (``GemmType::Batched``, 8 groups, N 1024, K 4096)."""

from __future__ import annotations

import os
import pickle
import sys
import time
from pathlib import Path

from model_overrides.jit_pool.jobs import CompileJob, OProjCase, TensorLayout, run_job

FLASH = {"n_groups": 8, "heads_per_group": 8, "nope_dim": 448, "rope_dim": 64}


def flash_case(m_values: tuple[int, ...]) -> OProjCase:
    import torch
    from vllm.model_executor.layers.quantization.utils.fp8_utils import (
        deepgemm_post_process_fp8_weight_block,
    )
    from vllm.utils.deep_gemm import is_deep_gemm_e8m0_used

    groups, rank, k = 8, 1024, 4096
    weight = torch.zeros((groups * rank, k), device="cuda").to(torch.float8_e4m3fn)
    scale = torch.ones((groups * rank // 128, k // 128), device="cuda")
    weight, scale = deepgemm_post_process_fp8_weight_block(
        weight, scale, (128, 128), is_deep_gemm_e8m0_used(), is_bmm=True, bmm_batch_size=groups
    )
    return OProjCase(
        **FLASH,
        o_lora_rank=rank,
        einsum_recipe=(1, 128, 128),
        tma_aligned_scales=False,
        weight=TensorLayout.of(weight),
        scale_name="weight_scale_inv",
        scale=TensorLayout.of(scale),
        cos_sin_cache=TensorLayout((65536, 64), (64, 1), "float32"),
        m_values=m_values,
        device_index=0,
    )


def _kernels(root: Path) -> set[Path]:
    return set(root.glob("cache/*/kernel.cu"))


def main() -> int:
    m_max = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    root = Path(os.environ.get("DG_JIT_CACHE_DIR", Path.home() / ".deep_gemm"))
    before = _kernels(root)
    case = flash_case((*range(1, m_max + 1), 1000, 2048, 4096, 8192))
    began = time.monotonic()
    run_job(CompileJob("o_proj_einsum", "8192x4096", pickle.dumps(case)))
    seconds = time.monotonic() - began
    new = sorted(_kernels(root) - before)
    print(f"o_proj job: {len(case.m_values)} token counts in {seconds:.1f} s, {len(new)} kernels")
    for path in new:
        body = path.read_text()
        args = body[body.find("<") + 1 : body.rfind(">")].split()
        print(f"  {path.parent.name}: {' '.join(args)}")
    return 0 if new else 1


if __name__ == "__main__":
    sys.exit(main())
