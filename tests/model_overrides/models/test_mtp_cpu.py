"""DSV4 MTP speculative decoding on the CPU with the golden model (real vLLM engine).

Each configuration runs once in a child process (tests/support/mtp_runner.py); the tests
read its JSON. Expected counters come from simulating MTP on the golden design. Tests that
differ only in what they read share a child: every child records its load audit, and the
k=2 child decodes one batch at temperature 1 after its greedy ones.
"""

import json
import tempfile
from functools import cache
from pathlib import Path

import pytest

from serving.golden import GoldenDesign, write_golden_model
from tests.support.child_result import child_result
from tests.support.golden_prompts import CPU_MTP_MAX_TOKENS, expected_counters, mtp_prompts

# The families run is one engine serving every family: on a slow AVX2 machine (eager ops)
# it may pass the default 15 minutes.
pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
DRAFTED = "vllm:spec_decode_num_draft_tokens"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, golden_dir: Path) -> dict[float, Path]:
    half = write_golden_model(
        tmp_path_factory.mktemp("golden-half"), GoldenDesign(draft_agreement=0.5)
    )
    return {1.0: golden_dir, 0.5: half}


# The full-agreement children's batches: k=2's last one at temperature 1.
FULL = {1: "1,8", 2: "1,8,8@1", 3: "1,8"}


@cache
def _run(model_dir: str, k: int, batches: str, env_items: tuple = ()) -> dict:
    audit = tempfile.mkdtemp(prefix="mtp-audit-")
    env = {**dict(env_items), "DSV4_LOAD_AUDIT": audit}
    result = child_result("tests.support.mtp_runner", model_dir, str(k), batches, env=env)
    return {**result, "audit": audit}


def run(models, agreement: float, k: int, batches: str, **env: str) -> dict:
    return _run(str(models[agreement]), k, batches, tuple(sorted(env.items())))


def greedy(result: dict) -> list[dict]:
    return [r for r in result["runs"] if r["temperature"] == 0.0]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_full_agreement_accepts_every_draft_and_keeps_the_greedy_text(models, k: int):
    result = run(models, 1.0, k, FULL[k])
    design = GoldenDesign()
    for r in greedy(result):
        assert all(r["texts_ok"]), f"batch {r['batch']}: {r['texts']}"
        c = r["counters"]
        assert c[DRAFTED] > 0
        assert c[ACCEPTED] / c[DRAFTED] >= 0.99
        prompts = mtp_prompts(design, r["batch"])
        assert c == expected_counters(design, prompts, k, CPU_MTP_MAX_TOKENS)
    assert result["patches"]["dsv4-cpu-mtp-draft"] == "applied"
    assert result["seen"]["calls"] > 0 and result["seen"]["stale"] == 0


def test_half_agreement_accepts_about_half_exactly_as_designed(models):
    result = run(models, 0.5, 1, "8")
    design = GoldenDesign(draft_agreement=0.5)
    (r,) = result["runs"]
    assert all(r["texts_ok"])
    rate = r["counters"][ACCEPTED] / r["counters"][DRAFTED]
    assert rate == pytest.approx(0.5, abs=0.1)
    assert r["counters"] == expected_counters(design, mtp_prompts(design, 8), 1, CPU_MTP_MAX_TOKENS)


def test_without_the_cache_fix_draft_steps_see_stale_request_indices(models):
    fixed = run(models, 1.0, 2, FULL[2])
    broken = run(models, 1.0, 2, "8", DSV4_OVERRIDES_DISABLE="draft-step-token-request-cache")
    assert broken["patches"]["draft-step-token-request-cache"] == "disabled"
    assert broken["seen"]["stale"] > 0, "the upstream stale-cache failure did not reproduce"
    assert fixed["seen"]["stale"] == 0


def test_deferred_and_inline_hc_paths_give_identical_text_and_counters(models):
    inline = run(models, 1.0, 2, FULL[2])
    deferred = run(models, 1.0, 2, "1,8", DSV4_HC_PATH="deferred")
    assert inline["use_fused_mhc"] == [False]
    assert deferred["use_fused_mhc"] == [True]
    assert deferred["patches"]["dsv4-cpu-hc-path"] == "applied"
    assert [r["batch"] for r in greedy(inline)] == [r["batch"] for r in deferred["runs"]]
    for a, b in zip(greedy(inline), deferred["runs"], strict=True):
        assert a["texts"] == b["texts"]
        assert a["counters"] == b["counters"]


def test_every_draft_parameter_is_written_by_the_mtp_weights(models):
    audit = Path(run(models, 1.0, 1, FULL[1])["audit"])
    reports = {p.name.split("-")[0]: json.loads(p.read_text()) for p in audit.glob("*.json")}
    draft = reports["CpuDeepSeekV4MTP"]
    assert draft["parameters"] and set(draft["parameters"]) == set(draft["loaded"])
    target = reports["DeepseekV4ForCausalLM"]
    assert set(target["parameters"]) == set(target["loaded"])
    # Target and draft together use every checkpoint tensor: the target all but mtp.*,
    # the draft every mtp.* (its loader rejects names it cannot place).
    index = json.loads((models[1.0] / "model.safetensors.index.json").read_text())
    in_checkpoint = sorted(n for n in index["weight_map"] if n.startswith("mtp."))
    assert sorted(n for n in draft["consumed"] if n.startswith("mtp.")) == in_checkpoint
    assert sorted(target["consumed"]) == sorted(index["weight_map"])


def test_sampling_at_temperature_one_keeps_the_golden_text(models):
    # The golden target puts probability 1 - 4e-5 on the successor: sampled decoding
    # must reproduce the greedy text, through drafts, verification and bonus tokens.
    fixed = run(models, 1.0, 2, FULL[2])
    assert fixed["patches"]["cpu-rejection-expand-dtype"] == "applied"
    (sampled,) = [r for r in fixed["runs"] if r["temperature"] == 1.0]
    assert sampled["batch"] == 8 and all(sampled["texts_ok"]), sampled["texts"]
    broken = run(models, 1.0, 2, "8@1", DSV4_OVERRIDES_DISABLE="cpu-rejection-expand-dtype")
    assert broken["runs"][0]["temperature"] == 1.0
    assert not all(broken["runs"][0]["texts_ok"]), "upstream's CPU expand bug did not reproduce"


@pytest.fixture(scope="module")
def families_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    design = GoldenDesign(draft_pattern="families")
    return write_golden_model(tmp_path_factory.mktemp("golden-families"), design)


def test_acceptance_families_give_the_designed_text_and_counters_in_one_engine(families_dir):
    """Acceptance 1.0, about 0.5 on the first position, and 0.0, side by side in one engine
    (serving/golden/design.py, FAMILIES); the text is the default model's."""
    families = child_result("tests.support.family_runner", str(families_dir), "2")["families"]
    for name, run in families.items():
        assert all(run["texts_ok"]), (name, run)
        assert run["counters"] == run["expected"], (name, run)
    assert families["high"]["counters"][ACCEPTED] == families["high"]["counters"][DRAFTED]
    assert families["zero"]["counters"][ACCEPTED] == 0
    half = families["half"]["counters"]
    assert 0 < half[ACCEPTED] < half[DRAFTED] / 2  # half the first drafts, no second one
