"""The HC-state contract check and the PR #42930 fixes, on real installed classes.

Each regression fixture reproduces one May-2026 bug shape on top of a real vLLM
(or our CPU MTP) class; the check must flag it, and the registry's fix must mend it.
"""

import inspect
import os
import re
import signal
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
from vllm.models.deepseek_v4.cpu.model import DeepseekV4DecoderLayer as CpuDecoder
from vllm.models.deepseek_v4.nvidia.mtp import DeepSeekV4MultiTokenPredictor

from model_overrides.contracts import check_runner, hc_state_contract
from model_overrides.models.dsv4_mtp_cpu import CpuDeepSeekV4MTPLayer
from model_overrides.patches import hc_state_fixes

HC_RULES = (
    "decoder-binds",
    "decoder-returns-4-tuple",
    "logits-own-attrs",
    "hc-post-gated",
    "target-exposes-mtp-buffer",
)
RULE_LINE = re.compile(r"^  (ok  |FAIL)  (\S+)", re.MULTILINE)


def _assert_hc_contract_holds(proc: subprocess.CompletedProcess, variants: int) -> None:
    """Every HC-state rule holds on every variant; the summary counts every rule line; and
    ``--strict`` fails exactly when a rule (here: a SwiGLU clamp finding) does not hold."""
    rules = RULE_LINE.findall(proc.stdout)
    hc = [status for status, rule in rules if rule in HC_RULES]
    assert hc == ["ok  "] * len(HC_RULES) * variants, proc.stdout
    failed = [rule for status, rule in rules if status == "FAIL"]
    assert all(rule.startswith("moe-clamp[") for rule in failed), failed
    assert f"{len(rules) - len(failed)} of {len(rules)} rules hold" in proc.stdout
    assert proc.returncode == (1 if failed else 0), proc.stdout + proc.stderr[-3000:]


def test_check_reports_every_variant_of_the_installed_vllm():
    proc = subprocess.run(
        [sys.executable, "-m", "model_overrides", "check", "--platform", "all", "--strict"],
        capture_output=True,
        text=True,
        # 47 s on an idle 2-core machine; past 300 s once beside the image build at the
        # start of a full run, which shares both cores and the disk with it.
        timeout=600,
    )
    for variant in ("[nvidia] (imported", "[amd] (read from source", "[xpu]", "[cpu]"):
        assert variant in proc.stdout
    _assert_hc_contract_holds(proc, variants=4)


def _forced(code_or_args: list[str]) -> subprocess.CompletedProcess:
    """A child on vLLM's AVX2 library, as on a CPU without AVX-512 BF16 (any lower
    library registers the `_C` namespace that `import vllm._C` would register again)."""
    return subprocess.run(
        [sys.executable, *code_or_args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "DSV4_CPU_KERNEL_LIBRARY": "avx2"},
    )


def test_importing_the_amd_variant_next_to_a_lower_library_aborts_the_process():
    # Why the check imports other platforms' variants in a child: this is fatal.
    proc = _forced(
        [
            "-c",
            "from model_overrides.kernels import kernel_library as k; k.force_if_requested(); "
            "import vllm._custom_ops; assert k.loaded() == '_C_AVX2'; "
            "import vllm.models.deepseek_v4.amd.model",
        ]
    )
    assert proc.returncode == -signal.SIGABRT, proc.stderr[-2000:]
    assert "Only a single TORCH_LIBRARY can be used to register the namespace _C" in proc.stderr


def test_check_survives_and_holds_on_a_lower_kernel_library():
    proc = _forced(["-m", "model_overrides", "check", "--platform", "all", "--strict"])
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr[-3000:]  # not a crash
    assert "[amd] (read from source; importing it in a child failed (killed by SIGABRT))" in (
        proc.stdout
    )
    _assert_hc_contract_holds(proc, variants=4)


@pytest.mark.parametrize(
    "platform,variants", [("cuda", ["nvidia"]), ("rocm", ["amd"]), ("cpu", ["cpu"])]
)
def test_check_selects_variants_by_platform(platform, variants):
    found, findings = check_runner.run_check(platform)
    assert [v.name for v in found] == variants
    hc = [f for f in findings if f.rule in HC_RULES]
    assert len(hc) == len(HC_RULES) * len(variants) and all(f.ok for f in hc)
    clamp = {f.rule for f in findings} - set(HC_RULES)
    assert f"moe-clamp[{variants[0]}/bf16]" in clamp  # every variant gets the clamp rules


# -- bug 1: decoder forward without None defaults for the HC state --------------


class OldSignatureDecoder(CpuDecoder):
    def forward(self, x, positions, input_ids, post_mix, res_mix, residual):
        return super().forward(x, positions, input_ids, post_mix, res_mix, residual)


