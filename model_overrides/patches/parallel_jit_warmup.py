"""all models on CUDA: compile the engine's JIT kernels on every core once the model is loaded.

vLLM 0.34's warm-up compiles TileLang's keys one after another and DeepGEMM's FP8 GEMM
configs one after another (``model_executor/warmup/jit_warmup.py``,
``JitWarmupRegistry.warmup``: only Triton owners get a thread pool;
``warmup/deep_gemm_warmup.py``). At DeepSeek-V4 width that is minutes on one core of a
16-core node. After ``GPUModelRunner.load_model`` (``v1/worker/gpu/model_runner.py``: the
model's registrations are in ``jit_warmup_registry`` and DeepGEMM's weights are laid out
for it) this patch hands the same keys to ``model_overrides.jit_pool`` worker processes,
which compile them into the tools' disk caches; vLLM's own warm-up then loads them. The
pool also compiles every split count of DeepGEMM's mHC GEMM the engine's batches can reach
(``jit_pool.jobs``), which vLLM's warm-up does not cover. Keys registered later (attention
metadata builders, the KV cache) stay with vLLM's warm-up.
Jobs the cache's ledger holds for this node's versions and GPU (an earlier start, or the
warm whose archive was imported) are not handed out again (``jit_pool.pool``).

``DSV4_JIT_JOBS`` sets the workers (default: this process's CPU cores, at most 16; 0 or 1:
off). A
pool that fails logs a warning and leaves every key to vLLM's warm-up: slower, not wrong.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import Any

from model_overrides.jit_pool import default_jobs, run_pool
from model_overrides.jit_pool import manifest as cache_manifest
from model_overrides.jit_pool.jobs import (
    JobSet,
    deep_gemm_jobs,
    hc_prenorm_jobs,
    o_proj_jobs,
    registry_jobs,
)
from model_overrides.jit_pool.pool import JOBS_ENV
from model_overrides.patches.module_attr import import_optional
from model_overrides.registry import REGISTRY, Need, Patch, Probe

logger = logging.getLogger("vllm.dsv4_overrides")

RUNNER = "vllm.v1.worker.gpu.model_runner"
REGISTRY_MODULE = "vllm.model_executor.warmup.jit_warmup"
MARK = "_dsv4_parallel_jit"


def _runner_class() -> Any:
    module = import_optional(RUNNER)
    return getattr(module, "GPUModelRunner", None) if module else None


def lock_dir(environ: Any = os.environ) -> Path:
    """Where the pool's node lock lives: the JIT cache volume when one is set."""
    for name in ("TILELANG_CACHE_DIR", "VLLM_CACHE_ROOT"):
        if environ.get(name):
            return Path(environ[name])
    return Path.home() / ".cache" / "vllm"


def log_cache_fit(
    versions: cache_manifest.Versions, gpu: cache_manifest.Gpu, environ: Any = os.environ
) -> str | None:
    """One line: does the warmed cache (its manifest) fit this node. None without a root."""
    root = environ.get(cache_manifest.ROOT_ENV)
    if not root:
        return None
    try:
        found = cache_manifest.load(root)
    except cache_manifest.ManifestError as exc:
        line = f"[dsv4-jit] {exc}"
    else:
        line = "[dsv4-jit] " + cache_manifest.fit_line(found, versions, gpu, root)
        if found is not None and not cache_manifest.differences(found, versions, gpu):
            logger.info(line)
            return line
    logger.warning(line)
    return line


def precompile(runner: Any, workers: int) -> None:
    """Describe the runner's keys and DeepGEMM's shapes as jobs and run them on the pool."""
    versions, gpu = cache_manifest.node_versions(), cache_manifest.node_gpu()
    log_cache_fit(versions, gpu)
    job_set = JobSet()
    registry_jobs(runner.jit_warmup_registry, runner.vllm_config, job_set)
    model = runner.get_model() if hasattr(runner, "get_model") else runner.model
    max_tokens = runner.scheduler_config.max_num_batched_tokens
    deep_gemm_jobs(model, max_tokens, job_set)
    hc_prenorm_jobs(model, max_tokens, job_set)
    o_proj_jobs(model, max_tokens, job_set)
    # The ledger's stamp: this node's tool versions and GPU architecture, no shapes.
    stamp = cache_manifest.cache_key(versions, gpu, {})
    report = run_pool(job_set, workers, lock_dir(), stamp=stamp)
    log = logger.warning if report.failed or report.not_run else logger.info
    log(report.line())
    for failure in report.failed[:3]:
        logger.warning("[dsv4-jit] a %s job failed: %s", failure.kind, failure.error)


def _wrap(original: Any, workers: int) -> Any:
    @functools.wraps(original)
    def load_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        try:
            precompile(self, workers)
        except Exception as exc:  # never fatal: vLLM's warm-up compiles every key itself
            logger.warning(
                "[dsv4-jit] pre-compile failed (%s: %s); vLLM's warm-up compiles serially",
                type(exc).__name__,
                exc,
            )
        return result

    setattr(load_model, MARK, workers)
    return load_model


def probe() -> Probe:
    platforms = import_optional("vllm.platforms")
    if not (platforms and platforms.current_platform.is_cuda()):
        return Probe(Need.NOT_NEEDED, "not CUDA: no TileLang or DeepGEMM kernels to compile")
    try:
        workers = default_jobs()
    except ValueError as exc:
        return Probe(Need.UNRECOGNISED, str(exc))
    if workers <= 1:
        return Probe(Need.NOT_NEEDED, f"{JOBS_ENV}={workers}: vLLM's warm-up alone")
    registry = import_optional(REGISTRY_MODULE)
    runner = _runner_class()
    if registry is None or not hasattr(registry, "JitWarmupRegistry"):
        return Probe(Need.NOT_APPLICABLE, "this vLLM has no JitWarmupRegistry (before 0.33)")
    if runner is None or not hasattr(runner, "load_model"):
        return Probe(Need.UNRECOGNISED, f"{RUNNER}.GPUModelRunner.load_model not found")
    if hasattr(runner.load_model, MARK):
        return Probe(Need.ALREADY_APPLIED, f"{workers} workers")
    return Probe(Need.NEEDED, f"{workers} workers")


def apply() -> None:
    runner = _runner_class()
    runner.load_model = _wrap(runner.load_model, default_jobs())


def verify() -> str | None:
    runner = _runner_class()
    if runner is None or not hasattr(runner.load_model, MARK):
        return "GPUModelRunner.load_model is not wrapped"
    return None


REGISTRY.add(
    Patch(
        name="parallel-jit-warmup",
        override="deepseek_v4",
        summary="JIT warm-up keys and DeepGEMM GEMMs compiled on every core after load",
        probe=probe,
        apply=apply,
        verify=verify,
        gpu_note="CUDA only: the CPU backend compiles no JIT kernels",
        upstream="vllm-project/vllm#49349 (zero JIT at start) and #49905 (warm-up coverage)",
        remove_when=(
            "vLLM compiles its serial JIT warm-up keys and DeepGEMM's warm-up in parallel "
            "itself, or ships them precompiled"
        ),
    )
)
