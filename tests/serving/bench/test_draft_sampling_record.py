"""The draft-sampling cost run summarised from its two arms' bench.json: the H100 run's
cells give back docs/bench-draft-sampling/h100-temperature-0.json's figures."""

import json
from pathlib import Path

import pytest

from serving.bench.draft_sampling_record import METHODS, RecordError, build
from serving.records.store import ROOT

COMMITTED = "docs/bench-draft-sampling/h100-temperature-0.json"


def _arms(root: Path, committed: dict, drop: str = "") -> Path:
    """Each arm's bench.json as the bench writes it, from the committed figures."""
    for method in METHODS:
        levels = []
        for name, cell in committed["cells"].items():
            if name == drop and method == "probabilistic":
                continue
            run = cell[method]
            levels.append({
                "concurrency": int(name[1:]),
                "requests": run["requests"],
                "failed": 0,
                "output_tokens_per_s": run["output_tok_s"],
                "tpot_s": {"p50": run["tpot_p50_ms"] / 1e3},
                "spec_decode": {"acceptance_length": run["acceptance_length"]},
            })  # fmt: skip
        bench = {
            "plan": {"temperature": committed["temperature"]},
            "levels": levels,
            "ready_seconds": {"vllm-k2": committed["ready_s"][method]},
            "client_machine": {
                "cpus": 16,
                "gpu": {"name": committed["gpu"]["name"], "cuda": "13.0"},
                "software": {"vllm": "0.34.0", "torch": "2.14.0+cu130"},
            },
        }
        (root / method).mkdir(parents=True, exist_ok=True)
        (root / method / "bench.json").write_text(json.dumps(bench))
    return root


def test_both_arms_give_back_the_committed_cells_and_ratios(tmp_path):
    committed = json.loads((ROOT / COMMITTED).read_text())
    record = build(_arms(tmp_path, committed), "533da80", "2026-12-07", "w", "c")
    assert record["temperature"] == committed["temperature"]
    assert record["ready_s"] == committed["ready_s"]
    for name, cell in committed["cells"].items():
        got = record["cells"][name]
        assert got["probabilistic_over_greedy"] == cell["probabilistic_over_greedy"], name
        for method in METHODS:
            wanted = {k: cell[method][k] for k in ("output_tok_s", "tpot_p50_ms", "requests")}
            assert {k: got[method][k] for k in wanted} == wanted, (name, method)


def test_a_cell_one_arm_did_not_run_is_refused(tmp_path):
    committed = json.loads((ROOT / COMMITTED).read_text())
    with pytest.raises(RecordError, match="cell c8 ran only with"):
        build(_arms(tmp_path, committed, drop="c8"), "c", "d", "w", "m")
    (tmp_path / "greedy" / "bench.json").unlink()
    with pytest.raises(RecordError, match="greedy arm did not finish"):
        build(tmp_path, "c", "d", "w", "m")
