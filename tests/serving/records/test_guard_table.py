"""The speculation guard table (serving/records/guard_table.py): its cells are the committed
guard reports' `cells`, a run without the idle drafter shows a dash there, and a report it
cannot read whole is refused."""

import json

import pytest

from serving.records import guard_table as guard
from serving.records.store import ROOT
from tests.support.table_rows import row_starting


def _reports() -> list[dict]:
    return [json.loads((ROOT / path).read_text()) for _, path in guard.SUMMARIES]


def _cell(report: dict, workload: str, c: int) -> dict:
    (cell,) = [x for x in report["cells"] if x["workload"] == workload and x["concurrency"] == c]
    return cell


def test_the_cells_are_the_reports_cells():
    cpu, gpu = reports = _reports()
    text = guard.table(reports)
    got = _cell(cpu, "zero", 8)
    tps = got["tokens_per_s"]
    figures = " | ".join(f"{tps[t]:.0f}" for t in (*guard.TARGETS, guard.IDLE))
    assert row_starting(text, "| CPU | zero | 8 |") == (
        f"| CPU | zero | 8 | {figures} | {got['guard_vs_best_static']:.3f} "
        f"({got['best_static'].removeprefix('vllm-')}) | {got['guard_vs_batch_table']:.3f} |"
    )
    # The H200 run had no idle drafter: a dash, and its trimming guard is not a column.
    got = _cell(gpu, "high", 64)
    line = row_starting(text, "| H200 | high | 64 |")
    assert f"| {got['tokens_per_s']['vllm-guard']:.0f} | - |" in line
    assert f"{got['tokens_per_s']['vllm-guard-trim']:.0f}" not in line
    assert len([x for x in text.splitlines() if x.startswith("| CPU |")]) == len(cpu["cells"])
    assert gpu["client_machine"]["gpu"]["name"] in text
    for _, path in guard.SUMMARIES:
        assert path in text


def test_a_changed_figure_shows():
    reports = _reports()
    got = _cell(reports[1], "high", 8)
    got["tokens_per_s"]["vllm-batch"] = 1234.4
    got["guard_vs_batch_table"] = 0.5
    got["best_static"] = "vllm-k1"
    line = row_starting(guard.table(reports), "| H200 | high | 8 |")
    assert "| 1234 |" in line and "(k1)" in line and line.endswith("| 0.500 |")


def test_a_report_without_a_figure_is_refused():
    reports = _reports()
    del reports[1]["cells"][2]["guard_vs_batch_table"]
    with pytest.raises(
        ValueError, match=r"2026-12-04-long/guard-report\.json: cells\[2\]: no guard_vs_batch_table"
    ):
        guard.table(reports)
    reports = _reports()
    # The CPU run started the idle drafter, so every cell must have its figure.
    del reports[0]["cells"][0]["tokens_per_s"][guard.IDLE]
    with pytest.raises(
        ValueError,
        match=r"bench-guard-idle-drafter/guard-report\.json: cells\[0\]: "
        r"no tokens_per_s\.vllm-idle-drafter",
    ):
        guard.table(reports)
    reports = _reports()
    del reports[0]["cells"]
    with pytest.raises(ValueError, match=r"bench-guard-idle-drafter/guard-report\.json: no cells"):
        guard.table(reports)
