"""Local targets on the golden model: vLLM's own server with MTP k, or the Ray Serve
app (`dsv4-serve up`). Each is started alone and timed until it answers.

A kind may end in ``@avx512`` or ``@avx2``: that server runs on vLLM's lower CPU kernel
library (``DSV4_CPU_KERNEL_LIBRARY``), i.e. on our eager fallbacks for DSV4's ops."""

from __future__ import annotations

import os
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


@dataclass
class LocalServer:
    target: Target
    proc: subprocess.Popen
    ready_seconds: float


def _environment(kind: str) -> dict[str, str]:
    _, _, isa = kind.partition("@")
    if not isa:
        return dict(os.environ)
    if isa not in LIBRARIES:
        raise ValueError(f"unknown kernel library {isa!r} in {kind!r}: use {', '.join(LIBRARIES)}")
    return {**os.environ, FORCE_ENV: isa}


def _command(kind: str, port: int) -> tuple[list[str], str | None]:
    kind = kind.partition("@")[0]
    cli = [sys.executable, "-m", "serving.cli"]
    if kind.startswith("vllm-k"):
        k = int(kind.removeprefix("vllm-k"))
        cmd = cli + ["serve-vllm", "--model-dir", str(DEFAULT_MODEL_DIR), "--spec-k", str(k)]
        return cmd + ["--port", str(port)], f"http://127.0.0.1:{port}/metrics"
    if kind == "ray-app":
        metrics = free_port()
        cmd = cli + ["up", "cpu-tiny", "--port", str(port), "--ray-metrics-port", str(metrics)]
        return cmd, f"http://127.0.0.1:{metrics}/metrics"
    raise ValueError(f"unknown local target {kind!r}: use vllm-k0..vllm-k8 or ray-app")


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
    progress(f"{kind} ready in {ready:.1f} s")
    return LocalServer(Target(kind, base_url, SERVED_MODEL_NAME, metrics_url), proc, ready)