def test_decoder_without_defaults_is_flagged_and_fixed():
    ok, detail = hc_state_contract.check_decoder_binds(
        hc_state_contract.class_from_runtime(OldSignatureDecoder)
    )
    assert not ok and "no default for ['post_mix', 'res_mix', 'residual']" in detail
    with pytest.raises(TypeError, match="missing a required argument"):
        inspect.signature(OldSignatureDecoder.forward).bind(
            object(), positions=0, x=0, input_ids=None
        )

    hc_state_fixes.fix_decoder_defaults(OldSignatureDecoder)
    inspect.signature(OldSignatureDecoder.forward).bind(object(), positions=0, x=0, input_ids=None)
    calls = []
    CpuDecoder_forward = CpuDecoder.forward  # noqa: N806
    try:
        CpuDecoder.forward = lambda self, *a: calls.append(a) or ("x", None, None, None)
        out = OldSignatureDecoder.forward(
            object.__new__(OldSignatureDecoder), positions=1, x=2, input_ids=None
        )
    finally:
        CpuDecoder.forward = CpuDecoder_forward
    assert out == ("x", None, None, None) and calls == [(2, 1, None, None, None, None)]
    assert len(inspect.signature(OldSignatureDecoder.forward).return_annotation.__args__) == 4


# -- bug 2: compute_logits uses an attribute its predictor does not own ----------


class ForeignAttrPredictor(DeepSeekV4MultiTokenPredictor):
    def compute_logits(self, hidden_states, spec_step_idx=0):
        return self.hc_head_op(hidden_states)


class _Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.hc_head_op = nn.Identity()


def _bare_predictor(cls):
    inst = cls.__new__(cls)
    nn.Module.__init__(inst)
    inst.mtp_start_layer_idx, inst.num_mtp_layers = 8, 1
    inst.layers = nn.ModuleDict({"8": _Layer()})
    return inst


def test_compute_logits_with_a_foreign_attribute_is_flagged_and_fixed():
    layer = hc_state_contract.class_from_runtime(CpuDeepSeekV4MTPLayer)  # owns hc_head_op
    info = hc_state_contract.class_from_runtime(ForeignAttrPredictor)
    ok, detail = hc_state_contract.check_logits_attrs(info, layer)
    assert not ok and "self.hc_head_op" in detail
    with pytest.raises(AttributeError, match="hc_head_op"):
        _bare_predictor(ForeignAttrPredictor).compute_logits(torch.ones(2))

    hc_state_fixes.fix_logits_owner(
        ForeignAttrPredictor, hc_state_fixes.missing_logits_attrs(info, layer)
    )
    inst = _bare_predictor(ForeignAttrPredictor)
    assert torch.equal(inst.compute_logits(torch.ones(2)), torch.ones(2))
    assert "hc_head_op" not in dict(inst.named_modules())  # not registered twice


# -- bug 3: hc_post applied unconditionally over an inline block -----------------


class InlineDecoder(CpuDecoder):
    pass


class UngatedMTPLayer(CpuDeepSeekV4MTPLayer):
    def forward(self, input_ids, positions, previous_hidden_states, inputs_embeds):
        x = self.e_proj(inputs_embeds).unsqueeze(-2)
        x, residual, post_mix, res_mix = self.mtp_block(
            positions=positions, x=x, input_ids=input_ids
        )
        x = self.mtp_block.hc_post(x, residual, post_mix, res_mix)
        return x.flatten(1)


def test_unconditional_hc_post_over_an_inline_block_is_flagged_and_fixed():
    layer = hc_state_contract.class_from_runtime(UngatedMTPLayer)
    decoder = hc_state_contract.class_from_runtime(InlineDecoder)
    ok, detail = hc_state_contract.check_hc_post_gated(layer, decoder)
    assert not ok and "run even when the block applied it inline" in detail
    block = InlineDecoder.__new__(InlineDecoder)
    nn.Module.__init__(block)
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.mhc import MHCPostOp

    with set_current_vllm_config(VllmConfig()):
        block.mhc_post = MHCPostOp()
    x = torch.randn(3, 4, 8, dtype=torch.bfloat16)
    with pytest.raises(AttributeError, match="NoneType"):
        block.hc_post(x, None, None, None)  # inline block: no state to post-mix with

    hc_state_fixes.fix_hc_post_gate(UngatedMTPLayer, InlineDecoder)
    assert block.hc_post(x, None, None, None) is x
    assert not getattr(CpuDecoder.hc_post, "_dsv4_gated", False)  # the real class is untouched


def test_registry_reports_the_fixes_not_needed_on_this_vllm():
    from model_overrides.status import collect

    outcomes = {s.name: s.outcome.value for s in collect()}
    for name in (
        "pr42930-decoder-defaults",
        "pr42930-mtp-logits-owner",
        "pr42930-mtp-hc-post-gate",
    ):
        assert outcomes[name] == "not needed"
