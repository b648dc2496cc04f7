"""A compile-job owner for the pool's tests: vLLM's JIT owners (TileLang, DeepGEMM) compile
only on a GPU, so the CPU tests hand the pool this class, built as the pool builds vLLM's
(no arguments) and compiled as they are (``compile(key)``), writing one file per key."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

OUT_ENV = "DSV4_TEST_JIT_OUT"


class CompileProbe:
    @dataclass(frozen=True)
    class CompileKey:
        name: str
        seconds: float = 0.0
        fail: bool = False

    def compile(self, key: CompileKey) -> None:
        if key.fail:
            raise RuntimeError(f"cannot compile {key.name}")
        time.sleep(key.seconds)
        out = Path(os.environ[OUT_ENV])
        (out / f"{key.name}.{os.getpid()}").write_text("compiled")
