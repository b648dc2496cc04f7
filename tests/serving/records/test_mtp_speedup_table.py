"""The MTP speedup table (serving/records/mtp_speedup_table.py): its cells are the committed
reports' `figures.mtp` and k = 0 levels, and a report it cannot read whole is refused."""

import json

import pytest

from serving.records import mtp_speedup_table as mtp
from serving.records.store import ROOT
from tests.support.table_rows import row_starting


def _reports() -> list[dict]:
    return [json.loads((ROOT / path).read_text()) for _, path in mtp.SUMMARIES]


def _k0(report: dict, c: int) -> float:
    (level,) = [x for x in report["levels"] if x["target"] == "vllm-k0" and x["concurrency"] == c]
    return level["output_tokens_per_s"]


def test_the_cells_are_the_reports_figures():
    cpu, gpu = reports = _reports()
    text = mtp.table(reports)
    (c8,) = [b for b in cpu["figures"]["mtp"] if b["concurrency"] == 8]
    k3 = c8["by_k"]["3"]
    assert row_starting(text, "| CPU | 8 | 3 |") == (
        f"| CPU | 8 | 3 | {k3['tokens_per_s']:.1f} | {_k0(cpu, 8):.1f} "
        f"| {k3['speedup']:.2f}x | {k3['bound']:.2f}x |"
    )
    (c64,) = [b for b in gpu["figures"]["mtp"] if b["concurrency"] == 64]
    # k = 2, the presets' k, is the one in bold.
    assert f"| **{c64['by_k']['2']['speedup']:.2f}x** |" in row_starting(text, "| H200 | 64 | 2 |")
    assert gpu["client_machine"]["software"]["vllm"] in text
    for _, path in mtp.SUMMARIES:
        assert path in text


def test_a_changed_figure_shows_and_a_null_bound_is_a_dash():
    reports = _reports()
    block = reports[0]["figures"]["mtp"][0]
    block["by_k"]["1"]["tokens_per_s"] = 1234.56
    block["by_k"]["1"]["bound"] = None
    line = row_starting(mtp.table(reports), f"| CPU | {block['concurrency']} | 1 |")
    assert "| 1234.6 |" in line and line.endswith("| - |")


def test_a_report_without_a_figure_or_its_k0_level_is_refused():
    reports = _reports()
    del reports[1]["figures"]["mtp"][1]["by_k"]["2"]["speedup"]
    with pytest.raises(ValueError, match=r"docs/bench-gpu/bench\.json: .* no speedup"):
        mtp.table(reports)
    reports = _reports()
    reports[0]["levels"] = [x for x in reports[0]["levels"] if x["target"] != "vllm-k0"]
    with pytest.raises(ValueError, match=r"docs/bench/bench\.json: no levels entry for vllm-k0"):
        mtp.table(reports)
    reports = _reports()
    del reports[1]["figures"]["mtp"]
    with pytest.raises(ValueError, match=r"docs/bench-gpu/bench\.json: no figures\.mtp"):
        mtp.table(reports)
