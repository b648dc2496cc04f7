"""The golden checkpoint: deterministic bytes, complete DSV4 naming, a working tokenizer."""

import hashlib
import json
from pathlib import Path

import pytest
from safetensors import safe_open

from serving.golden import GoldenDesign, write_golden_model
from serving.golden.architecture import golden_config
from serving.golden.tokenizer import build_tokenizer


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_same_arguments_give_the_same_bytes(tmp_path: Path, golden_dir: Path):
    again = write_golden_model(tmp_path / "again", GoldenDesign())
    assert _digest(again) == _digest(golden_dir)
    other = write_golden_model(tmp_path / "other", GoldenDesign(draft_agreement=0.5))
    assert _digest(other)["golden.json"] != _digest(golden_dir)["golden.json"]


def test_checkpoint_has_the_dsv4_layout(golden_dir: Path):
    cfg = golden_config()
    names: dict[str, tuple[int, ...]] = {}
    for shard in golden_dir.glob("*.safetensors"):
        with safe_open(str(shard), "pt") as f:
            names |= {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    assert cfg["num_hidden_layers"] >= 8 and cfg["num_nextn_predict_layers"] == 1
    assert len(cfg["compress_ratios"]) == cfg["num_hidden_layers"] + 1
    assert names["embed.weight"] == (cfg["vocab_size"], cfg["hidden_size"])
    assert "lm_head.weight" not in names and "head.weight" in names
    assert any(n.startswith("mtp.0.") for n in names)
    for layer, ratio in enumerate(cfg["compress_ratios"][:-1]):
        assert (f"layers.{layer}.attn.compressor.ape" in names) == (ratio > 1)
        assert (f"layers.{layer}.attn.indexer.wq_b.weight" in names) == (ratio == 4)
        hashed = layer < cfg["num_hash_layers"]
        assert (f"layers.{layer}.ffn.gate.tid2eid" in names) == hashed
        assert (f"layers.{layer}.ffn.gate.bias" in names) == (not hashed)
    index = json.loads((golden_dir / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(names)


@pytest.mark.parametrize("agreement", [0.0, 0.5, 1.0])
def test_draft_agreement_is_the_share_of_tokens_the_draft_gets_right(agreement: float):
    design = GoldenDesign(draft_agreement=agreement)
    word_ids = range(design.first_word_id, len(design.vocab))
    right = sum(design.draft(t) == design.successor(t) for t in word_ids)
    assert right / len(word_ids) == pytest.approx(agreement, abs=0.005)


def test_draft_agreement_out_of_range_is_rejected():
    with pytest.raises(ValueError, match="draft_agreement"):
        GoldenDesign(draft_agreement=1.5)


def test_tokenizer_round_trips_words():
    design = GoldenDesign()
    tok = build_tokenizer(design)
    text = " ".join(design.words[:20])
    ids = tok.encode(text).ids
    assert ids == design.token_ids(text)
    assert tok.decode(ids) == " " + text
