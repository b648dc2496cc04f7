"""The MTP-over-concurrency table (serving/records/mtp_concurrency_table.py): its cells are
the committed summary's one-round figures, and a summary it cannot read whole is refused."""

import json

import pytest

from serving.records import mtp_concurrency_table as mtp
from serving.records.store import ROOT
from tests.support.table_rows import row_starting


def _summary() -> dict:
    return json.loads((ROOT / mtp.SUMMARY).read_text())


def test_the_cells_are_the_summary_s_rounds_and_ratios():
    summary = _summary()
    cells = summary["runs"]["depth-6"]["cells"]
    k0, k2 = cells["vllm-k0"]["1"], cells["vllm-k2"]["1"]
    text = mtp.table(summary)
    (got,) = k2["tok_s_per_round"]
    ratio = got / k0["tok_s_per_round"][0]
    assert row_starting(text, "| 6 | k = 2 |").startswith(
        f"| 6 | k = 2 | {got:.0f} ({ratio:.2f}x) |"
    )
    (guard_128,) = summary["runs"]["depth-3b"]["cells"]["vllm-guard"]["128"]["tok_s_per_round"]
    assert f" {guard_128:.0f} (" in row_starting(text, "| 3 | guard")
    assert mtp.SUMMARY in text and summary["date"] in text


def test_a_changed_figure_shows_and_acceptance_is_the_range_of_its_cells():
    summary = _summary()
    k1 = summary["runs"]["depth-3b"]["cells"]["vllm-k1"]
    k1["64"]["tok_s_per_round"] = [12345.4]
    k1["8"]["acceptance_length"] = 1.5
    line = row_starting(mtp.table(summary), "| 3 | k = 1 |")
    assert "| 12345 |" in line and line.endswith("| 1.50-1.71 |")
    # k = 0 drafts nothing: no acceptance length in its cells, shown as "-".
    assert row_starting(mtp.table(summary), "| 6 | k = 0 |").endswith("| - |")


def test_a_cell_without_a_figure_or_with_several_rounds_is_refused():
    summary = _summary()
    del summary["runs"]["depth-6"]["cells"]["vllm-k2"]["32"]["tok_s_per_round"]
    with pytest.raises(ValueError, match=r"runs\.depth-6\.cells\.vllm-k2\.32: no tok_s_per_round"):
        mtp.table(summary)
    summary = _summary()
    summary["runs"]["depth-3b"]["cells"]["vllm-k1"]["1"]["tok_s_per_round"] = [600.0, 650.0]
    with pytest.raises(ValueError, match="2 rounds, the table shows one"):
        mtp.table(summary)
    summary = _summary()
    del summary["runs"]["depth-3b"]["cells"]["vllm-guard"]
    with pytest.raises(ValueError, match=r"no runs\.depth-3b\.cells\.vllm-guard"):
        mtp.table(summary)
