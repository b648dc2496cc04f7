"""Bench models: the released configs cut to fewer layers, read by vLLM's own config
classes; the tokenizer; the preset fields that serve them (model.bench, synthetic
acceptance) and the errors that keep made-up acceptance off real deployments."""

import json
from pathlib import Path

import pytest

from serving.bench_model import (
    MARKER,
    RELEASED,
    BenchModelError,
    bench_config,
    write_bench_model,
)
from serving.bench_model.writer import ensure_bench_model
from serving.cli import main as cli_main
from serving.config.preset import PresetError, load_preset, parse_set
from serving.golden import GoldenDesign


@pytest.mark.parametrize("shape", ["flash", "pro"])
@pytest.mark.parametrize("layers", [3, 4, 12])
def test_cut_keeps_the_released_pattern(shape: str, layers: int):
    released = RELEASED[shape]
    cfg = bench_config(shape, layers)
    ratios = released["compress_ratios"]
    assert cfg["num_hidden_layers"] == layers
    # The first `layers` layers as released, then the MTP layer's own ratio.
    assert cfg["compress_ratios"] == ratios[:layers] + [ratios[-1]]
    assert len(cfg["compress_ratios"]) == layers + cfg["num_nextn_predict_layers"]
    assert cfg["num_hash_layers"] == released["num_hash_layers"] == 3
    width = {k: v for k, v in cfg.items() if k not in ("num_hidden_layers", "compress_ratios")}
    assert width.pop(MARKER) == {
        "shape": shape,
        "layers": layers,
        "released_layers": released["num_hidden_layers"],
        "experts": "fp4",
    }
    assert width == {k: v for k, v in released.items() if k in width}


def test_released_shapes_are_the_published_ones():
    flash, pro = RELEASED["flash"], RELEASED["pro"]
    assert (flash["hidden_size"], flash["num_hidden_layers"], flash["n_routed_experts"]) == (
        4096,
        43,
        256,
    )
    assert (pro["hidden_size"], pro["num_hidden_layers"], pro["n_routed_experts"]) == (
        7168,
        61,
        384,
    )
    for cfg in (flash, pro):
        assert len(cfg["compress_ratios"]) == cfg["num_hidden_layers"] + 1
        assert cfg["expert_dtype"] == "fp4"
        assert cfg["quantization_config"]["weight_block_size"] == [128, 128]


@pytest.mark.parametrize(
    ("shape", "layers", "experts", "message"),
    [
        ("flash", 2, "fp4", "layers must be 3..43"),
        ("flash", 44, "fp4", "layers must be 3..43"),
        ("pro", 62, "fp4", "layers must be 3..61"),
        ("flash", 4, "int4", "experts must be fp4 or fp8"),
    ],
)
def test_bad_cuts_are_refused(shape: str, layers: int, experts: str, message: str):
    with pytest.raises(ValueError, match=message):
        bench_config(shape, layers, experts)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def flash_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_bench_model(tmp_path_factory.mktemp("bench") / "flash-6", "flash", 6)


@pytest.mark.parametrize(("shape", "layers", "experts"), [("flash", 6, "fp8"), ("pro", 4, "fp4")])
def test_vllm_reads_every_shape(tmp_path: Path, shape: str, layers: int, experts: str):
    from vllm.config import ModelConfig

    model_dir = write_bench_model(tmp_path / shape, shape, layers, experts)  # type: ignore[arg-type]
    config = ModelConfig(model=str(model_dir), tokenizer_mode="deepseek_v4", max_model_len=8192)
    hf = config.hf_config
    released = RELEASED[shape]  # type: ignore[index]
    assert type(hf).__name__ == "DeepseekV4Config"
    assert config.quantization == "deepseek_v4_fp8"
    assert hf.num_hidden_layers == layers and hf.expert_dtype == experts
    assert list(hf.compress_ratios) == bench_config(shape, layers)["compress_ratios"]  # type: ignore[arg-type]
    assert config.get_hidden_size() == released["hidden_size"]
    assert config.get_vocab_size() == released["vocab_size"]
    assert config.get_head_size() == released["head_dim"]
    for key in ("n_routed_experts", "moe_intermediate_size", "q_lora_rank", "o_groups"):
        assert getattr(hf, key) == released[key], key


def test_vllm_takes_the_mtp_draft_with_synthetic_acceptance(flash_dir: Path):
    """vLLM's own SpeculativeConfig builds the MTP draft of a bench model and resolves the
    synthetic rejection sampler's rates as the preset gives them."""
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig

    preset = load_preset("h200-flash-bench")
    fields = preset.speculation.vllm_config()
    assert fields is not None
    target = ModelConfig(model=str(flash_dir), tokenizer_mode="deepseek_v4", max_model_len=8192)
    spec = SpeculativeConfig(
        **fields, target_model_config=target, target_parallel_config=ParallelConfig()
    )
    assert spec.rejection_sample_method == "synthetic"
    assert spec.synthetic_acceptance_rates == [0.70, 0.29]
    assert spec.draft_model_config.hf_config.architectures == ["DeepSeekV4MTPModel"]


def test_tokenizer_covers_the_vocabulary(flash_dir: Path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(flash_dir / "tokenizer.json"))
    vocab = RELEASED["flash"]["vocab_size"]
    assert tok.get_vocab_size() == vocab
    words = GoldenDesign().words[:5]
    ids = tok.encode(" ".join(words)).ids
    assert ids == [GoldenDesign().vocab.index(w) for w in words]
    # Whatever a dummy-weights model emits decodes to text.
    assert tok.decode([vocab - 1, 70000, ids[0]]).split() == [f"id{vocab - 1}", "id70000", words[0]]
    max_length = json.loads((flash_dir / "tokenizer_config.json").read_text())["model_max_length"]
    assert max_length >= 1 << 20


