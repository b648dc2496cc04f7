"""Run tests/support/op_oracle.py for a cases module; native `_C` ops here or under bf16emu."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT


def cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


# The bf16emu test oracle is the workspace's (../shared/tools/bf16emu), not the project's:
# a clone without it beside skips the native comparisons on CPUs that need it.
BF16EMU_ENV = "DSV4_BF16EMU_SOURCE"


def bf16emu_source() -> Path:
    default = ROOT.parent / "shared" / "tools" / "bf16emu" / "bf16emu.c"
    return Path(os.environ.get(BF16EMU_ENV, default))


def bf16emu_library() -> Path:
    """Build the bf16emu oracle once into .cache (a test oracle, never shipped)."""
    source = bf16emu_source()
    out = ROOT / ".cache" / "bf16emu" / "libbf16emu.so"
    if not out.exists() or out.stat().st_mtime < source.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(out), str(source)], check=True)
    return out


def oracle_prefix() -> list[str]:
    """Extra child arguments so that vLLM's native `_C` runs on this CPU."""
    flags = cpu_flags()
    if "avx512_bf16" in flags:
        return []
    if "avx512f" in flags:
        if not bf16emu_source().exists():
            pytest.skip(
                f"no AVX-512 BF16 here and no bf16emu oracle at {bf16emu_source()} "
                f"(${BF16EMU_ENV}): vLLM's native _C cannot run for the comparison"
            )
        return ["--emulate", str(bf16emu_library())]
    pytest.skip("no AVX-512: vLLM's native _C cannot run on this CPU, even emulated")


def compare_with_native(cases_module: str, timeout: int = 600) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.op_oracle", cases_module, *oracle_prefix()],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert proc.returncode == 0 and line, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(line.removeprefix("RESULT "))


# A bf16 output may differ from the native op's by accumulation order: at most one bf16
# ulp of the output's magnitude, on a few elements.
BF16_REL = 2.0**-7
FLIP_FRACTION = 0.005


def assert_within_bf16(d: dict, where: str) -> None:
    """One output's comparison record (``compare_with_native``) within bf16 rounding."""
    numel = 1
    for n in d["shape"]:
        numel *= n
    assert d["max_abs"] <= BF16_REL * d["max_ref"], where
    assert d["mismatched"] <= max(2, int(FLIP_FRACTION * numel)), where
