"""The eager packed-linear ops (model_overrides/kernels/cpu_ops/linear.py) against vLLM's `_C`.

Cases: tests/support/cpu_op_cases/linear.py.

- convert_weight_packed: byte for byte (every packed dtype, DSV4's wo_a shapes), and the
  input is left unchanged.
- weight_packed_linear / bmm_cpu (bf16 out): both sides accumulate in fp32, in different
  orders (AVX512-BF16 dot products or oneDNN brgemm vs MKL sgemm), and round once. Measured:
  exact for M <= 4; otherwise <= 0.04% of elements differ, by at most 0.0078 at outputs up
  to 5.3 (near-zero outputs can differ by many of their own ulps; the error is relative to
  the accumulation's scale). Bound: 1 bf16 ulp of the largest output (2^-7 of it), and
  at most 0.5% of elements.

The native schema of convert_weight_packed prints as `Tensor($0! -> ) weight`, which
Library.define cannot parse; ours is `Tensor! weight`, which parses to that same schema.
"""

import pytest
import torch

from model_overrides.kernels.cpu_ops.linear import OPS
from tests.model_overrides.kernels.test_cpu_ops_routing import native_schemas
from tests.support.cpu_op_cases.linear import CASES
from tests.support.native_ops import assert_within_bf16, compare_with_native


@pytest.fixture(scope="module")
def results() -> dict:
    return compare_with_native("tests.support.cpu_op_cases.linear")


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_native(results: dict, case: str) -> None:
    outputs = results[case]
    assert outputs, case
    for name, d in outputs.items():
        where = f"{case}/{name}: {d}"
        if case.startswith("pack_") or name != "out":
            assert d["exact"], where
            continue
        assert d["shape_equal"] and d["dtype_equal"] and d["nan_equal"], where
        assert_within_bf16(d, where)


@pytest.fixture(scope="module")
def native() -> dict:
    return native_schemas([op.name for op in OPS])


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_schema_is_native(native: dict, op) -> None:
    ours = torch._C.parse_schema(f"_C::{op.schema}")
    assert str(ours) == native[op.name]["str"]
    # and, alias annotations aside, the same argument names, types and returns
    assert [(a.name, str(a.type)) for a in ours.arguments] == [
        tuple(a) for a in native[op.name]["args"]
    ]
    assert [str(r.type) for r in ours.returns] == native[op.name]["returns"]


def test_registers_and_dispatches() -> None:
    """The schemas define, and the impls/fakes run, through the dispatcher (as the patch
    registers them), in a scratch namespace."""
    lib = torch.library.Library("dsv4_test_linear", "DEF")
    for op in OPS:
        lib.define(op.schema)
        lib.impl(op.name, op.impl, "CPU")
        if op.fake is not None:
            torch.library.register_fake(f"dsv4_test_linear::{op.name}", op.fake, lib=lib)
    ns = torch.ops.dsv4_test_linear
    w = torch.randn(2, 64, 256).to(torch.bfloat16)
    packed = ns.convert_weight_packed(w)
    x = torch.randn(2, 3, 256).to(torch.bfloat16)
    out = torch.empty(2, 3, 64, dtype=torch.bfloat16)
    ns.bmm_cpu(out, x, packed, True, None)
    expected = torch.bmm(x.float(), w.float().transpose(1, 2)).to(torch.bfloat16)
    assert torch.equal(out, expected)
    with torch._subclasses.FakeTensorMode():
        fake_w = torch.empty(8, 100, dtype=torch.bfloat16)
        assert ns.convert_weight_packed(fake_w).shape == (100, 8)
