"""The spread golden target: known next-token probabilities at temperature 1, and the
acceptance greedy and probabilistic drafting must then show (no engine)."""

import random
from pathlib import Path

import pytest

from serving import cli
from serving.golden import GoldenDesign, write_golden_model
from serving.golden.design import HEAD_INPUT_SCALE
from serving.golden.writer import read_design
from tests.support.checkpoint_tensors import checkpoint_tensors

SPREAD = GoldenDesign(next_token_choices=3)
FLAT_DRAFT = GoldenDesign(next_token_choices=3, draft_logit_scale=0.5)


@pytest.fixture(scope="module")
def spread_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_golden_model(tmp_path_factory.mktemp("golden-spread"), SPREAD)


def test_only_the_head_differs_and_it_holds_the_designed_logits(spread_dir, golden_dir):
    ours, default = checkpoint_tensors(spread_dir), checkpoint_tensors(golden_dir)
    assert sorted(n for n in ours if not ours[n].equal(default[n])) == ["head.weight"]
    head = ours["head.weight"].float() * HEAD_INPUT_SCALE  # a token's normed direction
    for token in range(head.shape[1]):
        column = head[:, token]
        found = {int(i): float(column[i]) for i in column.nonzero().flatten()}
        if token < SPREAD.first_word_id:  # special tokens: only the first word, certain
            assert list(found) == [SPREAD.first_word_id], token
        else:
            assert found == SPREAD.next_token_logits(token), token


def test_a_flatter_drafter_differs_only_in_the_norm_before_the_shared_head(tmp_path: Path):
    flat = checkpoint_tensors(write_golden_model(tmp_path / "flat", FLAT_DRAFT))
    spread = checkpoint_tensors(write_golden_model(tmp_path / "spread", SPREAD))
    assert sorted(n for n in flat if not flat[n].equal(spread[n])) == ["mtp.0.norm.weight"]
    assert set(flat["mtp.0.norm.weight"].float().tolist()) == {0.5}


def test_every_words_favourite_is_its_successor_and_the_drafters_too():
    for token in range(SPREAD.first_word_id, len(SPREAD.vocab)):
        for probs in (FLAT_DRAFT.next_token_probs(token), FLAT_DRAFT.draft_probs(token)):
            assert max(probs, key=probs.__getitem__) == SPREAD.successor(token)
            assert sum(probs.values()) == pytest.approx(1.0, abs=1e-4)
        assert FLAT_DRAFT.next_token_probs(token) == SPREAD.next_token_probs(token)


def _simulated_rates(design: GoldenDesign, k: int, method: str, steps: int) -> list[float]:
    """The rejection rule vLLM states (vllm/v1/sample/rejection_sampler.py in 0.32; on
    0.34's GPU runner v1/worker/gpu/spec_decode/rejection_sampler_utils.py): accept x when
    p(x) / q(x) >= u, q one-hot for greedy drafts; played out here on the design's p and q."""
    rng = random.Random(5)
    accepted = [0] * k
    for _ in range(steps):
        last = design.first_word_id + rng.randrange(len(design.words))
        for pos in range(k):
            p, q = design.next_token_probs(last), design.draft_probs(last)
            if method == "greedy":
                draft, q_draft = max(q, key=q.__getitem__), 1.0
            else:
                draft = rng.choices(list(q), weights=list(q.values()))[0]
                q_draft = q[draft]
            if p[draft] / q_draft < rng.random():
                break
            accepted[pos] += 1
            last = draft
    return [n / steps for n in accepted]


@pytest.mark.parametrize("design", [SPREAD, FLAT_DRAFT], ids=["q=p", "flat-q"])
@pytest.mark.parametrize("method", ["greedy", "probabilistic"])
def test_designed_acceptance_matches_the_rejection_rule_played_out(method: str, design):
    designed = design.expected_acceptance_rates(3, method)
    simulated = _simulated_rates(design, 3, method, steps=20_000)
    assert simulated == pytest.approx(designed, abs=0.012)


@pytest.mark.parametrize("design", [SPREAD, FLAT_DRAFT], ids=["q=p", "flat-q"])
def test_probabilistic_drafts_accept_more_than_greedy_ones_at_temperature_one(design):
    greedy = design.expected_acceptance_rates(2, "greedy")
    probabilistic = design.expected_acceptance_rates(2, "probabilistic")
    assert greedy[0] == pytest.approx(
        SPREAD.next_token_probs(SPREAD.first_word_id)[SPREAD.successor(SPREAD.first_word_id)]
    )
    assert all(g < p for g, p in zip(greedy, probabilistic, strict=True))


def test_bad_spreads_are_named():
    with pytest.raises(ValueError, match="next_token_choices"):
        GoldenDesign(next_token_choices=0)
    with pytest.raises(ValueError, match="next_token_choices"):
        GoldenDesign(next_token_choices=2, draft_agreement=0.5)
    with pytest.raises(ValueError, match="next_token_choices"):
        GoldenDesign(next_token_choices=2, variant="numeric")
    with pytest.raises(ValueError, match="draft_sample_method"):
        SPREAD.expected_acceptance_rates(2, "typical")
    with pytest.raises(ValueError, match="sampled"):
        SPREAD.expected_spec_counters("ba be", 8, 2)
    with pytest.raises(ValueError, match="draft_logit_scale"):
        GoldenDesign(draft_logit_scale=0.5)  # a certain target has nothing to flatten
    with pytest.raises(ValueError, match="draft_logit_scale"):
        GoldenDesign(next_token_choices=3, draft_logit_scale=0.3)
    with pytest.raises(ValueError, match="spread target"):
        GoldenDesign().expected_acceptance_rates(2, "greedy")


def test_the_cli_writes_a_spread_checkpoint_and_the_manifest_carries_it(tmp_path: Path, capsys):
    rc = cli.main(["golden-model", str(tmp_path / "m"), "--next-token-choices", "3"])
    assert rc == 0 and "next_token_choices=3" in capsys.readouterr().out
    assert read_design(tmp_path / "m") == SPREAD
    argv = ["golden-model", str(tmp_path / "f"), "--next-token-choices", "3"]
    assert cli.main([*argv, "--draft-logit-scale", "0.5"]) == 0
    assert read_design(tmp_path / "f") == FLAT_DRAFT
    assert cli.main(["golden-model", str(tmp_path / "bad"), "--next-token-choices", "9"]) == 2
    assert "next_token_choices must be in [1, 8], got 9" in capsys.readouterr().err
