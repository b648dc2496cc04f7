"""docs/benchmarks.md's serving-overhead table (region "serving-overhead"): the Ray Serve app
against vLLM's own server, from the run's committed bench report
(docs/bench-routing/fast-path/bench.json): each ratio is the report's
`figures.serving_overhead` entry, each side's figure the level it was taken from."""

from __future__ import annotations

import json
from typing import Any

from serving.records.regions import table_row
from serving.records.store import ROOT

SUMMARY = "docs/bench-routing/fast-path/bench.json"
DOC = "docs/benchmarks.md"
REGION = "serving-overhead"
APP, BASELINE = "ray-app", "vllm-k2"
# The goals the app is held to: stated here, not measured, so no record carries them.
GOALS = {
    "throughput": ">= 0.95x",
    "added_ttft": "<= +10 ms",
    "p90_ttft": "<= 1.2x",
    "ready": "<= 1.5x",
}
Report = dict[str, Any]


def _overhead(report: Report) -> dict[str, Any]:
    for row in report.get("figures", {}).get("serving_overhead", []):
        if row.get("target") == APP and row.get("baseline") == BASELINE:
            return row
    raise ValueError(f"{SUMMARY}: no figures.serving_overhead entry for {APP} against {BASELINE}")


def _level(report: Report, target: str, concurrency: int) -> dict[str, Any]:
    for level in report.get("levels", []):
        if level.get("target") == target and level.get("concurrency") == concurrency:
            return level
    raise ValueError(f"{SUMMARY}: no levels entry for {target} at c = {concurrency}")


def _num(value: float | None, fmt: str) -> str:
    # The report's figures are null where a side was not measured.
    return "-" if value is None else fmt.format(value)


def _ms(value: float | None) -> str:
    return _num(None if value is None else value * 1e3, "{:.0f} ms")


def _row(label: str, app: str, base: str, against: str, goal: str) -> str:
    cells = [label, app, base, f"**{against}**", goal]
    return table_row(cells)


def table(report: Report | None = None) -> str:
    report = report or json.loads((ROOT / SUMMARY).read_text())
    o = _overhead(report)
    low, high = o["low_concurrency"], o["high_concurrency"]
    # Throughput and p90 TTFT at the run's highest concurrency, p50 TTFT at its lowest: the
    # levels `figures.serving_overhead` took its ratios from.
    app_hi, base_hi = _level(report, APP, high), _level(report, BASELINE, high)
    app_lo, base_lo = _level(report, APP, low), _level(report, BASELINE, low)
    added = o["added_p50_ttft_s"]
    lines = [
        "| figure | Ray app | vLLM's server | Ray app against vLLM's | target |",
        "|---|---|---|---|---|",
        _row(
            f"output tok/s, c = {high}",
            f"{app_hi['output_tokens_per_s']:.1f}",
            f"{base_hi['output_tokens_per_s']:.1f}",
            f"{o['throughput_ratio']:.2f}x",
            GOALS["throughput"],
        ),
        _row(
            f"TTFT p50, c = {low}",
            _ms(app_lo["ttft_s"]["p50"]),
            _ms(base_lo["ttft_s"]["p50"]),
            _num(None if added is None else added * 1e3, "{:+.0f} ms"),
            GOALS["added_ttft"],
        ),
        _row(
            f"TTFT p90, c = {high}",
            _ms(app_hi["ttft_s"]["p90"]),
            _ms(base_hi["ttft_s"]["p90"]),
            _num(o["p90_ttft_ratio"], "{:.2f}x"),
            GOALS["p90_ttft"],
        ),
        _row(
            "start to ready",
            _num(o.get("ready_s"), "{:.1f} s"),
            _num(o.get("baseline_ready_s"), "{:.1f} s"),
            _num(o["ready_ratio"], "{:.2f}x"),
            GOALS["ready"],
        ),
    ]
    plan, m = report["plan"], report.get("client_machine")
    # A report from before the client machine was recorded names none.
    where = (
        m and f": {m['cpu_model']}, {m['cpus']} cores ({m['isa']}), vLLM {m['software']['vllm']}"
    )
    return (
        "\n".join(lines) + f"\n\nFrom `{SUMMARY}`{where or ''}; {plan['rounds']} rounds "
        f"of {plan['requests_per_level']} requests x {plan['max_tokens']} tokens a level.\n"
    )
