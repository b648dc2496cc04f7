"""The P/D against one engine table (serving/records/pd_table.py): its cells are the committed
summary's level figures and `compare` ratios, a level the arms did not serve alike is not
compared, and a summary it cannot read whole is refused."""

import json

import pytest

from serving.records import pd_table as pd
from serving.records.store import ROOT
from tests.support.table_rows import row_starting


def _summary() -> dict:
    return json.loads((ROOT / pd.SUMMARY).read_text())


def _line(text: str, c: str) -> str:
    return row_starting(text, f"| {c} |")


def _figures(level: dict) -> str:
    ttft, tpot = level["ttft"], level["tpot"]
    return (
        f"{ttft['p50_s'] * 1e3:,.0f} / {ttft['p90_s'] * 1e3:,.0f}, "
        f"{tpot['p50_s'] * 1e3:.1f} / {tpot['p90_s'] * 1e3:.1f}, "
        f"{level['output_tokens_per_s']:,.0f}"
    )


def test_the_cells_are_the_summary_s_levels_and_ratios():
    summary = _summary()
    one = summary["arms"]["ray-app-ingress"]["levels"]["32"]
    two = summary["arms"]["ray-app-pd"]["levels"]["32"]
    ratios = summary["compare"]["levels"]["32"]
    assert _line(pd.table(summary), "32") == (
        f"| 32 | {_figures(one)} | {_figures(two)} | {ratios['ttft_p50_ratio']:.2f}, "
        f"{ratios['tpot_p50_ratio']:.2f}, {ratios['throughput_ratio']:.2f} |"
    )
    text = pd.table(summary)
    assert pd.SUMMARY in text and summary["client_machine"]["gpu"]["name"] in text


def test_a_level_with_a_failed_request_is_not_compared_and_a_changed_figure_shows():
    summary = _summary()
    # The committed run's c = 8: one engine cut a reply short, so the arms differ.
    assert summary["arms"]["ray-app-ingress"]["levels"]["8"]["failed"]
    assert _line(pd.table(summary), "8").endswith("| not comparable (below) |")
    summary["arms"]["ray-app-pd"]["levels"]["1"]["failed"] = 1
    assert _line(pd.table(summary), "1").endswith("| not comparable (below) |")
    summary = _summary()
    summary["arms"]["ray-app-pd"]["levels"]["1"]["ttft"]["p90_s"] = 12.3456
    summary["compare"]["levels"]["1"]["throughput_ratio"] = 0.5
    line = _line(pd.table(summary), "1")
    assert " / 12,346, " in line and line.endswith(", 0.50 |")


def test_a_level_without_a_figure_is_refused():
    summary = _summary()
    del summary["arms"]["ray-app-pd"]["levels"]["32"]["tpot"]["p90_s"]
    with pytest.raises(ValueError, match=r"pd\.json: arms\.ray-app-pd\.levels\.32: no tpot\.p90_s"):
        pd.table(summary)
    summary = _summary()
    del summary["compare"]["levels"]["1"]["tpot_p50_ratio"]
    with pytest.raises(ValueError, match=r"pd\.json: compare\.levels\.1: no 'tpot_p50_ratio'"):
        pd.table(summary)
