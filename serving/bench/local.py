"""Local targets on the golden model: vLLM's own server with MTP k, or the Ray Serve
app (`dsv4-serve up`). Each is started alone and timed until it answers.

A kind may end in ``@avx512`` or ``@avx2``: that server runs on vLLM's lower CPU kernel
library (``DSV4_CPU_KERNEL_LIBRARY``), i.e. on our eager fallbacks for DSV4's ops."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from model_overrides.kernel_library import FORCE_ENV, LIBRARIES
from serving.bench.load import Target
from serving.golden_engine import DEFAULT_MODEL_DIR, SERVED_MODEL_NAME
from serving.processes import free_port, stop_group

READY_TIMEOUT_S = 900
# The Ray Serve app as the preset configures it, and the layouts and Ray switches to
# compare it with: (`up --set` assignments, extra environment).
RAY_APP_VARIANTS: dict[str, tuple[list[str], dict[str, str]]] = {
    "ray-app": ([], {}),
    "ray-app-python-proxy": (["serving.proxy=python"], {}),
    # Ray's throughput switches one by one, and the bundle off (it is on by default).
    "ray-app-no-throughput-bundle": ([], {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "0"}),
    "ray-app-gc-frozen-only": (
        [],
        {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "0", "RAY_SERVE_FREEZE_GC_ON_STARTUP": "1"},
    ),
    "ray-app-same-thread-only": (
        [],
        {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "0", "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0"},
    ),
    # The earlier layout: a separate OpenAiIngress replica, Ray's Python proxy and Ray
    # Serve LLM's default 50 ms stream batching (kept runnable for one release).
    "ray-app-old": (
        ["serving.path=ingress", "serving.proxy=python", "serving.stream_batching_interval_ms=50"],
        {},
    ),
}


@dataclass
class LocalServer:
    target: Target
    proc: subprocess.Popen
    ready_seconds: float
    stages: dict[str, float]


# `dsv4-serve up` ends its start with "stages: ray 3.1s, serve 1.2s, replica 28.0s" and
# the replica logs "engine started in 21.4s"; vLLM's server has no such lines.
_STAGE = re.compile(r"(ray|serve|replica) (\d+(?:\.\d+)?)s")
_ENGINE = re.compile(r"engine started in (\d+(?:\.\d+)?)s")


def start_stages(log: str) -> dict[str, float]:
    stages: dict[str, float] = {}
    for line in log.splitlines():
        if "[dsv4-serve] stages:" in line:
            stages |= {name: float(value) for name, value in _STAGE.findall(line)}
        elif match := _ENGINE.search(line):
            stages["engine"] = float(match.group(1))
    return stages


def _stages_when_printed(log: Path, timeout_s: float = 30) -> dict[str, float]:
    """HAProxy answers as soon as the replica does, before `serve.run` returns and `up`
    prints its stage line: wait for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        stages = start_stages(log.read_text(errors="replace"))
        if "replica" in stages or time.monotonic() > deadline:
            return stages
        time.sleep(0.25)


def cold_starts(
    kinds: list[str], times: int, log_dir: Path, progress
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Start each kind alone ``times`` times; median start-to-ready and its stages."""
    ready: dict[str, list[float]] = {kind: [] for kind in kinds}
    stages: dict[str, dict[str, float]] = {}
    for round_ in range(times):
        for kind in kinds:
            server = start(kind, log_dir, progress)
            stop_group(server.proc, 60)
            ready[kind].append(server.ready_seconds)
            stages[kind] = server.stages
            progress(f"cold start {round_ + 1}/{times} {kind}: {server.ready_seconds:.1f} s")
    return {k: statistics.median(v) for k, v in ready.items()}, stages


def _environment(kind: str) -> dict[str, str]:
    base, _, isa = kind.partition("@")
    env = {**os.environ, **RAY_APP_VARIANTS.get(base, ([], {}))[1]}
    if not isa:
        return env
    if isa not in LIBRARIES:
        raise ValueError(f"unknown kernel library {isa!r} in {kind!r}: use {', '.join(LIBRARIES)}")
    return {**env, FORCE_ENV: isa}


def _command(kind: str, port: int) -> tuple[list[str], str | None]:
    kind = kind.partition("@")[0]
    cli = [sys.executable, "-m", "serving.cli"]
    if kind.startswith("vllm-k"):
        k = int(kind.removeprefix("vllm-k"))
        cmd = cli + ["serve-vllm", "--model-dir", str(DEFAULT_MODEL_DIR), "--spec-k", str(k)]
        return cmd + ["--port", str(port)], f"http://127.0.0.1:{port}/metrics"
    if kind in RAY_APP_VARIANTS:
        metrics = free_port()
        cmd = cli + ["up", "cpu-tiny", "--port", str(port), "--ray-metrics-port", str(metrics)]
        for assignment in RAY_APP_VARIANTS[kind][0]:
            cmd += ["--set", assignment]
        return cmd, f"http://127.0.0.1:{metrics}/metrics"
    known = ", ".join(RAY_APP_VARIANTS)
    raise ValueError(f"unknown local target {kind!r}: use vllm-k0..vllm-k8, {known}")


def _answers(base_url: str) -> bool:
    body = {"model": SERVED_MODEL_NAME, "prompt": "neti", "max_tokens": 2, "temperature": 0}
    try:
        return httpx.post(f"{base_url}/completions", json=body, timeout=60).status_code == 200
    except httpx.HTTPError:
        return False


def start(kind: str, log_dir: Path, progress) -> LocalServer:
    port = free_port()
    cmd, metrics_url = _command(kind, port)
    env = _environment(kind)
    log = log_dir / f"{kind}.log"
    progress(f"starting {kind} (log: {log})")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True, env=env
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    while not _answers(base_url):
        if proc.poll() is not None:
            raise RuntimeError(f"{kind} exited with {proc.returncode}; see {log}")
        if time.monotonic() - t0 > READY_TIMEOUT_S:
            stop_group(proc)
            raise RuntimeError(f"{kind} not ready after {READY_TIMEOUT_S} s; see {log}")
        time.sleep(1)
    ready = time.monotonic() - t0
    stages = _stages_when_printed(log) if kind.partition("@")[0] in RAY_APP_VARIANTS else {}
    progress(f"{kind} ready in {ready:.1f} s {stages or ''}")
    target = Target(kind, base_url, SERVED_MODEL_NAME, metrics_url)
    return LocalServer(target, proc, ready, stages)
