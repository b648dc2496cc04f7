"""Run compile jobs on worker processes and report what they did.

Several engine ranks of one node (tensor or expert parallelism) compile the same keys:
the first to take the pool's lock compiles them for all; the others wait on the lock and
find the job set's done-marker, so a node compiles each kernel once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from model_overrides.jit_pool.jobs import JobResult, JobSet

JOBS_ENV = "DSV4_JIT_JOBS"  # worker processes; 0 or 1 turns the pool off
# The default's ceiling: each worker holds a Python with torch and vLLM (1-2 GB of host
# memory) and, for DeepGEMM's jobs, a CUDA context on the engine's GPU; 16 ran on an H100
# node (docs/cold-start.md). A 200-core node would otherwise start 200 of them.
DEFAULT_MAX_JOBS = 16
LOCK_NAME = ".dsv4-jit-pool.lock"
# The slow kind first: a TileLang key takes 13-100 s, a run of DeepGEMM M values ~10-40 s.
KIND_ORDER = {"jit_key": 0, "fp8_gemm_nt": 1}


def default_jobs(environ: Mapping[str, str] = os.environ) -> int:
    """``DSV4_JIT_JOBS`` when set, else the CPU cores this process may run on, at most
    ``DEFAULT_MAX_JOBS``."""
    raw = environ.get(JOBS_ENV, "").strip()
    if raw:
        value = int(raw)
        if value < 0:
            raise ValueError(f"{JOBS_ENV} must be >= 0, got {raw!r}")
        return value
    return min(len(os.sched_getaffinity(0)), DEFAULT_MAX_JOBS)


@dataclass
class PoolReport:
    jobs: int
    workers: int
    seconds: float = 0.0
    by_kind: dict[str, int] = field(default_factory=dict)
    failed: list[JobResult] = field(default_factory=list)
    not_run: int = 0
    skipped: str = ""  # why the pool did not run (another rank compiled this job set)
    left_to_vllm: list[str] = field(default_factory=list)

    def line(self) -> str:
        """The engine log's one line (``serving/warm`` reads it back)."""
        if self.skipped:
            return f"[dsv4-jit] pre-compile skipped: {self.skipped}"
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(self.by_kind.items())) or "none"
        text = (
            f"[dsv4-jit] pre-compiled {self.jobs} jobs ({kinds}) on {self.workers} processes "
            f"in {self.seconds:.1f}s ({len(self.failed)} failed, {self.not_run} not run)"
        )
        if self.left_to_vllm:
            text += f"; left to vLLM's warm-up: {', '.join(sorted(set(self.left_to_vllm)))}"
        return text


@contextlib.contextmanager
def _node_lock(lock_dir: Path) -> Iterator[None]:
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / LOCK_NAME, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _collect(pool_dir: Path, workers: int) -> list[JobResult]:
    results = []
    for worker in range(workers):
        path = pool_dir / f"results-{worker}.jsonl"
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                results.append(
                    JobResult(
                        rec["index"], rec["ok"], rec["seconds"], rec["kind"], rec.get("error", "")
                    )
                )
    return results


def run_pool(
    job_set: JobSet,
    workers: int,
    lock_dir: Path,
    timeout_s: float = 3600,
    env: Mapping[str, str] | None = None,
) -> PoolReport:
    """Compile ``job_set`` on ``workers`` processes (at most one per job)."""
    jobs = sorted(job_set.jobs, key=lambda job: KIND_ORDER.get(job.kind, 9))
    workers = max(1, min(workers, len(jobs)))
    report = PoolReport(len(jobs), workers, left_to_vllm=list(job_set.left_to_vllm))
    if not jobs:
        report.skipped = "no jobs"
        return report
    done_marker = lock_dir / f".dsv4-jit-pool-{job_set.fingerprint()}.done"
    began = time.monotonic()
    with _node_lock(lock_dir):
        if done_marker.exists():
            report.skipped = f"these {len(jobs)} jobs were compiled into this cache already"
            return report
        with tempfile.TemporaryDirectory(prefix="dsv4-jit-pool-") as tmp:
            pool_dir = Path(tmp)
            (pool_dir / "claims").mkdir()
            (pool_dir / "jobs.pickle").write_bytes(pickle.dumps(jobs))
            cmd = [sys.executable, "-m", "model_overrides.jit_pool.worker", str(pool_dir)]
            procs = [
                subprocess.Popen(
                    [*cmd, str(i), str(workers)],
                    env=dict(os.environ if env is None else env),
                    stdout=subprocess.DEVNULL,
                    stderr=open(pool_dir / f"stderr-{i}.log", "wb"),  # noqa: SIM115
                )
                for i in range(workers)
            ]
            deadline = began + timeout_s
            for proc in procs:
                try:
                    proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            results = _collect(pool_dir, workers)
            crashed = [i for i, p in enumerate(procs) if p.returncode != 0]
            for i in crashed:  # a worker that died took its job's record with it
                tail = (pool_dir / f"stderr-{i}.log").read_text(errors="replace")[-400:]
                report.failed.append(
                    JobResult(-1, False, 0.0, "worker", f"exit {procs[i].returncode}: {tail}")
                )
    report.seconds = time.monotonic() - began
    report.by_kind = dict(Counter(r.kind for r in results if r.ok))
    report.failed += [r for r in results if not r.ok]
    report.not_run = len(jobs) - len(results)
    if not report.failed and not report.not_run:
        done_marker.touch()
    return report
