"""Designed-acceptance families in the golden model: the target unchanged, drafts by arc."""

from pathlib import Path

import pytest

from serving import cli
from serving.golden import GoldenDesign, write_golden_model
from serving.golden.design import FAMILIES
from serving.golden.writer import read_design
from tests.support.checkpoint_tensors import checkpoint_tensors

FAM = GoldenDesign(draft_pattern="families")
ACCEPTED, DRAFTS = "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_drafts"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


@pytest.fixture(scope="module")
def families_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_golden_model(tmp_path_factory.mktemp("golden-families"), FAM)


def test_only_the_mtp_draft_map_differs_from_the_default_checkpoint(families_dir, golden_dir):
    ours, default = checkpoint_tensors(families_dir), checkpoint_tensors(golden_dir)
    assert ours.keys() == default.keys()
    differ = sorted(name for name in ours if not ours[name].equal(default[name]))
    assert differ == ["mtp.0.e_proj.weight"]


def test_the_manifest_carries_the_pattern_and_the_default_one_does_not(families_dir, golden_dir):
    assert read_design(families_dir) == FAM
    assert "draft_pattern" not in (golden_dir / "golden.json").read_text()
    assert read_design(golden_dir) == GoldenDesign()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_family_prompt_walks_inside_its_arc_with_the_default_text(family: str):
    for offset in range(4):
        prompt = FAM.family_prompt(family, offset)
        span = FAM.family_span(offset)
        assert FAM.continuation(prompt, span) == GoldenDesign().continuation(prompt, span)
        walk = FAM.greedy(FAM.token_ids(prompt), span + 3)  # + the drafts looked at
        assert set(walk) <= set(FAM.family_arc(family)), (family, offset)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_family_acceptance_is_as_designed(k: int):
    counters = {f: FAM.expected_spec_counters(FAM.family_prompt(f), 48, k) for f in FAMILIES}
    high, half, zero = counters["high"], counters["half"], counters["zero"]
    assert high[ACCEPTED] == high[DRAFTS] * k  # every draft
    assert zero[ACCEPTED] == 0 and zero[DRAFTS] == 47  # none: one target token per step
    # Half the steps accept their first draft, none a later one (the walk starts on a D).
    assert half[PER_POS][1:] == [0] * (k - 1)
    assert half[PER_POS][0] == (half[DRAFTS] - 2) // 2


def test_families_take_no_draft_agreement_and_unknown_patterns_are_named():
    with pytest.raises(ValueError, match="draft_agreement"):
        GoldenDesign(draft_pattern="families", draft_agreement=0.5)
    with pytest.raises(ValueError, match="draft_pattern"):
        GoldenDesign(draft_pattern="sometimes")
    with pytest.raises(ValueError):
        FAM.family_arc("medium")


def test_the_cli_writes_a_families_checkpoint(tmp_path: Path, capsys):
    rc = cli.main(["golden-model", str(tmp_path / "m"), "--draft-pattern", "families"])
    assert rc == 0 and "drafts=families" in capsys.readouterr().out
    assert read_design(tmp_path / "m") == FAM
