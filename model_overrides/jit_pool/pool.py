"""Run compile jobs on worker processes and report what they did.

Each job that compiles is written to the cache's ledger (``LEDGER_NAME`` beside the lock,
one line per job: the node stamp and the job's fingerprint), and a job the ledger holds
for this node's stamp is not run again. So several engine ranks of one node (tensor or
expert parallelism) compile each key once: the first to take the pool's lock compiles,
the others wait on the lock and find their jobs done. The ledger travels in a cache
archive, so an engine started from an imported cache skips the pool for every job the
warm compiled instead of re-loading each kernel in a worker. The stamp is the node's tool
versions and GPU architecture (``manifest.cache_key`` without shapes): a ledger written
under other versions does not count.
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

from model_overrides.jit_pool.jobs import CompileJob, JobResult, JobSet

JOBS_ENV = "DSV4_JIT_JOBS"  # worker processes; 0 or 1 turns the pool off
# The default's ceiling: each worker holds a Python with torch and vLLM (1-2 GB of host
# memory) and, for DeepGEMM's jobs, a CUDA context on the engine's GPU (what 16 cost a
# node: docs/cold-start.md). A 200-core node would otherwise start 200 of them.
DEFAULT_MAX_JOBS = 16
LOCK_NAME = ".dsv4-jit-pool.lock"
LEDGER_NAME = "dsv4-jit-pool-compiled.txt"
# The slow kind first, so that the longest jobs do not start last: a TileLang key is one
# long compile, a run of DeepGEMM M values or o_proj token counts several configs, an mHC
# GEMM job one small kernel.
KIND_ORDER = {"jit_key": 0, "fp8_gemm_nt": 1, "o_proj_einsum": 2, "hc_prenorm_gemm": 3}


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
    skipped: str = ""  # why the pool did not run (every job is in the ledger already)
    already: int = 0  # jobs the ledger holds: compiled by an earlier run or an imported cache
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
        if self.already:
            text += f"; {self.already} already in this cache"
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


def read_ledger(lock_dir: Path, stamp: str) -> set[str]:
    """Fingerprints of the jobs compiled into this cache under ``stamp``."""
    path = lock_dir / LEDGER_NAME
    if not path.exists():
        return set()
    done = set()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        found_stamp, _, fingerprint = line.strip().partition(" ")
        if found_stamp == stamp and fingerprint:
            done.add(fingerprint)
    return done


def _write_ledger(lock_dir: Path, stamp: str, jobs: list[CompileJob]) -> None:
    with open(lock_dir / LEDGER_NAME, "a", encoding="utf-8") as ledger:
        ledger.writelines(f"{stamp} {job.fingerprint()}\n" for job in jobs)


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
    stamp: str = "",
) -> PoolReport:
    """Compile the jobs of ``job_set`` that the cache's ledger does not hold for ``stamp``
    on ``workers`` processes (at most one per job)."""
    listed = sorted(job_set.jobs, key=lambda job: KIND_ORDER.get(job.kind, 9))
    report = PoolReport(len(listed), 1, left_to_vllm=list(job_set.left_to_vllm))
    if not listed:
        report.skipped = "no jobs"
        return report
    began = time.monotonic()
    with _node_lock(lock_dir):
        done = read_ledger(lock_dir, stamp)
        jobs = [job for job in listed if job.fingerprint() not in done]
        report.already = len(listed) - len(jobs)
        if not jobs:
            report.skipped = f"these {len(listed)} jobs were compiled into this cache already"
            return report
        workers = max(1, min(workers, len(jobs)))
        report.jobs, report.workers = len(jobs), workers
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
            _write_ledger(lock_dir, stamp, [jobs[r.index] for r in results if r.ok])
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
    return report
