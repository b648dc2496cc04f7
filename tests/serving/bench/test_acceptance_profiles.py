"""Acceptance profiles: rates derived from published acceptance lengths as vLLM's
synthetic rejection sampler takes them, and the bench targets that run a k under one."""

import pytest
from vllm.config.speculative import SpeculativeConfig
from vllm.utils.argparse_utils import FlexibleArgumentParser

from serving.bench.acceptance_profiles import PROFILES, profile, rates_from_lengths
from serving.bench.analysis import break_even
from serving.bench.command import BenchError, bench_setup
from serving.bench.report import figures, markdown
from serving.bench.targets import local_setup, local_specs, vllm_kwargs
from serving.cli import build_parser
from serving.compat.vllm_cli_args import cli_args

BENCH_PRESET = "h200-flash-bench"


def test_rates_from_lengths_give_the_lengths_back():
    # InferenceX's thinking-on lengths at k = 1, 2, 3.
    assert rates_from_lengths([1.79, 2.27, 2.49]) == [0.79, 0.48, 0.22]
    for acceptance in PROFILES.values():
        assert acceptance.acceptance_lengths == [
            pytest.approx(1 + sum(acceptance.rates[:k])) for k in range(1, 4)
        ]
    assert PROFILES["real-no-thinking"].acceptance_lengths == [1.92, 2.61, 2.97]


@pytest.mark.parametrize(
    "lengths, message",
    [
        ([1.5, 2.1], "rise with the position"),
        ([2.2], "between 0 and 1"),
        ([1.8, 1.7], "between 0 and 1"),
    ],
)
def test_lengths_no_drafter_can_give_are_refused(lengths, message):
    with pytest.raises(ValueError, match=message):
        rates_from_lengths(lengths)


@pytest.mark.parametrize("name", list(PROFILES))
def test_every_profile_is_what_vllms_synthetic_sampler_accepts(name):
    for k in (1, 2, 3):
        rates = PROFILES[name].rates_for(k)
        assert SpeculativeConfig._resolve_synthetic_acceptance_rates(k, rates, None) == rates
    with pytest.raises(ValueError, match="k <= 3"):
        PROFILES[name].rates_for(4)


def test_a_profile_target_is_vllms_server_with_the_profiles_rates():
    setup = local_setup(BENCH_PRESET)
    parser = cli_args().make_arg_parser(FlexibleArgumentParser())
    plain, real = local_specs(["vllm-k2", "vllm-k2~real-thinking"], setup, python="python3")
    parsed = parser.parse_args(real.command[3:])
    spec = parsed.speculative_config
    assert spec["synthetic_acceptance_rates"] == [0.79, 0.48]
    assert spec["rejection_sample_method"] == "synthetic" and spec["num_speculative_tokens"] == 2
    # Everything else is the preset's: the plain target differs in the rates alone.
    base = parser.parse_args(plain.command[3:])
    assert base.speculative_config == {**spec, "synthetic_acceptance_rates": [0.70, 0.29]}
    assert vars(base) | {"speculative_config": None, "port": None} == vars(parsed) | {
        "speculative_config": None,
        "port": None,
    }
    assert vllm_kwargs(setup, 1, acceptance=profile("random-token"))["speculative_config"][
        "synthetic_acceptance_rates"
    ] == [0.70]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--preset", BENCH_PRESET, "--local", "vllm-k2~no-such"], "unknown acceptance profile"),
        (["--preset", BENCH_PRESET, "--local", "vllm-k4~real-thinking"], "k <= 3"),
        (["--preset", BENCH_PRESET, "--local", "vllm-k0~real-thinking"], "k = 0 drafts nothing"),
        (["--preset", "gpu-golden", "--local", "vllm-k2~real-thinking"], "has none"),
        (["--preset", BENCH_PRESET, "--local", "ray-app~real-thinking"], "unknown local target"),
    ],
)
def test_bad_profile_targets_are_named_before_anything_starts(argv, message):
    with pytest.raises(BenchError, match=message):
        bench_setup(build_parser().parse_args(["bench", *argv]))


