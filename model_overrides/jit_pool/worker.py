"""One worker of the compile pool: ``python -m model_overrides.jit_pool.worker DIR INDEX``.

``DIR`` holds ``jobs.pickle`` (the job list) and ``claims/``. Workers take jobs one at a
time: a job is this worker's when it creates ``claims/N`` first (O_EXCL), so a slow
TileLang key does not hold up the jobs behind it. Each worker starts at its own offset
and writes one JSON line per job it ran to ``results-INDEX.jsonl``. A job that fails is
recorded and left to vLLM's own warm-up, which compiles whatever is not on disk.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
import traceback
from pathlib import Path

from model_overrides.jit_pool.jobs import CompileJob, run_job


def claim(claims: Path, index: int) -> bool:
    try:
        fd = os.open(claims / str(index), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def work(pool_dir: Path, worker: int, workers: int) -> int:
    jobs: list[CompileJob] = pickle.loads((pool_dir / "jobs.pickle").read_bytes())
    claims = pool_dir / "claims"
    ran = 0
    with open(pool_dir / f"results-{worker}.jsonl", "a", encoding="utf-8") as results:
        # Jobs are listed slowest kind first; each worker starts at its own offset.
        start = (worker * len(jobs)) // max(workers, 1)
        for step in range(len(jobs)):
            index = (start + step) % len(jobs)
            if not claim(claims, index):
                continue
            began = time.monotonic()
            record = {"index": index, "kind": jobs[index].kind, "ok": True}
            try:
                run_job(jobs[index])
            except Exception as exc:  # recorded; vLLM's warm-up compiles it itself
                record |= {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
                record["trace"] = traceback.format_exc(limit=3)[-800:]
            record["seconds"] = round(time.monotonic() - began, 3)
            results.write(json.dumps(record) + "\n")
            results.flush()
            ran += 1
    return ran


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m model_overrides.jit_pool.worker DIR INDEX WORKERS", file=sys.stderr)
        return 2
    work(Path(argv[0]), int(argv[1]), int(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
