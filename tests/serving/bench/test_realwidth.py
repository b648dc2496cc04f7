"""The real-width analysis: the decode byte floor of DeepSeek-V4's shapes and the fit of
step time over depth (serving/bench/decode_bytes.py, serving/bench/realwidth.py)."""

import pytest

from serving.bench import decode_bytes as db
from serving.bench.acceptance_profiles import PROFILES
from serving.bench.realwidth import analyse, linear_fit, markdown, step_seconds
from serving.bench_model.shapes import RELEASED, bench_config

FLASH = RELEASED["flash"]


def test_distinct_experts_go_from_one_tokens_choice_to_all():
    assert db.distinct_experts(FLASH, 1) == pytest.approx(6)
    assert db.distinct_experts(FLASH, 4096) == pytest.approx(256)
    assert db.distinct_experts(FLASH, 8) < db.distinct_experts(FLASH, 24) < 256


def test_weights_at_full_width_match_what_vllm_loads():
    """Every expert of every layer plus the dense parts and embedding + head: about what
    vLLM 0.32 reported loading for the 12-layer Flash bench model on the H200 (~46 GiB,
    FP4 experts), within the small tensors the count leaves out."""
    cfg = bench_config("flash", 12)
    layers = cfg["num_hidden_layers"] + 1  # the MTP layer too
    ratios = cfg["compress_ratios"]
    weights = sum(db.layer_dense_bytes(cfg, ratios[i]) for i in range(layers))
    weights += layers * cfg["n_routed_experts"] * db.expert_bytes(cfg)
    weights += 2 * cfg["vocab_size"] * cfg["hidden_size"] * db.BF16  # embedding and head
    assert weights / 2**30 == pytest.approx(46, rel=0.06)


def test_floor_grows_with_batch_and_drafts():
    floors = [db.floor_seconds(FLASH, batch, 0, 1024) for batch in (1, 8, 64)]
    assert floors == sorted(floors)
    with_drafts = db.step_bytes(FLASH, 8, 2, 1024)
    plain = db.step_bytes(FLASH, 8, 0, 1024)
    assert with_drafts.mtp > 0 == plain.mtp
    assert with_drafts.experts > plain.experts  # 24 verified tokens touch more experts
    assert with_drafts.total == pytest.approx(
        sum(v for k, v in with_drafts.as_dict().items() if k != "total")
    )


def _report(layers: int, fixed: float, per_layer: float, lengths: dict[int, float]) -> dict:
    levels = []
    for k, length in lengths.items():
        for c in (1, 8):
            step = fixed * (1 + 0.2 * k) + per_layer * layers * (1 + 0.1 * k) * c**0.5
            levels.append(
                {
                    "target": f"vllm-k{k}",
                    "concurrency": c,
                    "tpot_s": {"p50": step / length},
                    "ttft_s": {"p50": 0.05},
                    "output_tokens_per_s": c * length / step,
                    "spec_decode": {"acceptance_length": length} if k else None,
                }
            )
    return {
        "targets": [f"vllm-k{k}" for k in lengths],
        "plan": {"concurrency": [1, 8], "max_tokens": 128},
        "levels": levels,
        "setup": {"bench_model": {"shape": "flash", "layers": layers}},
    }


def test_fit_recovers_fixed_and_per_layer_costs_and_break_even():
    lengths = {0: 1.0, 2: 1.99}
    result = analyse([_report(3, 0.002, 0.0005, lengths), _report(12, 0.002, 0.0005, lengths)])
    assert result["depths"] == [3, 12] and result["released_layers"] == 43
    row = next(r for r in result["rows"] if r["k"] == 2 and r["concurrency"] == 1)
    assert row["fixed_s"] == pytest.approx(0.002 * 1.4)
    assert row["per_layer_s"] == pytest.approx(0.0005 * 1.2)
    full = 0.002 * 1.4 + 0.0005 * 1.2 * 43
    assert row["full_step_s"] == pytest.approx(full)
    assert row["full_tpot_s"] == pytest.approx(full / 1.99)
    zero = next(r for r in result["rows"] if r["k"] == 0 and r["concurrency"] == 1)
    # k = 2 pays once a step yields more tokens than its step costs over k = 0's.
    assert row["break_even_acceptance_length"] == pytest.approx(full / zero["full_step_s"])
    assert row["floor_s"] < row["full_step_s"]
    assert "| 2 | 8 |" in markdown(result)


