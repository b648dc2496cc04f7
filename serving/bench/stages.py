"""Start-up stages read from a local target's log.

`serving.cli up` ends its start with ``[dsv4-serve] stages: ray 3.1s, serve 1.2s,
replica 28.0s`` and its gateway logs ``engine started in 21.4s``. vLLM's engine logs the
same lines in its own server and in the Ray app's replica (Ray forwards them):
``Model loading took X GiB memory and S seconds`` (the GPU runner's load, draft included;
the CPU runner logs only the loader's ``Loading weights took S seconds``, once for the
target and once for the draft, summed here), ``init engine
(profile, create kv cache, warmup model) took S s (compilation: C s)`` (the engine's
start after the weights: torch.compile and CUDA-graph capture inside it) and ``Graph
capturing finished in S secs``.
"""

from __future__ import annotations

import re

# Display order and labels; `replica` holds the engine's stages, `engine_init` holds
# `compile`, `jit_warmup` and `cuda_graphs`.
STAGES = {
    "ray": "Ray",
    "serve": "Serve",
    "replica": "replica",
    "engine": "engine (gateway)",
    "weights": "weights",
    "engine_init": "engine init",
    "compile": "torch.compile",
    "jit_warmup": "JIT kernel warm-up",
    "cuda_graphs": "CUDA graphs",
}
_NUMBER = r"(\d+(?:\.\d+)?)"
_RAY_STAGE = re.compile(rf"(ray|serve|replica) {_NUMBER}s")
_LINES = {
    "engine": re.compile(rf"engine started in {_NUMBER}s"),
    "weights": re.compile(rf"Model loading took \S+ GiB memory and {_NUMBER} seconds"),
    "loader": re.compile(rf"Loading weights took {_NUMBER} seconds"),
    "engine_init": re.compile(
        rf"init engine \(profile, create kv cache, warmup model\) took {_NUMBER} s"
    ),
    "compile": re.compile(rf"init engine \(.*\) took [\d.]+ s \(compilation: {_NUMBER} s"),
    "cuda_graphs": re.compile(rf"Graph capturing finished in {_NUMBER} secs"),
    # vLLM's own JIT kernel warm-up (model_executor/warmup/kernel_warmup.py): TileLang, Triton
    # and DeepGEMM keys compiled before serving; minutes on a fresh machine at real width.
    "jit_warmup": re.compile(rf"JIT kernel warmup finished in {_NUMBER}s"),
}


# vLLM's JIT monitor (vllm/utils/jit_monitor.py, vLLM >= 0.34): after warm-up, a kernel
# compiled during inference logs "<backend> <event> during inference: <kernel>" (once per
# kernel unless --jit-monitor-verbose). It watches Triton, TileLang, CuTe DSL and FlyDSL,
# not DeepGEMM.
_JIT_MONITOR = re.compile(r" during inference: ([^\s(]+)")


def jit_monitor_kernels(log: str) -> list[str]:
    """The kernels vLLM's JIT monitor saw compiled during inference, in log order."""
    return [match.group(1).rstrip(".") for match in _JIT_MONITOR.finditer(log)]


# The plugin's line per patch (model_overrides/registry.py apply_all), in every vLLM process.
_PATCH_LINE = re.compile(r"^(.*?)\[dsv4-overrides\] ([\w.-]+): ([a-z ]+) \((.*)\)\s*$")


def patch_statuses(log: str) -> dict[str, str]:
    """Each patch's outcome as the process that runs the model logged it (vLLM's engine
    core, whose lines carry ``EngineCore``), else as any process did: ``name -> outcome``."""
    found: dict[str, str] = {}
    engine: dict[str, str] = {}
    for line in log.splitlines():
        if match := _PATCH_LINE.search(line):
            prefix, name, outcome = match.group(1), match.group(2), match.group(3)
            (engine if "EngineCore" in prefix or "Worker" in prefix else found)[name] = outcome
    return found | engine


def start_stages(log: str) -> dict[str, float]:
    """Seconds by stage (the last line of each kind wins), in display order."""
    found: dict[str, float] = {}
    loader = 0.0
    for line in log.splitlines():
        if "[dsv4-serve] stages:" in line:
            found |= {name: float(value) for name, value in _RAY_STAGE.findall(line)}
            continue
        for name, pattern in _LINES.items():
            if match := pattern.search(line):
                if name == "loader":
                    loader += float(match.group(1))
                else:
                    found[name] = float(match.group(1))
    if loader and "weights" not in found:
        found["weights"] = loader
    return {name: found[name] for name in STAGES if name in found}


def top_level(stages: dict[str, float], ready_seconds: float) -> dict[str, float]:
    """Stages that add up to start-to-ready: the Ray app's ray/serve/replica, or vLLM's
    weights and engine init; ``other`` is the rest (process start, imports, the API
    server, the first answer)."""
    names = ["ray", "serve", "replica"] if "replica" in stages else ["weights", "engine_init"]
    out = {name: stages[name] for name in names if name in stages}
    out["other"] = max(ready_seconds - sum(out.values()), 0.0)
    return out
