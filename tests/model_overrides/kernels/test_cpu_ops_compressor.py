"""The eager KV compressor ops (model_overrides/kernels/cpu_ops/compressor.py) against
vLLM's native `_C` ones.

Cases: tests/support/cpu_op_cases/compressor.py. Every output must be bit-exact: the state
cache after `save_partial_states_cpu`, and every byte of the paged KV cache (written
slots and the random bytes around them) after the two compress-and-store ops. The
eager version reproduces the compiled kernel's fp32 rounding step by step (SLEEF exp,
FMA accumulation, lane-tree reduction, correctly rounded sqrt); the "cancel" cases make
half of the RoPE outputs pure rounding noise, so a single one-ulp slip upstream shows
up as tens of mismatched bytes (measured: torch.exp instead of SLEEF -> 212 bytes,
unfused multiply-adds -> 1419, torch.sqrt -> 74).

The oracle runs once per ATen ISA level the fallback can meet: the machine's own, AVX2
and the default build (no FMA in ATen: `_fma_f32` then takes its float64 path).
"""

import ctypes
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

import model_overrides.kernels.cpu_ops.compressor as ops
from tests.support.cpu_op_cases.compressor import CASES
from tests.support.native_ops import compare_with_native, cpu_flags

ISAS = ("native", "avx2", "default")


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    out = {}
    for isa in ISAS:
        with pytest.MonkeyPatch.context() as mp:
            if isa != "native":
                mp.setenv("ATEN_CPU_CAPABILITY", isa)
            out[isa] = compare_with_native("tests.support.cpu_op_cases.compressor")
    return out


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_native(results: dict[str, dict], isa: str, case: str) -> None:
    outputs = results[isa][case]
    assert outputs, case
    for name, d in outputs.items():
        assert d["exact"], f"{isa} {case}/{name}: {d}"


# --- the numerical building blocks, without the native library ---------------------


def _correct_fma(a: float, b: float, c: float) -> np.float32:
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    x = np.float32(float(exact))
    cands = [x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))]
    # nearest, ties to even mantissa
    return min(cands, key=lambda y: (abs(Fraction(float(y)) - exact), int(y.view(np.int32)) & 1))


def test_fma_emulation_is_single_rounded() -> None:
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(3000, generator=g) for _ in range(3))
    # float64 sums that land on a float32 midpoint but are not one (double-rounding traps)
    a = torch.cat([a, torch.tensor([1 + 2**-20, 1 + 2**-20])])
    b = torch.cat([b, torch.tensor([(1 - 2**-20) * 64, -(1 - 2**-20) * 64])])
    c = torch.cat([c, torch.tensor([2.0**30 + 2**7, -(2.0**30 + 2**7)])])
    got = ops._fma_f32_exact(a, b, c)
    want = [_correct_fma(x, y, z) for x, y, z in zip(*(t.tolist() for t in (a, b, c)), strict=True)]
    assert torch.equal(got, torch.tensor(np.array(want, dtype=np.float32)))
    if ops._addcmul_is_fused():
        assert torch.equal(ops._fma_f32(a, b, c), got)


def test_sqrt_is_correctly_rounded() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.cat(
        [
            torch.rand(200_000, generator=g) * 1e3,
            torch.rand(200_000, generator=g) * 1e-6,
            torch.tensor([0.0, 1.0, 2.0, 4.0, 1e-30, 3e38]),
        ]
    )
    want = torch.from_numpy(np.sqrt(x.numpy()))  # IEEE sqrt
    assert torch.equal(ops._sqrt_f32(x), want)


def _sleef_shim(tmp: Path) -> ctypes.CDLL | None:
    """Compile a caller of ATen's own SLEEF expf (the one the native kernel calls)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or "avx2" not in cpu_flags() or "fma" not in cpu_flags():
        return None
    src = tmp / "sleef_shim.c"
    src.write_text(
        "#include <immintrin.h>\n#include <stddef.h>\n"
        "__m256 Sleef_expf8_u10(__m256);\n"
        '__attribute__((target("avx2,fma")))\n'
        "void expf8(const float* x, float* y, size_t n) {\n"
        "  for (size_t i = 0; i + 8 <= n; i += 8)\n"
        "    _mm256_storeu_ps(y + i, Sleef_expf8_u10(_mm256_loadu_ps(x + i)));\n"
        "}\n"
    )
    lib_dir = Path(torch.__file__).parent / "lib"
    out = tmp / "libsleef_shim.so"
    cmd = [cc, "-O2", "-shared", "-fPIC", "-o", str(out), str(src), f"-L{lib_dir}", "-ltorch_cpu"]
    if subprocess.run(cmd, capture_output=True).returncode != 0:
        return None
    return ctypes.CDLL(str(out))


def test_exp_matches_sleef(tmp_path: Path) -> None:
    lib = _sleef_shim(tmp_path)
    if lib is None:
        pytest.skip("no C compiler, or no AVX2/FMA to call ATen's SLEEF with")
    g = torch.Generator().manual_seed(2)
    x = torch.cat(
        [
            -torch.rand(1 << 20, generator=g) * 110,  # down past the -104 flush
            -torch.rand(1 << 20, generator=g) * 2,
            torch.randn(1 << 18, generator=g) * 40,
            torch.tensor([0.0, -0.0, -104.0, -104.0001, -87.5, -88.7, 100.0, 100.01]),
            torch.tensor([float("-inf"), float("inf")] + [0.0] * 6),
        ]
    )
    want = torch.empty_like(x)
    lib.expf8(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(want.data_ptr()), x.numel())
    assert torch.equal(ops._sleef_expf(x).view(torch.int32), want.view(torch.int32))


def test_float64_fma_path_writes_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """ATen builds without SIMD do not fuse addcmul; the float64 FMA must agree."""
    if not ops._addcmul_is_fused():
        pytest.skip("this ATen has no fused addcmul: the float64 path is the only one")
    for name in ("main_r4_cancel", "indexer_r4_cancel"):
        case = CASES[name]()
        fast = [a.clone() if isinstance(a, torch.Tensor) else a for a in case.args]
        slow = [a.clone() if isinstance(a, torch.Tensor) else a for a in case.args]
        case.impl(*fast)
        with monkeypatch.context() as mp:
            mp.setattr(ops, "_addcmul_is_fused", lambda: False)
            case.impl(*slow)
        assert torch.equal(fast[7], slow[7]), name


NATIVE_SCHEMAS = {
    "save_partial_states_cpu": "save_partial_states_cpu(Tensor kv, Tensor score, Tensor ape, "
    "Tensor positions, Tensor(a!) state_cache, Tensor slot_mapping) -> ()",
    **{
        name: f"{name}(Tensor state_cache, Tensor gather_slots, Tensor positions, "
        "Tensor kv_slot_mapping, Tensor rms_norm_weight, float rms_norm_eps, "
        "Tensor cos_sin_cache, Tensor(a!) kv_cache_2d, int kv_cache_block_size, "
        "int compress_ratio) -> ()"
        for name in ("compress_norm_rope_store_cpu", "compress_norm_rope_store_indexer_cpu")
    },
}


def test_op_schemas() -> None:
    assert {op.name: op.schema for op in ops.OPS} == NATIVE_SCHEMAS
