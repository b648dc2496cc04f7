"""The CPU side of the GPU numerics test: the numeric golden variant's log-probabilities on
vLLM's CPU backend (native `_C`), written once here and read on the GPU machine.

    python -m tests.gpu.cpu_reference [OUT_JSON]

The GPU machine has no CPU backend (vLLM's CUDA build), so the CPU run travels as data.
The file records the checkpoint's digest: tests/serving/golden/test_gpu_reference.py fails
on the CPU when the golden model changes and this file was not rewritten.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

from serving.golden import GoldenDesign, write_golden_model

REFERENCE = Path(__file__).parent / "data" / "numeric-cpu.json"


def checkpoint_digest(model_dir: Path) -> str:
    """sha256 over the config and the weight shards, in name order."""
    digest = hashlib.sha256()
    for path in sorted(model_dir.glob("*.safetensors")) + [model_dir / "config.json"]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def numeric_model(parent: Path, name: str = "numeric") -> Path:
    return write_golden_model(parent / name, GoldenDesign(variant="numeric"))


def main(out: Path) -> None:
    import os
    import subprocess

    from tests.gpu.jobs import NUMERIC_MAX_TOKENS, NUMERIC_PROMPTS
    from tests.support.checkpoint_jitter import jittered_copy
    from tests.support.golden_prompts import engine_env

    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = numeric_model(Path(tmp))
        jitter = jittered_copy(model, Path(tmp) / "numeric-jitter")
        for name, path in (("cpu", model), ("cpu-jitter", jitter)):
            spec = {
                "model_dir": str(path),
                "library": "native",
                "prompts": NUMERIC_PROMPTS,
                "max_tokens": NUMERIC_MAX_TOKENS,
            }
            print(f"cpu_reference: {name} ...", file=sys.stderr, flush=True)
            proc = subprocess.run(
                [sys.executable, "-m", "tests.support.kernel_path_runner", json.dumps(spec)],
                capture_output=True,
                text=True,
                check=False,
                env={**os.environ, **engine_env()},
            )
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if proc.returncode or not line:
                raise SystemExit(f"{name} failed:\n{proc.stderr[-4000:]}")
            runs[name] = json.loads(line.removeprefix("RESULT "))
        digest = checkpoint_digest(model)
    import platform

    record = {
        "checkpoint_sha256": digest,
        "prompts_words": [len(p.split()) for p in NUMERIC_PROMPTS],
        "max_tokens": NUMERIC_MAX_TOKENS,
        "cpu": platform.processor() or platform.machine(),
        "runs": runs,
    }
    out.write_text(json.dumps(record))
    print(f"cpu_reference: wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REFERENCE)
