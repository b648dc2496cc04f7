"""The break-even map projected from a measured run to other acceptance profiles: the
arithmetic, the committed summary reproduced from its record, and its table."""

import json

import pytest

from serving.bench import break_even_projection as projection
from serving.bench.acceptance_profiles import PROFILES
from serving.records import break_even_table
from serving.records.store import ROOT


def _cells() -> dict:
    return {
        "vllm-k0": {"1": {"tok_s_per_round": [50.0, 100.0]}, "8": {"tok_s_per_round": [800.0]}},
        "vllm-k2": {
            "1": {"tok_s_per_round": [10.0, 120.0], "acceptance_length": 2.0},
            "8": {"tok_s_per_round": [700.0], "acceptance_length": 2.0},
        },
    }


def test_a_profile_scales_each_drafting_k_by_its_acceptance_length():
    real = PROFILES["real-no-thinking"]  # 2.61 at k = 2
    rows = {(r["profile"], r["concurrency"]): r for r in projection.project(_cells(), [real])}
    # The last round, the one with every cache warm; k = 0 as measured.
    assert rows["measured", 1]["tokens_per_s_by_k"] == {0: 100.0, 2: 120.0}
    assert rows["real-no-thinking", 1]["tokens_per_s_by_k"] == {0: 100.0, 2: 156.6}
    assert rows["real-no-thinking", 8]["tokens_per_s_by_k"][2] == pytest.approx(700 * 2.61 / 2)
    assert rows["measured", 8]["best_k"] == 0 and rows["real-no-thinking", 8]["best_k"] == 2


def test_a_run_without_what_the_projection_needs_is_refused():
    cells = _cells()
    del cells["vllm-k2"]["8"]["acceptance_length"]
    with pytest.raises(ValueError, match="no acceptance_length"):
        projection.project(cells, [PROFILES["real-thinking"]])
    with pytest.raises(ValueError, match="needs vllm-k0"):
        projection.project({"vllm-k2": _cells()["vllm-k2"]}, [])
    with pytest.raises(ValueError, match="not a vllm-kK target"):
        projection.project({**_cells(), "ray-app": {}}, [])


def test_the_committed_summary_is_what_the_tool_makes_from_its_record():
    committed = json.loads((ROOT / break_even_table.SUMMARY).read_text())
    source = committed["source"]
    record = json.loads((ROOT / source["record"]).read_text())
    made = projection.summary(
        record, source["run"], source["record"], committed["commit"], committed["date"]
    )
    assert json.loads(json.dumps(made)) == committed


def test_the_command_names_what_is_wrong(capsys, tmp_path):
    record = ROOT / "docs/bench-realwidth/vllm034-h100-mtp.json"
    args = [str(record), "depth-9", "--commit", "x", "--date", "2026-12-07"]
    assert projection.main(args) == 2
    assert "has no run 'depth-9' (runs: depth-3, depth-3b, depth-6)" in capsys.readouterr().err
    assert projection.main([str(tmp_path / "none.json"), "depth-6", *args[2:]]) == 2


def test_the_table_names_the_winner_and_its_margin():
    summary = json.loads((ROOT / break_even_table.SUMMARY).read_text())
    text = break_even_table.table(summary)
    lines = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ")}
    assert lines["| measured"].split(" | ")[1] == "k = 2: 1.24x k = 0"
    assert lines["| measured"].split(" | ")[2] == "k = 0 (1.24x k = 2)"
    assert "Projected, not measured" in text
