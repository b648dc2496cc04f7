"""Compile an engine's JIT kernels on every CPU core before it needs them.

vLLM compiles the kernels a DeepSeek-V4 engine needs one after another, on one core:
its JIT warm-up (``model_executor/warmup/jit_warmup.py``, ``JitWarmupRegistry.warmup``)
runs Triton keys on a few threads but TileLang's mHC keys serially (13-100 s each at
V4 width), and DeepGEMM's warm-up (``warmup/deep_gemm_warmup.py``) runs every FP8 GEMM
shape in turn. Each tool keeps what it compiled in a disk cache
(``serving/config/jit_cache.py``). So the same work can be spread over processes that each
compile a share into those caches first; vLLM's own warm-up then finds every key on disk.

``jobs`` turns the registry and the model into compile jobs, ``pool`` runs them on worker
processes (``worker``) that claim jobs one at a time, and the ``parallel_jit_warmup`` patch
calls it once the model is loaded.
"""

from model_overrides.jit_pool.jobs import CompileJob, JobResult
from model_overrides.jit_pool.pool import PoolReport, default_jobs, run_pool

__all__ = ["CompileJob", "JobResult", "PoolReport", "default_jobs", "run_pool"]
