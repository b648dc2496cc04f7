"""Every engine configuration the GPU suite reads, one job each (the warm-up job aside).

- the designed golden model at k = 0..3, with CUDA graphs (vLLM's default) and eager;
- half draft agreement (acceptance below 1, counters still designed) at k = 2;
- the inline HC contract (dsv4-cuda-hc-path) at k = 2, to compare with the deferred one;
- the numeric variant and its one-ulp jitter (GPU against the CPU's log-probabilities);
- the clamp variant and its jitter (vLLM's Hopper MoE against plain-torch DSV4);
- the designed model in DeepSeek-V4's FP8 release format (DeepseekV4FP8Config) at k = 2;
- prefix caching on the numeric variant at k = 2 and k = 0 (tests/support/prefix_cases.py):
  each prompt served cold, then from the cache.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from serving.golden import GoldenDesign
from tests.gpu.pool import Job
from tests.support.golden_prompts import prompt_of
from tests.support.prefix_cases import runner_spec

# Several engines share the GPU: each gets a fixed KV budget instead of a share of free memory.
# max_num_seqs 8 (the batches here): fewer CUDA-graph sizes to capture than the preset's 128.
ENGINE = {"kv_cache_memory_bytes": 2 << 30, "gpu_memory_utilization": 0.08, "max_num_seqs": 8}
KS = (0, 1, 2, 3)
REHEARSE = os.environ.get("DSV4_GPU_REHEARSE") == "1"  # tests/gpu/conftest.py
if REHEARSE:  # the CPU backend: its preset's KV space, eager only
    ENGINE = {"max_num_seqs": 8}

NUMERIC_PROMPTS = [prompt_of(GoldenDesign(), 2300, seed=7), prompt_of(GoldenDesign(), 300, seed=8)]
NUMERIC_MAX_TOKENS = 16
CLAMP = GoldenDesign(variant="clamp")
CLAMP_PROMPTS = [prompt_of(CLAMP, words, seed) for words, seed in ((200, 7), (100, 8))]
CLAMP_MAX_TOKENS = 16
INLINE = "inline-k2-graphs"
HALF = "half-k2-graphs"
FP8 = "fp8-k2-graphs"


def golden_job(name: str, model: Path, k: int, eager: bool = False, **env: str) -> Job:
    spec = {"model_dir": str(model), "k": k, "eager": eager or REHEARSE, "engine": ENGINE}
    return Job(name, "tests.gpu.golden_runner", [json.dumps(spec)], env)


def logprob_job(name: str, model: Path, prompts: list[str], max_tokens: int, **extra) -> Job:
    engine = {**ENGINE, **extra.pop("engine", {})}
    spec = {
        "model_dir": str(model),
        "library": "native",
        "prompts": prompts,
        "max_tokens": max_tokens,
        "facts": True,
        "engine": engine,
        **extra,
    }
    return Job(name, "tests.support.kernel_path_runner", [json.dumps(spec)])


def designed_name(k: int, eager: bool) -> str:
    return f"designed-k{k}-{'eager' if eager else 'graphs'}"


def clamp_job(name: str, model: Path) -> Job:
    return logprob_job(
        name,
        model,
        CLAMP_PROMPTS,
        CLAMP_MAX_TOKENS,
        prompt_logprobs=-1,
        engine={"max_logprobs": -1},
    )


def prefix_cache_name(k: int) -> str:
    return f"prefix-cache-k{k}-graphs"


def prefix_cache_job(model: Path, k: int) -> Job:
    """Cold and cache-hit runs chunked alike (256 tokens a step: a hit starts on a block)."""
    engine = {**ENGINE, "max_num_batched_tokens": 256, "enable_prefix_caching": True}
    spec = runner_spec(str(model), "native", k, engine)
    return Job(prefix_cache_name(k), "tests.support.prefix_cache_runner", [json.dumps(spec)])


def warmup_job(models: dict[str, Path]) -> Job:
    """The job every other one follows (it fills the kernel caches)."""
    return golden_job(designed_name(2, False), models["designed"], 2)


def all_jobs(models: dict[str, Path]) -> list[Job]:
    jobs = [
        golden_job(designed_name(k, eager), models["designed"], k, eager)
        for eager in (False, True)
        for k in KS
        if (k, eager) != (2, False)  # the warm-up job
    ]
    jobs += [
        golden_job(HALF, models["half"], 2),
        golden_job(INLINE, models["designed"], 2, DSV4_HC_PATH="inline"),
        logprob_job("numeric", models["numeric"], NUMERIC_PROMPTS, NUMERIC_MAX_TOKENS),
        logprob_job(
            "numeric-jitter", models["numeric-jitter"], NUMERIC_PROMPTS, NUMERIC_MAX_TOKENS
        ),
        clamp_job("clamp", models["clamp"]),
        clamp_job("clamp-jitter", models["clamp-jitter"]),
        Job(FP8, "tests.support.fp8_runner", [str(models["fp8"]), json.dumps(ENGINE)]),
        prefix_cache_job(models["numeric"], 2),
        prefix_cache_job(models["numeric"], 0),
    ]
    return jobs
