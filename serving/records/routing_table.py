"""docs/benchmarks.md's prefix-routing table (region "prefix-routing"), from the two runs'
committed routing summaries (docs/bench-routing-gpu/routing.json on the H200,
docs/bench-routing/history/routing.json, the history-heavy run, on the CPU): each row is one
arm's figures, its replicas in the summary's order."""

from __future__ import annotations

import json
from typing import Any

from serving.records.regions import bench_machine, table_row
from serving.records.store import ROOT

# (the machine as the table names it, the run's summary). docs/bench-routing/routing.json,
# the system-prompt-heavy CPU run, is quoted in the prose below the table, not in it.
SUMMARIES = (
    ("H200", "docs/bench-routing-gpu/routing.json"),
    ("CPU", "docs/bench-routing/history/routing.json"),
)
DOC = "docs/benchmarks.md"
REGION = "prefix-routing"
# The summary's arm -> its name in the table.
ARMS = (("ray-app", "default"), ("ray-app-prefix", "prefix"), ("ray-app-single", "one replica"))
FIELDS = ("requests", "failed", "hit_rate", "output_tokens_per_s", "replicas")
Summary = dict[str, Any]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f}"


def _tok_s(value: float) -> str:
    # The CPU arms make a few tok/s: one decimal under 10, whole from there on.
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _arm(path: str, summary: Summary, arm: str) -> dict[str, Any]:
    where = f"{path}: arms.{arm}"
    got = summary.get("arms", {}).get(arm)
    if got is None:
        raise ValueError(f"{where}: no such arm")
    for field in FIELDS:
        if field not in got:
            raise ValueError(f"{where}: no {field}")
    for figure, p in (
        ("ttft_shared", "p50_s"),
        ("ttft_shared", "p90_s"),
        ("ttft_unrelated", "p50_s"),
    ):
        if p not in got.get(figure, {}):
            raise ValueError(f"{where}: no {figure}.{p}")
    for name, replica in got["replicas"].items():
        for field in ("requests", "hit_rate"):
            if field not in replica:
                raise ValueError(f"{where}.replicas.{name}: no {field}")
    return got


def _row(machine: str, path: str, summary: Summary, arm: str, label: str) -> str:
    # An arm's figures pool all its rounds (`rounds` holds each); both committed runs ran one.
    got = _arm(path, summary, arm)
    shared, unrelated = got["ttft_shared"], got["ttft_unrelated"]
    replicas = ", ".join(f"{r['requests']} ({r['hit_rate']:.2f})" for r in got["replicas"].values())
    cells = [
        machine,
        label,
        f"{got['requests']} ({got['failed']})",
        f"{got['hit_rate']:.2f}",
        f"{_ms(shared['p50_s'])} / {_ms(shared['p90_s'])} ms",
        f"{_ms(unrelated['p50_s'])} ms",
        _tok_s(got["output_tokens_per_s"]),
        replicas,
    ]
    return table_row(cells)


def _source(path: str, summary: Summary) -> str:
    machine, rounds = bench_machine(path, summary), summary.get("rounds")
    if rounds is None:
        raise ValueError(f"{path}: no rounds")
    return f"`{path}` ({machine}, {rounds} round{'' if rounds == 1 else 's'} an arm)"


def table(summaries: list[Summary] | None = None) -> str:
    summaries = summaries or [json.loads((ROOT / path).read_text()) for _, path in SUMMARIES]
    lines = [
        "| machine | arm | requests (failed) | hit rate | TTFT p50 / p90, conversation turns "
        "| TTFT p50, unrelated | output tok/s | requests per replica (hit rate) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (machine, path), summary in zip(SUMMARIES, summaries, strict=True):
        lines += [_row(machine, path, summary, arm, label) for arm, label in ARMS]
    sources = " and ".join(
        _source(path, s) for (_, path), s in zip(SUMMARIES, summaries, strict=True)
    )
    return "\n".join(lines) + f"\n\nFrom {sources}.\n"
