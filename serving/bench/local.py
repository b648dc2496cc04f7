"""Start local targets (``serving.bench.targets`` builds them) and time them until they
answer: one at a time (each start timed alone while the ones already up sit idle), all
at once (faster; their starts overlap), or the first alone and then the rest at once.
A target that fails to start is recorded with its log's tail and the others go on."""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

from serving.bench.load import Target
from serving.bench.stages import patch_statuses, start_stages
from serving.bench.targets import LocalSpec

READY_TIMEOUT_S = 900
LOG_TAIL_LINES = 25
Progress = Callable[[str], None]


@dataclass
class LocalServer:
    spec: LocalSpec
    proc: subprocess.Popen
    log: Path
    started: float  # time.monotonic() at launch
    ready_seconds: float = 0.0
    stages: dict[str, float] | None = None
    patches: dict[str, str] | None = None  # each plugin patch's outcome in its log

    @property
    def target(self) -> Target:
        s = self.spec
        return Target(
            s.kind,
            s.base_url,
            s.model,
            s.metrics_url,
            settle_period_s=s.settle_period_s,
            settle_timeout_s=s.settle_timeout_s,
            log_path=str(self.log),
        )


def _answers(spec: LocalSpec) -> bool:
    body = {"model": spec.model, "prompt": "neti", "max_tokens": 2, "temperature": 0}
    try:
        response = httpx.post(f"{spec.base_url}/completions", json=body, timeout=60)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def log_tail(log: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])[-4000:]
    except OSError:
        return ""


def _launch(spec: LocalSpec, log_dir: Path, progress: Progress) -> LocalServer:
    log = log_dir / f"{spec.kind}.log"
    progress(f"starting {spec.kind} (log: {log})")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            spec.command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=spec.env
        )
    return LocalServer(spec, proc, log, time.monotonic())


def _stages_when_printed(server: LocalServer, timeout_s: float = 30) -> dict[str, float]:
    """HAProxy answers as soon as the replica does, before `serve.run` returns and `up`
    prints its stage line: wait for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        stages = start_stages(server.log.read_text(errors="replace"))
        if not server.spec.ray_app or "replica" in stages or time.monotonic() > deadline:
            return stages
        time.sleep(0.25)


def _wait(server: LocalServer, progress: Progress, timeout_s: float) -> dict | None:
    """Poll until the server answers (None), or exits or runs out of time (the error and
    its log's tail).
    vLLM binds its port before its engine starts, so a request waits there until it is
    served: each server is polled from its own thread when several start together."""
    kind, last_note = server.spec.kind, time.monotonic()
    while not _answers(server.spec):
        elapsed = time.monotonic() - server.started
        if server.proc.poll() is not None or elapsed > timeout_s:
            why = (
                f"exited with {server.proc.returncode}"
                if server.proc.poll() is not None
                else f"not ready after {timeout_s:.0f} s"
            )
            stop_all([server.proc], 30)
            progress(f"{kind} {why} (see {server.log})")
            return {"error": f"{kind} {why}", "log_tail": log_tail(server.log)}
        if time.monotonic() - last_note > 30:
            last_note = time.monotonic()
            progress(f"{kind} still starting ({elapsed:.0f} s)")
        time.sleep(1)
    server.ready_seconds = time.monotonic() - server.started
    server.stages = _stages_when_printed(server)
    server.patches = patch_statuses(server.log.read_text(errors="replace"))
    progress(f"{kind} ready in {server.ready_seconds:.1f} s {server.stages or ''}")
    return None


START_MODES = ("serial", "parallel", "staggered")


def start_all(
    specs: list[LocalSpec],
    log_dir: Path,
    progress: Progress,
    mode: str = "serial",
    timeout_s: float = READY_TIMEOUT_S,
) -> tuple[list[LocalServer], dict[str, dict]]:
    """Started servers (in the order of ``specs``) and the error of each that failed.
    ``mode``: serial, one at a time; parallel, all at once; staggered, the first alone
    (it fills the kernel caches every engine reads: TileLang, Triton, DeepGEMM,
    torch.compile), then the rest at once. All starts end within ``timeout_s`` (a later
    group still gets 30 s). Interrupted (Ctrl-C, SIGTERM), it stops every server it
    launched."""
    if mode not in START_MODES:
        raise ValueError(f"start mode {mode!r}: use {', '.join(START_MODES)}")
    groups = {
        "serial": [[spec] for spec in specs],
        "parallel": [specs],
        "staggered": [specs[:1], specs[1:]],
    }[mode]
    until = time.monotonic() + timeout_s
    servers: list[LocalServer] = []
    results: list[dict | None] = []
    pool = ThreadPoolExecutor(max_workers=max(len(specs), 1))
    try:
        for group in filter(None, groups):
            first = len(servers)
            for spec in group:  # appended one by one: an interruption stops every one
                servers.append(_launch(spec, log_dir, progress))
            launched = servers[first:]
            left = max(until - time.monotonic(), min(30.0, timeout_s))
            futures = [pool.submit(_wait, s, progress, left) for s in launched]
            results += [f.result() for f in futures]
    except BaseException:
        stop_all([s.proc for s in servers], 10)  # the waiting threads see them exit
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    ready = [s for s, error in zip(servers, results, strict=True) if error is None]
    errors = {s.spec.kind: e for s, e in zip(servers, results, strict=True) if e is not None}
    return ready, errors


def stop_all(procs: list[subprocess.Popen], grace: float = 60) -> None:
    """SIGTERM every child's group at once, SIGKILL what is left after ``grace`` s."""
    live = [p for p in procs if p.poll() is None]
    for proc in live:
        with contextlib.suppress(ProcessLookupError):  # gone already
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in live:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # The leader can exit before its group (vLLM's engine core holds the GPU memory):
    # give the rest a few seconds, then kill it, so the next run finds the GPU free.
    for proc in live:
        until = time.monotonic() + 10
        while _group_alive(proc.pid) and time.monotonic() < until:
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal still counts
        return True
    return True


def cold_starts(
    make_spec: Callable[[str], LocalSpec],
    kinds: list[str],
    times: int,
    log_dir: Path,
    progress: Progress,
) -> tuple[dict[str, float], dict[str, dict[str, float]], dict[str, dict]]:
    """Start each kind alone ``times`` times (fresh ports each time): median
    start-to-ready, the last start's stages, and the error of each kind that failed."""
    ready: dict[str, list[float]] = {kind: [] for kind in kinds}
    stages: dict[str, dict[str, float]] = {}
    errors: dict[str, dict] = {}
    for round_ in range(times):
        for kind in kinds:
            if kind in errors:
                continue
            up, failed = start_all([make_spec(kind)], log_dir, progress)
            errors |= failed
            for server in up:
                stop_all([server.proc], 60)
                ready[kind].append(server.ready_seconds)
                stages[kind] = server.stages or {}
                progress(f"cold start {round_ + 1}/{times} {kind}: {server.ready_seconds:.1f} s")
    medians = {k: statistics.median(v) for k, v in ready.items() if v}
    return medians, stages, errors
