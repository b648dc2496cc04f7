"""Per-request trimming in the speculation guard (issue 23): a request that keeps rejecting
drafts checks fewer, the rest of the batch keeps its k. Simulated engine with a fake clock
(tests/unit/test_spec_guard.py has the batch-level guard); the bench's vllm-guard-trim
target runs it on the real engine."""

import random
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from model_overrides.patches import spec_guard as hook
from model_overrides.spec_guard import AdaptiveK, StepCost, trim_plan
from model_overrides.spec_guard_config import GuardSettings

K = 2
TRIM = GuardSettings(mode="adaptive", trim=True)
NO_TRIM = GuardSettings(mode="adaptive")


def check_dear(requests: int, verified: int, k: int) -> float:
    """Checking a draft costs a target token (a CPU: compute-bound); proposing is cheaper."""
    return 0.03 + 0.002 * requests + 0.003 * verified + 0.0005 * requests * k


class MixedBatch:
    """Each step: trim the drafts the last step proposed, pick k for this step's proposals,
    verify each request's kept drafts against its own acceptance, take the step's time."""

    def __init__(self, settings: GuardSettings, alphas: dict[str, float], seed: int = 0):
        self.guard = AdaptiveK(settings, K)
        self.alphas = alphas
        self.rng = random.Random(seed)
        self.now, self.proposed, self.tokens = 0.0, 0, 0
        self.kept: list[dict[str, int]] = []

    def run(self, seconds: float) -> None:
        end = self.now + seconds
        while self.now < end:
            ids = list(self.alphas)
            keep = self.guard.trim([(r, self.proposed) for r in ids], self.now)
            self.kept.append(dict(zip(ids, keep, strict=True)))
            decision = self.guard.decide(len(ids), self.now, ids)
            drafts = []
            for r, n in zip(ids, keep, strict=True):
                accepted = 0
                while accepted < n and self.rng.random() < self.alphas[r]:
                    accepted += 1
                self.tokens += accepted + 1
                if n:
                    drafts.append((r, n, accepted))
            verified = sum(keep)
            took = check_dear(len(ids), verified, decision.k)
            self.now += took
            self.guard.observe_drafts([(d, a) for _, d, a in drafts], self.now)
            self.guard.observe_request_drafts(drafts)
            self.guard.observe_step(len(ids) + verified, len(ids), verified, decision.k, took)
            self.proposed = decision.k

    def rate(self) -> float:
        return self.tokens / self.now


MIXED = {**{f"high{i}": 1.0 for i in range(4)}, **{f"zero{i}": 0.0 for i in range(4)}}
CHECK_DEAR = (0.03, 0, 0.002, 0.003, 0.0005)  # check_dear as a fixed step cost


def test_trim_plan_drops_the_drafts_of_the_requests_that_reject_them():
    cost = StepCost(coef=(0.03, 0, 0.002, 0.003, 0.0005, 0.0), fixed=True)
    keep, tokens, seconds = trim_plan([[1.0, 1.0]] * 4 + [[0.05, 0.05]] * 4, 2, cost, 0)
    assert keep == [2, 2, 2, 2, 0, 0, 0, 0]
    assert tokens == pytest.approx(4 * 3 + 4 * (1 + 0.05 * 0))  # trimmed: only the bonus
    assert seconds == pytest.approx(0.03 + 0.016 + 0.003 * 8 + 0.0005 * 16)
    # Every draft passes: nothing is trimmed; checking free: nothing is either.
    assert trim_plan([[1.0, 1.0]] * 8, 2, cost, 0)[0] == [2] * 8
    free = StepCost(coef=(0.03, 0, 0.002, 0.0, 0.0005, 0.0), fixed=True)
    assert trim_plan([[0.0, 0.0]] * 8, 2, free, 0)[0] == [2] * 8
    # The second position of a half-accepting request pays less than the first.
    assert trim_plan([[1.0, 1.0]] * 7 + [[0.9, 0.5]], 2, cost, 0)[0][-1] == 1


