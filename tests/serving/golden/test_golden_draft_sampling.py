"""Draft sampling at temperature 1 on the spread golden target (real vLLM engines).

The target spreads each next token over three words; the MTP drafter shares its head with
its logits halved, a flatter distribution with the same favourite. What vLLM's counters must
show is designed (GoldenDesign.expected_acceptance_rates): greedy drafts are accepted with
the favourite's probability at each position, probabilistic ones with sum_x min(p, q), which
only a ratio test that reads the right draft probabilities gives (with q taken as 0 or as p
every draft would be accepted). Either way speculative decoding is lossless: the sampled
words must follow the target's own distribution. One engine per draft
sampling method, each in a child (tests/support/draft_sampling_runner.py).
"""

import math

import pytest

from serving.golden import GoldenDesign, write_golden_model
from serving.records import draft_sampling_table
from serving.records import store as records
from tests.support.child_result import child_result

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1200)]
SPREAD = GoldenDesign(next_token_choices=3, draft_logit_scale=0.5)
K = 3
METHODS = ("greedy", "probabilistic")
DRAFTS, DRAFT_TOKENS = "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
# Binomial standard deviations a count may stray from its design before a test fails: a
# correct engine fails one run in about 150,000 per comparison.
SIGMAS = 4.5


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    model = write_golden_model(tmp_path_factory.mktemp("golden-spread"), SPREAD)
    out = {
        method: child_result("tests.support.draft_sampling_runner", str(model), str(K), method)
        for method in METHODS
    }
    records.write(draft_sampling_table.RECORD, figures(out), draft_sampling_table.COMMAND)
    return out


def figures(runs: dict[str, dict]) -> dict:
    """What docs/speculation.md's table shows (serving/records/draft_sampling_table.py);
    `make record-draft-sampling` keeps it only when every test here passed."""
    methods = {}
    for method, run in runs.items():
        counters, choices = run["counters"], run["choice_counts"]
        methods[method] = {
            "drafts": counters[DRAFTS],
            "accepted_per_pos": counters[PER_POS],
            "favourite": choices.get("0", 0),
            "tokens": sum(choices.values()),
        }
    return {
        "k": K,
        "next_token_choices": SPREAD.next_token_choices,
        "draft_logit_scale": SPREAD.draft_logit_scale,
        "methods": methods,
    }


def _within(count: int, trials: int, p: float) -> bool:
    return abs(count - trials * p) <= SIGMAS * math.sqrt(trials * p * (1 - p)) + 1


@pytest.mark.parametrize("method", METHODS)
def test_drafts_are_accepted_at_each_position_as_designed(runs, method: str):
    counters = runs[method]["counters"]
    designed = SPREAD.expected_acceptance_rates(K, method)
    drafts = counters[DRAFTS]
    assert drafts > 300 and counters[DRAFT_TOKENS] == K * drafts
    for pos, (accepted, rate) in enumerate(zip(counters[PER_POS], designed, strict=True)):
        assert _within(accepted, drafts, rate), (pos, accepted / drafts, rate)


def test_probabilistic_drafts_are_not_all_accepted_nor_only_the_favourite(runs):
    # Between greedy's favourite-only rate and 1: the ratio test ran on real draft
    # probabilities (0.876 per position designed, against 0.576 greedy).
    first = {m: runs[m]["counters"][PER_POS][0] / runs[m]["counters"][DRAFTS] for m in METHODS}
    assert first["greedy"] + 0.15 < first["probabilistic"] < 0.95


@pytest.mark.parametrize("method", METHODS)
def test_the_sampled_words_follow_the_targets_distribution(runs, method: str):
    counts = {int(c): n for c, n in runs[method]["choice_counts"].items()}
    tokens = sum(counts.values())
    assert counts.get(-1, 0) == 0, "a word outside the target's choices was emitted"
    probs = list(SPREAD.next_token_probs(SPREAD.first_word_id).values())  # favourite first
    for choice, p in enumerate(probs):
        assert _within(counts.get(choice, 0), tokens, p), (choice, counts, tokens)


@pytest.mark.parametrize("method", METHODS)
def test_greedy_requests_still_walk_the_ring(runs, method: str):
    assert runs[method]["greedy_text_ok"]