def test_same_arguments_give_the_same_bytes(tmp_path: Path, flash_dir: Path):
    again = write_bench_model(tmp_path / "again", "flash", 6)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (again / name).read_bytes() == (flash_dir / name).read_bytes()


def test_ensure_writes_once_and_refuses_another_shape(tmp_path: Path):
    where = tmp_path / "m"
    assert ensure_bench_model(where, "flash", 4, "fp4") is True
    assert ensure_bench_model(where, "flash", 4, "fp4") is False
    with pytest.raises(BenchModelError, match=r"has \{'layers': 4\}.*asks for \{'layers': 6\}"):
        ensure_bench_model(where, "flash", 6, "fp4")
    (tmp_path / "golden").mkdir()
    (tmp_path / "golden" / "config.json").write_text(json.dumps({"model_type": "deepseek_v4"}))
    with pytest.raises(BenchModelError, match="not a bench model's config"):
        ensure_bench_model(tmp_path / "golden", "flash", 4, "fp4")


def test_cli_writes_and_names_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture):
    assert cli_main(["bench-model", str(tmp_path / "p"), "--shape", "pro", "--layers", "3"]) == 0
    cfg = json.loads((tmp_path / "p" / "config.json").read_text())
    assert cfg["hidden_size"] == 7168 and cfg["num_hidden_layers"] == 3
    assert cli_main(["bench-model", str(tmp_path / "q"), "--layers", "50"]) == 2
    assert "layers must be 3..43 for the flash shape, got 50" in capsys.readouterr().err
    assert not (tmp_path / "q").exists()


# The presets: synthetic acceptance only on bench models, and what vLLM receives.


def _load(*sets: str, preset: str = "h200-flash-bench"):
    return load_preset(preset, [parse_set(s) for s in sets])


def test_bench_preset_runs_the_dummy_loader_with_synthetic_rates():
    preset = _load()
    kwargs = preset.engine_kwargs()
    assert kwargs["load_format"] == "dummy"
    assert kwargs["speculative_config"] == {
        "method": "mtp",
        "num_speculative_tokens": 2,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_rates": [0.70, 0.29],
    }
    assert preset.speculation.synthetic_for(3)["synthetic_acceptance_rates"] == [0.7, 0.29, 0.12]
    assert preset.speculation.synthetic_for(0) == {}
    by_length = _load("speculation.synthetic_acceptance={length: 2.4, rates: null}")
    assert by_length.speculation.synthetic_for(2) == {
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": 2.4,
    }


@pytest.mark.parametrize(
    ("sets", "preset", "message"),
    [
        (
            ["speculation.synthetic_acceptance={rates: [0.7, 0.3]}"],
            "gpu-golden",
            "speculation.synthetic_acceptance needs a bench model",
        ),
        (
            ["speculation.synthetic_acceptance={rates: [0.3, 0.7]}"],
            "h200-flash-bench",
            "rates must not increase with the position",
        ),
        (
            ["speculation.synthetic_acceptance={rates: [1.2, 0.5]}"],
            "h200-flash-bench",
            r"rates must each be in \[0, 1\]",
        ),
        (
            ["speculation.synthetic_acceptance={rates: [0.7]}"],
            "h200-flash-bench",
            "k=2 drafts but synthetic_acceptance.rates has 1",
        ),
        (
            ["speculation.synthetic_acceptance={rates: [0.7, 0.3], length: 2}"],
            "h200-flash-bench",
            "give exactly one of rates or length",
        ),
        (
            ["speculation.synthetic_acceptance={length: 3.5, rates: null}"],
            "h200-flash-bench",
            "length 3.5 exceeds k \\+ 1 = 3",
        ),
        (["engine_args.load_format=auto"], "h200-flash-bench", "load_format must be 'dummy'"),
        (["model.bench.layers=44"], "h200-flash-bench", "layers 44: the released flash has 43"),
        (["model.golden=true"], "h200-flash-bench", "golden or a bench model, not both"),
        (
            ["speculation.method=none", "speculation.num_speculative_tokens=0"],
            "h200-flash-bench",
            "synthetic_acceptance needs a speculative method",
        ),
    ],
)
def test_bad_synthetic_settings_are_named(sets: list[str], preset: str, message: str):
    with pytest.raises(PresetError, match=message):
        _load(*sets, preset=preset)


def test_bench_targets_take_the_rates_for_their_own_k():
    from serving.bench.targets import check_kind, local_setup, vllm_kwargs

    setup = local_setup("h200-flash-bench", ["model.bench.layers=6"], engines=4, kv_cache_gib=3)
    assert "speculative_config" not in vllm_kwargs(setup, 0)
    assert vllm_kwargs(setup, 1)["speculative_config"]["synthetic_acceptance_rates"] == [0.7]
    assert vllm_kwargs(setup, 3)["speculative_config"]["synthetic_acceptance_rates"] == [
        0.7,
        0.29,
        0.12,
    ]
    with pytest.raises(ValueError, match="'vllm-k4': k=4 drafts but synthetic_acceptance"):
        check_kind("vllm-k4", setup)
    summary = setup.summary()["bench_model"]
    assert summary["layers"] == 6 and summary["hidden_size"] == 4096
