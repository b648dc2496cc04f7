"""The eager routing ops (model_overrides/kernels/cpu_ops/routing.py) against vLLM's native `_C`.

Cases: tests/support/cpu_op_cases/routing.py. Every output is compared bit for bit: the expert ids
(including the order among tied scores, which is libstdc++'s heap order) and the fp32
weights, because the eager version does the kernel's fp32 arithmetic in its order (ATen's
exp_u20 and SLEEF's logf_u10 emulated exactly). Measured: all cases exact, also with
ATEN_CPU_CAPABILITY=avx2 and =default. Exception by design: hash_topk_cpu never writes
slots routed_topk .. topk-2 (2+ fused shared experts); those cases compare the other slots.
"""

import json
import subprocess
import sys

import pytest
import torch

from model_overrides.kernels.cpu_ops.routing import OPS
from tests.support.cpu_op_cases.routing import CASES
from tests.support.native_ops import ROOT, compare_with_native, oracle_prefix

_NATIVE_SCHEMAS = """
import ctypes, json, os, sys
if len(sys.argv) > 1:
    ctypes.CDLL(sys.argv[1])
import torch, vllm
torch.ops.load_library(os.path.join(os.path.dirname(vllm.__file__), "_C.abi3.so"))
out = {}
for name in sys.argv[2:]:
    s = getattr(torch.ops._C, name).default._schema
    out[name] = {
        "str": str(s),
        "args": [(a.name, str(a.type)) for a in s.arguments],
        "returns": [str(r.type) for r in s.returns],
    }
print("SCHEMAS " + json.dumps(out))
"""


def native_schemas(names: list[str]) -> dict:
    """The native ops' schemas, read in a child that loads `_C` (never in pytest's process)."""
    prefix = oracle_prefix()
    emulate = prefix[1] if prefix else ""
    proc = subprocess.run(
        [sys.executable, "-c", _NATIVE_SCHEMAS, emulate, *names],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("SCHEMAS ")), None)
    assert proc.returncode == 0 and line, proc.stderr[-3000:]
    return json.loads(line.removeprefix("SCHEMAS "))


@pytest.fixture(scope="module")
def results() -> dict:
    return compare_with_native("tests.support.cpu_op_cases.routing")


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_native(results: dict, case: str) -> None:
    outputs = results[case]
    assert set(outputs) == {"weights", "ids"}, case
    for name, d in outputs.items():
        assert d["shape_equal"] and d["dtype_equal"] and d["exact"], f"{case}/{name}: {d}"


def test_schemas_are_native() -> None:
    native = native_schemas([op.name for op in OPS])
    for op in OPS:
        ours = torch._C.parse_schema(f"_C::{op.schema}")
        assert str(ours) == native[op.name]["str"], op.name


def test_fakes_match_impl_shapes() -> None:
    for build in (CASES["biased_dsv4_t5_k6"], CASES["hash_dsv4_t5_k8"]):
        case = build()
        op = next(o for o in OPS if o.name == case.op)
        real = op.impl(*case.args)
        fake = op.fake(*case.args)
        assert [(t.shape, t.dtype) for t in real] == [(t.shape, t.dtype) for t in fake]