def test_one_depth_gives_no_fit_and_a_non_bench_report_is_refused():
    one = analyse([_report(3, 0.002, 0.0005, {0: 1.0})])
    assert all("full_step_s" not in r for r in one["rows"])
    with pytest.raises(ValueError, match="not a bench-model report"):
        analyse([{"setup": {}, "targets": [], "plan": {"concurrency": []}, "levels": []}])
    with pytest.raises(ValueError, match="two depths"):
        linear_fit({3: 1.0})
    assert step_seconds({"tpot_s": {"p50": None}}) is None


def test_reports_of_one_depth_merge_and_a_faster_deeper_model_is_not_extrapolated():
    lengths = {0: 1.0, 2: 1.99}
    shallow = _report(3, 0.002, 0.0005, {0: 1.0})
    shallow_k2 = _report(3, 0.002, 0.0005, {2: 1.99})  # benched in a second run
    deep = _report(12, 0.002, 0.0005, lengths)
    # A stall in the shallow k = 2 cell at c = 8 makes it slower than the deep one.
    next(x for x in shallow_k2["levels"] if x["concurrency"] == 8)["tpot_s"]["p50"] = 1.0
    deep["client_machine"] = {"gpu": {"name": "NVIDIA H100 80GB HBM3"}}
    result = analyse([deep, shallow, shallow_k2])
    assert result["hbm_bytes_per_s"] == 3.35e12 and result["hbm_bandwidth_of"] == "H100 80GB HBM3"
    merged = next(r for r in result["rows"] if r["k"] == 2 and r["concurrency"] == 1)
    assert merged["measured"].keys() == {"3", "12"} and "full_step_s" in merged
    stalled = next(r for r in result["rows"] if r["k"] == 2 and r["concurrency"] == 8)
    assert "full_step_s" not in stalled and "faster" in stalled["fit_rejected"]
    assert "break_even_acceptance_length" not in stalled
    assert "No fit (" in markdown(result) and "k = 2 c = 8" in markdown(result)


def test_the_map_at_the_released_depth_ranks_each_k_by_its_extrapolated_step():
    lengths = {0: 1.0, 1: 1.7, 2: 1.99}
    result = analyse([_report(3, 0.002, 0.0005, lengths), _report(12, 0.002, 0.0005, lengths)])
    steps = {
        (r["k"], r["concurrency"]): r["full_step_s"] for r in result["rows"] if "full_step_s" in r
    }
    cells = {(m["profile"], m["concurrency"]): m for m in result["break_even_full"]}
    measured = cells[("measured", 8)]["tokens_per_s_by_k"]
    assert measured[0] == pytest.approx(8 / steps[(0, 8)], abs=0.1)
    assert measured[2] == pytest.approx(8 * 1.99 / steps[(2, 8)], abs=0.1)
    # A profile changes the tokens a step yields, not the step.
    thinking = cells[("real-thinking", 8)]
    lengths_thinking = PROFILES["real-thinking"].acceptance_lengths
    assert thinking["tokens_per_s_by_k"][1] == pytest.approx(
        8 * lengths_thinking[0] / steps[(1, 8)], abs=0.1
    )
    best = max(thinking["tokens_per_s_by_k"], key=thinking["tokens_per_s_by_k"].get)
    assert thinking["best_k"] == best
    assert {p for p, _ in cells} == {"measured", *PROFILES}
    assert "Break-even map at 43 layers" in markdown(result)
