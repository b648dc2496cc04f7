"""Engine child processes on one GPU, run side by side.

Each GPU test configuration is one vLLM engine in its own child process (a runner module
that prints one ``RESULT {json}`` line). A tiny model leaves the GPU mostly idle, so the
pool starts several at once: each with a bounded KV budget, its output in a log file
(what comes back from the GPU machine), its start-to-result time recorded. The first job
runs alone so that the kernels every engine compiles (TileLang, Triton, DeepGEMM,
torch.compile) are in the shared caches before the others start. Each finished job's
RESULT is kept next to its log; with ``resume`` a later session on the same machine reads
those instead of starting the engine again (a suite cut short by a time limit goes on), and
``replay`` reads only those (the tests re-evaluated over a GPU run's records, anywhere).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.paths import ROOT


@dataclass(frozen=True)
class Job:
    name: str
    module: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    timeout: int = 420


@dataclass
class Outcome:
    job: Job
    returncode: int | None
    seconds: float
    result: dict | None
    log: Path

    def tail(self, chars: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


class EnginePool:
    def __init__(
        self,
        log_dir: Path,
        parallel: int,
        env: dict[str, str],
        resume: bool = False,
        replay: bool = False,
    ) -> None:
        self.log_dir = log_dir
        self.env = env
        self.resume = resume or replay
        self.replay = replay  # kept results only: no engine starts (re-reading a GPU run)
        self._executor = ThreadPoolExecutor(max_workers=parallel)
        self._futures: dict[str, Future[Outcome]] = {}
        self._lock = threading.Lock()
        log_dir.mkdir(parents=True, exist_ok=True)

    def run_now(self, job: Job) -> Outcome:
        """Run one job alone (the cache warm-up) and keep its outcome like the others."""
        future: Future[Outcome] = Future()
        future.set_result(self._run(job))
        self._futures[job.name] = future
        return future.result()

    def submit(self, job: Job) -> None:
        if job.name in self._futures:
            raise ValueError(f"duplicate job {job.name}")
        self._futures[job.name] = self._executor.submit(self._run, job)

    def outcome(self, name: str) -> Outcome:
        return self._futures[name].result()

    def result(self, name: str) -> dict:
        """The job's RESULT, or an assertion that quotes its log."""
        out = self.outcome(name)
        assert out.result is not None, (
            f"{name}: exit {out.returncode} after {out.seconds:.0f}s, no RESULT line; "
            f"log {out.log}:\n{out.tail()}"
        )
        return out.result

    def summary(self) -> dict[str, dict]:
        rows = {}
        for name, future in self._futures.items():
            if future.done():
                out = future.result()
                rows[name] = {
                    "returncode": out.returncode,
                    "seconds": round(out.seconds, 1),
                    "ok": out.result is not None,
                    "log": out.log.name,
                }
        return rows

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def _run(self, job: Job) -> Outcome:
        log = self.log_dir / f"{job.name}.log"
        kept = self.log_dir / f"{job.name}.result.json"
        if self.resume and kept.exists():
            record = json.loads(kept.read_text())
            self._say(f"kept  {job.name}: from an earlier session ({record['seconds']:.0f}s)")
            return Outcome(job, 0, record["seconds"], record["result"], log)
        if self.replay:
            self._say(f"none  {job.name}: no kept result to replay")
            return Outcome(job, None, 0.0, None, log)
        start = time.monotonic()
        self._say(f"start {job.name}")
        with log.open("w") as sink:
            try:
                proc = subprocess.run(
                    [sys.executable, "-m", job.module, *job.args],
                    stdout=subprocess.PIPE,
                    stderr=sink,
                    text=True,
                    timeout=job.timeout,
                    cwd=ROOT,
                    env={**os.environ, **self.env, **job.env},
                )
                code, stdout = proc.returncode, proc.stdout
            except subprocess.TimeoutExpired as exc:
                code, stdout = None, exc.stdout or ""
                if isinstance(stdout, bytes):
                    stdout = stdout.decode(errors="replace")
                sink.write(f"\n[pool] timed out after {job.timeout}s\n")
            sink.write("\n[pool] stdout (a failed run's RESULT too):\n" + stdout)
        line = next((x for x in stdout.splitlines() if x.startswith("RESULT ")), None)
        result = json.loads(line.removeprefix("RESULT ")) if line and code == 0 else None
        seconds = time.monotonic() - start
        if result is not None:
            kept.write_text(json.dumps({"seconds": seconds, "result": result}))
        self._say(f"done  {job.name}: {'ok' if result else f'FAILED ({code})'} {seconds:.0f}s")
        return Outcome(job, code, seconds, result, log)

    def _say(self, text: str) -> None:
        with self._lock:
            print(f"[gpu-pool {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)
