"""The prefix-routing table (serving/records/routing_table.py): its cells are the committed
routing summaries' arm figures, and a summary it cannot read whole is refused."""

import json

import pytest

from serving.records import routing_table as routing
from serving.records.store import ROOT


def _summaries() -> list[dict]:
    return [json.loads((ROOT / path).read_text()) for _, path in routing.SUMMARIES]


def _line(text: str, start: str) -> str:
    (line,) = [x for x in text.splitlines() if x.startswith(start)]
    return line


def _expected(machine: str, label: str, arm: dict, tok_s: str) -> str:
    shared, unrelated = arm["ttft_shared"], arm["ttft_unrelated"]
    replicas = ", ".join(f"{r['requests']} ({r['hit_rate']:.2f})" for r in arm["replicas"].values())
    return (
        f"| {machine} | {label} | {arm['requests']} ({arm['failed']}) | {arm['hit_rate']:.2f} "
        f"| {shared['p50_s'] * 1e3:.0f} / {shared['p90_s'] * 1e3:.0f} ms "
        f"| {unrelated['p50_s'] * 1e3:.0f} ms | {tok_s} | {replicas} |"
    )


def test_the_cells_are_the_summaries_arms():
    gpu, cpu = summaries = _summaries()
    text = routing.table(summaries)
    arm = gpu["arms"]["ray-app"]
    assert _line(text, "| H200 | default |") == _expected(
        "H200", "default", arm, f"{arm['output_tokens_per_s']:.0f}"
    )
    # The CPU arms make a few tok/s: one decimal.
    arm = cpu["arms"]["ray-app-prefix"]
    assert _line(text, "| CPU | prefix |") == _expected(
        "CPU", "prefix", arm, f"{arm['output_tokens_per_s']:.1f}"
    )
    assert gpu["client_machine"]["gpu"]["name"] in text
    for _, path in routing.SUMMARIES:
        assert path in text


def test_a_changed_figure_shows():
    summaries = _summaries()
    arm = summaries[0]["arms"]["ray-app-single"]
    arm["ttft_shared"]["p90_s"] = 1.2346
    arm["hit_rate"] = 0.123
    (replica,) = arm["replicas"].values()
    replica["requests"] = 79
    line = _line(routing.table(summaries), "| H200 | one replica |")
    assert "| 0.12 |" in line and " / 1235 ms |" in line and line.endswith(" 79 (0.50) |")


def test_a_summary_without_a_figure_is_refused():
    summaries = _summaries()
    del summaries[1]["arms"]["ray-app"]["ttft_unrelated"]["p50_s"]
    with pytest.raises(
        ValueError, match=r"history/routing\.json: arms\.ray-app: no ttft_unrelated\.p50_s"
    ):
        routing.table(summaries)
    summaries = _summaries()
    del summaries[0]["arms"]["ray-app-prefix"]["output_tokens_per_s"]
    with pytest.raises(
        ValueError,
        match=r"bench-routing-gpu/routing\.json: arms\.ray-app-prefix: no output_tokens_per_s",
    ):
        routing.table(summaries)
    summaries = _summaries()
    del summaries[0]["arms"]["ray-app-single"]
    with pytest.raises(
        ValueError, match=r"bench-routing-gpu/routing\.json: arms\.ray-app-single: no such arm"
    ):
        routing.table(summaries)
    summaries = _summaries()
    name = next(iter(summaries[1]["arms"]["ray-app"]["replicas"]))
    del summaries[1]["arms"]["ray-app"]["replicas"][name]["hit_rate"]
    with pytest.raises(ValueError, match=rf"arms\.ray-app\.replicas\.{name}: no hit_rate"):
        routing.table(summaries)
