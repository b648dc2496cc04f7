"""The speculation guard in vLLM's real scheduler, on the CPU backend, with the golden
families checkpoint (drafts always, half, never right). Two child engines: the guard in
script mode (k fixed per step), whose counters must be the simulator's step for step,
which proves where the guard hooks in and the one-step lag; and the adaptive guard over
phases of changing acceptance. Behaviour only: timing targets are the bench's.

The adaptive run takes a fixed step cost (``step_cost``, about what this engine measures
on a quiet 2-core machine) instead of fitting it: beside the rest of the suite a step can
take 100x its quiet time (CI, and here with the prefix-routing app alongside: steps of
60 ms took up to 8 s), and what the guard decides from such timings says nothing about
its hook. So its decisions here follow from the engine's own acceptance counts alone.
The online fit is tested on simulated steps with delays
(tests/model_overrides/guard/test_spec_guard.py) and on this engine by
`dsv4-serve bench --workloads ...` (docs/benchmarks.md)."""

from pathlib import Path

import pytest

from model_overrides.guard.spec_guard_config import GUARD_ENV, GuardSettings
from serving.golden import GoldenDesign, write_golden_model
from serving.golden.writer import read_design
from tests.support.child_result import child_result
from tests.support.golden_prompts import expected_counters

# Not guard_runner: the runners set vLLM's environment at import (child processes only).
from tests.support.guard_plan import MAX_TOKENS, K, prompts_of

pytestmark = pytest.mark.engine
DRAFTS = "vllm:spec_decode_num_drafts"
DRAFTED = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
SCRIPT = [2, 0, 1]
PLAN = "high:2,zero:8,zero:8,high:8,half:8,mixed:8"
# Per step, prefill token, request, verified and proposed draft per request (seconds): at
# batch 8, k=0/1/2 steps of 64/80/96 ms, so k=2 wins on high, 0 on zero, 1 on half.
STEP_COST = (0.04, 0.0, 0.003, 0.001, 0.001, 0.0)


@pytest.fixture(scope="module")
def families_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    design = GoldenDesign(draft_pattern="families")
    return write_golden_model(tmp_path_factory.mktemp("golden-families"), design)


def run(model_dir: Path, plan: str, settings: GuardSettings) -> dict:
    env = settings.engine_env()
    return child_result("tests.support.guard_runner", str(model_dir), plan, env=env)


@pytest.fixture(scope="module")
def adaptive(families_dir: Path) -> dict:
    return run(families_dir, PLAN, GuardSettings(mode="adaptive", step_cost=STEP_COST))


def test_a_scripted_k_gives_the_simulators_counters_step_for_step(families_dir):
    result = run(families_dir, "half:1", GuardSettings(mode="script", script=SCRIPT))
    (phase,) = result["phases"]
    assert all(phase["texts_ok"])
    design = read_design(families_dir)
    (prompt,) = prompts_of(design, "half", 1)
    expected = design.expected_spec_counters(prompt, MAX_TOKENS, K, SCRIPT)
    assert phase["counters"] == expected
    # A fixed k of 2 drafts more: the script did change what the worker proposed.
    assert expected[DRAFTED] < design.expected_spec_counters(prompt, MAX_TOKENS, K)[DRAFTED]
    assert result["state"]["decisions"]["script"] > 0


def test_every_text_is_the_greedy_one_whatever_k_the_guard_picked(adaptive):
    for phase in adaptive["phases"]:
        assert all(phase["texts_ok"]), phase


def phase_decisions(result: dict, index: int) -> list[dict]:
    phase = result["phases"][index]
    return [d for d in result["decisions"] if phase["started"] <= d["t"] <= phase["ended"]]


def held(decisions: list[dict]) -> list[int]:
    return [d["k"] for d in decisions if d["reason"] != "probe"]


def test_drafts_that_are_never_right_turn_drafting_off(adaptive, families_dir):
    zero = phase_decisions(adaptive, 1) + phase_decisions(adaptive, 2)
    assert any(d["k"] == 0 and d["reason"] == "down" for d in zero), zero
    assert held(phase_decisions(adaptive, 2))[-1:] == [0]
    # With drafting off only the probe steps draft: far fewer than a static k=2 would.
    design = read_design(families_dir)
    static = expected_counters(design, prompts_of(design, "zero", 8), K, MAX_TOKENS)
    second = adaptive["phases"][2]["counters"]
    assert second[ACCEPTED] == 0
    assert second[DRAFTS] < static[DRAFTS] / 2, (second, static)


def test_drafting_comes_back_when_drafts_are_right_again(adaptive):
    decisions = phase_decisions(adaptive, 3)
    assert any(d["k"] == K and d["reason"] == "up" for d in decisions), decisions
    high = adaptive["phases"][3]["counters"]
    assert high[ACCEPTED] == high[DRAFTED] > 0


def test_half_right_first_drafts_settle_on_one_draft(adaptive):
    decisions = phase_decisions(adaptive, 4)
    assert held(decisions)[-1] == 1, decisions
    half = adaptive["phases"][4]["counters"]
    assert half["vllm:spec_decode_num_accepted_tokens_per_pos"][1] == 0


def test_the_state_file_holds_what_the_gauges_publish(adaptive):
    state = adaptive["state"]
    assert state["mode"] == "adaptive" and state["k_max"] == K
    assert len(state["acceptance"]) == K
    assert {"down", "up", "probe", "hold"} <= set(state["decisions"])
    assert "calibrate" not in state["decisions"] and state["cost"] == list(STEP_COST)
    assert sum(state["decisions"].values()) == state["steps"]


def test_the_guard_settings_travel_as_one_variable():
    assert list(GuardSettings(mode="adaptive").engine_env()) == [GUARD_ENV]
