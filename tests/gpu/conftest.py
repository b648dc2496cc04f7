"""The GPU suite's gate and its engines (``make test-gpu``; `make test` never collects it).

Without a CUDA device the suite reports why and runs nothing. With one, a session pool
(tests/gpu/pool.py) writes the golden checkpoints and starts every engine configuration
the tests read, several at once on the one GPU; each test then reads its configuration's
JSON. ``DSV4_GPU_OUT`` names a folder for the records that come back from the GPU machine:
every engine's log and one ``gpu-results.json``; ``DSV4_GPU_RESUME=1`` reuses the results
of engines an earlier run there finished (tests/gpu/pool.py).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from serving.golden import GoldenDesign, write_golden_model
from tests.gpu.jobs import all_jobs, warmup_job
from tests.gpu.pool import EnginePool
from tests.support.checkpoint_jitter import jittered_copy

# DSV4_GPU_REHEARSE=1 runs the harness on the CPU backend (cpu-tiny, eager), to try the pool,
# runners and records before a GPU run; the GPU claims themselves then fail, as they should.
REHEARSE = os.environ.get("DSV4_GPU_REHEARSE") == "1"
# DSV4_GPU_REPLAY=1 with DSV4_GPU_OUT a GPU run's folder: the tests over that run's kept
# engine results, on any machine (no engine starts; a job without a result fails).
REPLAY = os.environ.get("DSV4_GPU_REPLAY") == "1"
PRESET = "cpu-tiny" if REHEARSE else "gpu-golden"
PARALLEL = int(os.environ.get("DSV4_GPU_PARALLEL", "1" if REHEARSE else "8"))
ONLY = re.compile(os.environ.get("DSV4_GPU_JOBS", ".*"))  # which engines to start


def cuda_reason() -> str | None:
    """None when a CUDA device is usable, else why not."""
    if REHEARSE or REPLAY:
        return None
    try:
        import torch
    except ImportError as exc:
        return f"torch is not importable ({exc})"
    if not torch.cuda.is_available():
        return f"no CUDA device (torch {torch.__version__}, built for CUDA {torch.version.cuda})"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = cuda_reason()
    gpu_items = [i for i in items if i.get_closest_marker("gpu")]
    if reason and gpu_items:
        print(f"\ntests/gpu: {reason}: the GPU suite runs nothing here (make test-gpu on a GPU)")
        config.hook.pytest_deselected(items=gpu_items)
        items[:] = [i for i in items if not i.get_closest_marker("gpu")]


@pytest.fixture(scope="session")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = Path(os.environ.get("DSV4_GPU_OUT") or tmp_path_factory.mktemp("gpu-out"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory, golden_dir: Path) -> dict[str, Path]:
    def write(name: str, design: GoldenDesign) -> Path:
        return write_golden_model(tmp_path_factory.mktemp(f"golden-{name}"), design)

    out = {
        "designed": golden_dir,
        "half": write("half", GoldenDesign(draft_agreement=0.5)),
        "numeric": write("numeric", GoldenDesign(variant="numeric")),
        "clamp": write("clamp", GoldenDesign(variant="clamp")),
        "fp8": write("fp8", GoldenDesign(weight_format="fp8")),
    }
    for name in ("numeric", "clamp"):
        jitter = tmp_path_factory.mktemp(f"golden-{name}-jitter")
        out[f"{name}-jitter"] = jittered_copy(out[name], jitter)
    return out


@pytest.fixture(scope="session")
def pool(models: dict[str, Path], out_dir: Path):
    resume = os.environ.get("DSV4_GPU_RESUME") == "1"
    env = {"DSV4_GOLDEN_PRESET": PRESET}
    if REHEARSE:
        from tests.support.golden_prompts import engine_env

        env |= engine_env()
    pool = EnginePool(out_dir / "logs", PARALLEL, env, resume, replay=REPLAY)
    # The first engine alone fills the kernel caches the others then reuse.
    pool.run_now(warmup_job(models))  # alone: it fills the kernel caches
    for job in all_jobs(models):
        if ONLY.fullmatch(job.name):
            pool.submit(job)
    yield pool
    pool.close()
    summary = {"engines": pool.summary(), "results": {}}
    for name in summary["engines"]:
        out = pool.outcome(name)
        summary["results"][name] = out.result
    (out_dir / "gpu-results.json").write_text(json.dumps(summary, indent=1))
