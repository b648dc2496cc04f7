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


GOLDEN = "docs/bench-draft-sampling/h100-golden-fixed-kv.json"


def _golden_arm(root: Path, arm: str, figures: dict, last_line: str) -> Path:
    """A golden arm as tests/gpu/draft_sampling.sh leaves it: the test's record and log."""
    record = {"name": "draft_sampling_cpu", "vllm": "0.34.0", "figures": figures}
    (root / f"records-{arm}").mkdir(parents=True)
    (root / f"records-{arm}" / "draft_sampling_cpu.json").write_text(json.dumps(record))
    slow = f"[slow step] 273s setup tests/...::test_drafts[greedy]\n{'.' * 7}  [100%]\n"
    (root / f"golden-{arm}.log").write_text(slow + last_line + "\n")
    return root


def test_a_golden_only_run_gives_back_the_committed_record(tmp_path):
    committed = json.loads((ROOT / GOLDEN).read_text())
    arm = committed["golden"]["fixed-kv"]
    _golden_arm(tmp_path, "fixed-kv", arm["figures"], arm["result"])
    (tmp_path / "gpu.txt").write_text("NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB\n")
    record = build(tmp_path, committed["commit"], committed["date"], "w", "c")
    assert record["golden"] == committed["golden"]
    assert (record["gpu"], record["versions"]) == (committed["gpu"], committed["versions"])
    assert "cells" not in record  # no bench arm ran


def test_a_golden_arm_that_did_not_finish_and_an_empty_run_are_refused(tmp_path):
    figures = json.loads((ROOT / GOLDEN).read_text())["golden"]["fixed-kv"]["figures"]
    with pytest.raises(RecordError, match="neither a bench arm"):
        build(tmp_path, "c", "d", "w", "m")
    _golden_arm(tmp_path, "default", figures, "")  # killed before pytest's summary
    with pytest.raises(RecordError, match="golden-default.log: no pytest result line"):
        build(tmp_path, "c", "d", "w", "m")
    (tmp_path / "golden-default.log").write_text("==== 1 failed, 6 passed in 80.1s ====\n")
    assert build(tmp_path, "c", "d", "w", "m")["golden"]["default"]["result"] == (
        "1 failed, 6 passed in 80.1s"
    )
    # An arm whose engines died before writing the record: its verdict kept, no figures.
    (tmp_path / "golden-crashed.log").write_text("E   RuntimeError: engine died\n")
    crashed = build(tmp_path, "c", "d", "w", "m")["golden"]["crashed"]
    assert crashed == {"result": "no pytest result; no record", "vllm": None, "figures": None}