def test_trimming_pays_on_a_mixed_batch_where_checking_is_dear():
    # Half the requests accept every draft, half none. Without trimming the batch's
    # acceptance reads 0.5 and k=0 wins; with it the accepting half keeps k=2 and the
    # rejecting half checks nothing.
    trimmed, whole = MixedBatch(TRIM, MIXED), MixedBatch(NO_TRIM, MIXED)
    trimmed.run(30)
    whole.run(30)
    assert trimmed.rate() >= 1.1 * whole.rate(), (trimmed.rate(), whole.rate())
    late = trimmed.kept[len(trimmed.kept) // 2 :]
    assert sum(s["high0"] == K for s in late) / len(late) > 0.9
    # A rejecting request drafts again now and then (its own probe), not most steps.
    assert 0 < sum(s["zero0"] > 0 for s in late) / len(late) < 0.15
    assert trimmed.guard.state(trimmed.now)["drafts_trimmed"] > 0


def test_one_rejected_draft_does_not_trim_a_request_whose_drafts_pass():
    guard = AdaptiveK(GuardSettings(mode="adaptive", trim=True, step_cost=CHECK_DEAR), K)
    for step in range(20):
        guard.decide(8, step * 0.1, [f"r{i}" for i in range(8)])
        guard.observe_drafts([(2, 2)] * 7 + [(2, 0 if step == 10 else 2)], step * 0.1)
        guard.observe_request_drafts(
            [(f"r{i}", 2, 2) for i in range(7)] + [("r7", 2, 0 if step == 10 else 2)]
        )
    assert guard.trim([(f"r{i}", 2) for i in range(8)], 2.0) == [2] * 8


def test_a_uniform_batch_loses_nothing_to_trimming():
    # Every request accepts 70% of first drafts: per-request noise must not trim good ones.
    ratios = []
    for seed in range(3):
        alphas = {f"r{i}": 0.7 for i in range(8)}
        trimmed, whole = MixedBatch(TRIM, alphas, seed), MixedBatch(NO_TRIM, alphas, seed)
        trimmed.run(30)
        whole.run(30)
        ratios.append(trimmed.rate() / whole.rate())
    assert min(ratios) >= 0.98, ratios


def test_a_request_whose_drafts_start_to_pass_gets_them_back():
    sim = MixedBatch(TRIM, dict(MIXED))
    sim.run(10)
    sim.alphas["zero0"] = 1.0
    start = len(sim.kept)
    sim.run(10)
    back = sim.kept[start:]
    # Its own counts fade (no floor) and its next probe passes: within seconds
    first = next(i for i, s in enumerate(back) if s["zero0"] == K)
    took = first * (sim.now - 10) / len(back)
    assert took < 4.0, took
    assert sum(s["zero0"] == K for s in back[first:]) / len(back[first:]) > 0.9


def test_after_a_spell_of_rejected_drafts_new_accepting_requests_bring_drafting_back():
    # The CPU bench's "high" after "zero": new requests, k=0 held. Their first drafts
    # (a probe's) must be checked, or the estimates they feed never learn they pass.
    sim = MixedBatch(TRIM, {f"zero{i}": 0.0 for i in range(8)})
    sim.run(10)
    assert sim.guard.k == 0
    sim.alphas = {f"high{i}": 1.0 for i in range(8)}
    start, steps = sim.now, len(sim.kept)
    sim.run(10)
    up = next(i for i, s in enumerate(sim.kept[steps:]) if s["high0"] == K)
    assert up * (sim.now - start) / (len(sim.kept) - steps) < 3.0
    assert sim.guard.k == K


def test_with_every_request_rejecting_trimming_still_turns_drafting_off():
    sim = MixedBatch(TRIM, {f"zero{i}": 0.0 for i in range(8)})
    sim.run(10)
    assert sim.guard.k == 0


def test_trimming_off_checks_every_draft():
    guard = AdaptiveK(NO_TRIM, K)
    assert guard.trim([("a", 2), ("b", 1)], 0.0) == [2, 1]


def test_the_hook_cuts_a_requests_drafts_without_touching_the_shared_placeholders(monkeypatch):
    monkeypatch.setattr(hook.time, "monotonic", lambda: 0.06)
    lookup = hook.GuardLookup(GuardSettings(mode="adaptive", trim=True, step_cost=CHECK_DEAR), K)
    for _ in range(20):
        lookup.guard.observe_request_drafts([("bad", 2, 0), ("good", 2, 2)])
    placeholders = [-1, -1]  # the async scheduler gives every request this one list
    running = [
        SimpleNamespace(request_id="bad", spec_token_ids=placeholders),
        SimpleNamespace(request_id="good", spec_token_ids=placeholders),
        SimpleNamespace(request_id="prefill", spec_token_ids=[]),
    ]
    lookup.trim(running)
    assert running[0].spec_token_ids == []
    assert running[1].spec_token_ids is placeholders and placeholders == [-1, -1]
    assert running[2].spec_token_ids == []
    # Finished requests are forgotten.
    lookup.trim(running[1:])
    assert set(lookup.guard.per_request.counts) == {"good"}


def test_trim_is_a_setting_of_the_adaptive_guard_only():
    assert "per-request trimming" in TRIM.describe()
    assert "trimming" not in NO_TRIM.describe()
    with pytest.raises(ValidationError, match="trim is for guard mode 'adaptive'"):
        GuardSettings(mode="script", script=[1], trim=True)
