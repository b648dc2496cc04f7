"""Where the FP8 golden model's first decode step faults on CUDA: the same engine in variants.

    python3 -m tests.gpu.fp8_variants --out DIR [--timeout 450]

The GPU suite's FP8 job (tests/gpu/test_gpu_fp8.py) loads the FP8 release format and then
dies with "an illegal memory access" at its first decode step, asynchronously, so the
traceback names a later synchronisation. Each variant here runs tests/support/fp8_runner.py
eager with CUDA_LAUNCH_BLOCKING=1 (the faulting launch raises where it is made) and changes
one thing: no MTP, DeepGEMM off for the linears, DeepGEMM's ue8m0 scales off. All start
together; DIR gets one log per variant and ``variants.json`` (each variant's exit, errors,
texts_ok and the log's first CUDA error lines). A script the GPU machine runs once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from serving.golden import GoldenDesign
from serving.golden.writer import write_golden_model
from tests.gpu.jobs import ENGINE

EAGER = {**ENGINE, "enforce_eager": True}
BLOCKING = {"CUDA_LAUNCH_BLOCKING": "1"}
VARIANTS: dict[str, tuple[dict, dict[str, str]]] = {
    "eager": (EAGER, BLOCKING),
    "eager-no-mtp": ({**EAGER, "speculative_config": None}, BLOCKING),
    "eager-no-deepgemm": (EAGER, {**BLOCKING, "VLLM_USE_DEEP_GEMM": "0"}),
    "eager-no-e8m0": (EAGER, {**BLOCKING, "VLLM_USE_DEEP_GEMM_E8M0": "0"}),
}
MARKERS = ("illegal memory", "CUDA error", "Error:", 'File "')


def log(message: str) -> None:
    print(f"[fp8-variants {time.strftime('%H:%M:%S')}] {message}", flush=True)


def first_error_lines(text: str, limit: int = 40) -> list[str]:
    """The lines from the first CUDA error on (the traceback that names the launch)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "CUDA error" in line), None)
    if start is None:
        return [line for line in lines if any(m in line for m in MARKERS)][-limit:]
    return lines[max(0, start - limit) : start + 5]


def result_of(text: str) -> dict | None:
    lines = [line for line in text.splitlines() if line.startswith("RESULT ")]
    return json.loads(lines[-1][len("RESULT ") :]) if lines else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=450)
    parser.add_argument("--model-dir", type=Path, default=Path("/tmp/dsv4-fp8-golden"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = write_golden_model(args.model_dir, GoldenDesign(weight_format="fp8"))
    env = {**os.environ, "DSV4_GOLDEN_PRESET": "gpu-golden"}
    procs = {}
    for name, (engine, extra) in VARIANTS.items():
        command = [sys.executable, "-m", "tests.support.fp8_runner", str(model), json.dumps(engine)]
        handle = (args.out / f"{name}.log").open("w")
        procs[name] = (
            subprocess.Popen(
                command, stdout=handle, stderr=subprocess.STDOUT, env={**env, **extra}
            ),
            handle,
        )
        log(f"started {name}: {extra}")
    deadline = time.monotonic() + args.timeout
    summary: dict = {}
    for name, (proc, handle) in procs.items():
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        handle.close()
        text = (args.out / f"{name}.log").read_text(errors="replace")
        result = result_of(text) or {}
        summary[name] = {
            "exit": proc.returncode,
            "env": VARIANTS[name][1],
            "errors": sorted(result.get("errors", {})),
            "texts_ok": result.get("texts_ok"),
            "counters_ok": result.get("counters") == result.get("expected_counters"),
            "start_seconds": result.get("start_seconds"),
            "first_error": first_error_lines(text),
        }
        log(
            f"{name}: exit {proc.returncode}, {summary[name]['errors']=}, {result.get('texts_ok')=}"
        )
        (args.out / "variants.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
