"""The golden model in DeepSeek-V4's FP8 release format on vLLM's CUDA path.

FP8 block-scaled linears and fp8 experts with power-of-two (ue8m0) scales, loaded through
vLLM's ``DeepseekV4FP8Config`` as a real V4 checkpoint is (serving/golden/fp8.py). Every
weight that carries the design quantizes exactly, so the designed text and MTP counters
must survive; tests/support/fp8_runner.py records which methods vLLM built.
"""

from __future__ import annotations

import pytest

from tests.gpu.jobs import FP8

pytestmark = pytest.mark.gpu
E4M3 = "torch.float8_e4m3fn"


def test_fp8_release_format_loads_as_fp8_and_keeps_the_design(pool):
    result = pool.result(FP8)
    quant = result["quant"]
    print(f"FP8: start {result.get('start_seconds')}s; {quant}")
    assert not result["errors"], result["errors"]
    assert quant["quant_method"] == "deepseek_v4_fp8" and quant["expert_dtype"] == "fp8"
    for role in ("target", "draft"):
        linears = {k: v for k, v in quant[role].items() if k != "experts"}
        assert linears, (role, quant[role])
        for name, linear in linears.items():
            assert "Fp8" in linear["method"], (role, name, linear)
            assert linear["weight"]["dtype"] == E4M3, (role, name, linear)
    experts = quant["target"]["experts"]
    assert "Fp8" in experts["method"] and experts["w13_weight"]["dtype"] == E4M3, experts
    assert all(result["texts_ok"]), result["texts"]
    assert result["counters"] == result["expected_counters"]