def _level(target: str, c: int, tok_s: float) -> dict:
    times = {"p50": 0.01, "p90": 0.02, "p99": 0.03}
    return {
        "target": target,
        "concurrency": c,
        "output_tokens_per_s": tok_s,
        "requests_per_s": tok_s / 128,
        **{key: times for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s")},
        "failed": 0,
        "requests": 8,
    }


def _report() -> dict:
    tok_s = {  # (target, c) -> output tok/s: k = 2 wins at c = 1 on real data only
        ("vllm-k0", 1): 100.0,
        ("vllm-k0", 64): 1000.0,
        ("vllm-k1~random-token", 1): 110.0,
        ("vllm-k1~random-token", 64): 900.0,
        ("vllm-k2~random-token", 1): 105.0,
        ("vllm-k2~random-token", 64): 800.0,
        ("vllm-k1~real-thinking", 1): 130.0,
        ("vllm-k1~real-thinking", 64): 990.0,
        ("vllm-k2~real-thinking", 1): 150.0,
        ("vllm-k2~real-thinking", 64): 950.0,
    }
    return {
        "targets": sorted({t for t, _ in tok_s}),
        "plan": {"concurrency": [1, 64]},
        "levels": [_level(t, c, v) for (t, c), v in tok_s.items()],
    }


def test_the_break_even_map_names_the_winning_k_per_profile_and_concurrency():
    rows = {(r["profile"], r["concurrency"]): r for r in break_even(_report())}
    assert set(rows) == {(p, c) for p in ("random-token", "real-thinking") for c in (1, 64)}
    real = rows["real-thinking", 1]
    assert real["best_k"] == 2 and real["next_best_k"] == 1
    assert real["over_next_best"] == pytest.approx(150 / 130)
    assert real["over_k0"] == pytest.approx(1.5)
    assert real["tokens_per_s_by_k"] == {0: 100.0, 1: 130.0, 2: 150.0}
    assert rows["random-token", 1]["best_k"] == 1
    # At 64, speculation loses under both: k = 0 wins, and by how much over the next best.
    assert rows["random-token", 64]["best_k"] == 0
    assert rows["real-thinking", 64]["over_next_best"] == pytest.approx(1000 / 990)


def test_the_report_carries_the_map_only_for_profile_runs():
    report = _report()
    assert figures(report)["break_even"] == break_even(report)
    plain = {**report, "targets": ["vllm-k0"], "levels": report["levels"][:2]}
    assert "break_even" not in figures(plain)
    table = markdown(report)
    assert "| real-thinking | 1 | k=0 100.0, k=1 130.0, k=2 150.0 | 2 | 1.154 (k=1) | 1.500 |" in (
        table
    )


def test_the_random_token_profile_is_the_bench_presets_own():
    from serving.config.preset import load_preset

    rates = load_preset(BENCH_PRESET).speculation.synthetic_acceptance.rates
    assert tuple(rates) == PROFILES["random-token"].rates


def test_the_docs_table_shows_each_profiles_rates_and_lengths():
    from serving.records import acceptance_profiles_table

    text = acceptance_profiles_table.table()
    assert "| `real-thinking` | 0.79 / 0.48 / 0.22 | 1.79 / 2.27 / 2.49 |" in text
    assert text.count("\n| `") == len(PROFILES)


def test_the_report_draws_the_map_one_panel_per_profile(tmp_path):
    import json

    from matplotlib.image import imread

    from serving.bench import plots
    from serving.bench.report import write

    written = write(_report(), tmp_path)
    assert tmp_path / "break_even.png" in written
    assert imread(tmp_path / "break_even.png").shape[1] == 2 * 400  # two profiles, 4 in each
    # The same from bench.json, whose keys came back as strings.
    again = json.loads((tmp_path / "bench.json").read_text())
    assert plots.break_even(again, tmp_path / "again.png")
    assert not plots.break_even({"figures": {}}, tmp_path / "none.png")
