"""The serving-overhead table (serving/records/serving_overhead_table.py): its cells are the
committed report's `figures.serving_overhead` and the levels behind it, and a report it
cannot read whole is refused."""

import json

import pytest

from serving.records import serving_overhead_table as so
from serving.records.store import ROOT
from tests.support.table_rows import row_starting


def _report() -> dict:
    return json.loads((ROOT / so.SUMMARY).read_text())


def _level(report: dict, target: str, c: int) -> dict:
    (level,) = [x for x in report["levels"] if x["target"] == target and x["concurrency"] == c]
    return level


def test_the_cells_are_the_report_s_figures_and_levels():
    report = _report()
    (o,) = report["figures"]["serving_overhead"]
    high, low = o["high_concurrency"], o["low_concurrency"]
    text = so.table(report)
    app, base = _level(report, "ray-app", high), _level(report, "vllm-k2", high)
    assert row_starting(text, "| output tok/s") == (
        f"| output tok/s, c = {high} | {app['output_tokens_per_s']:.1f} "
        f"| {base['output_tokens_per_s']:.1f} | **{o['throughput_ratio']:.2f}x** | >= 0.95x |"
    )
    p50 = _level(report, "ray-app", low)["ttft_s"]["p50"] * 1e3
    added = o["added_p50_ttft_s"] * 1e3
    assert row_starting(text, "| TTFT p50").startswith(
        f"| TTFT p50, c = {low} | {p50:.0f} ms |"
    ) and f"| **{added:+.0f} ms** |" in row_starting(text, "| TTFT p50")
    ready = row_starting(text, "| start to ready")
    assert f"| {o['ready_s']:.1f} s | {o['baseline_ready_s']:.1f} s |" in ready
    assert f"**{o['ready_ratio']:.2f}x**" in ready
    assert so.SUMMARY in text and report["client_machine"]["software"]["vllm"] in text


def test_a_changed_figure_shows_and_an_unmeasured_one_is_a_dash():
    report = _report()
    (o,) = report["figures"]["serving_overhead"]
    o["p90_ttft_ratio"] = 1.234
    o["added_p50_ttft_s"] = None
    text = so.table(report)
    assert "| **1.23x** |" in row_starting(text, "| TTFT p90")
    assert "| **-** |" in row_starting(text, "| TTFT p50")


def test_a_report_without_its_overhead_entry_or_a_level_is_refused():
    report = _report()
    del report["figures"]["serving_overhead"]
    with pytest.raises(ValueError, match=r"fast-path/bench\.json: no figures\.serving_overhead"):
        so.table(report)
    report = _report()
    report["levels"] = [x for x in report["levels"] if x["target"] != "vllm-k2"]
    with pytest.raises(ValueError, match=r"no levels entry for vllm-k2 at c = 8"):
        so.table(report)
