"""docs/benchmarks.md's table of `vllm bench forward` beside the served bench, from the
run's committed summary (docs/bench-realwidth/vllm034-h100-forward.json): every column from
the one machine the forward ran on."""

from __future__ import annotations

import json
from typing import Any

from serving.records.store import ROOT

SUMMARY = "docs/bench-realwidth/vllm034-h100-forward.json"
DOC = "docs/benchmarks.md"
REGION = "forward-vs-served"


def table(summary: dict[str, Any] | None = None) -> str:
    summary = summary or json.loads((ROOT / SUMMARY).read_text())
    served = summary["served_tokens_per_s_same_machine"]
    lines = [
        "| k | c | forward step ms | tokens a step | forward ceiling tok/s | served tok/s "
        "| served / ceiling |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in summary["rows"]:
        k, c = row["k"], row["concurrency"]
        ceiling = c * row["tokens_per_step"] / row["step_s"]
        got = served[str(k)][str(c)]
        lines.append(
            f"| {k} | {c} | {row['step_s'] * 1e3:.2f} | {row['tokens_per_step']:.2f} "
            f"| {ceiling:,.0f} | {got:,.0f} | {got / ceiling:.2f} |"
        )
    return (
        "\n".join(lines)
        + f"\n\nFrom `{SUMMARY}`: {summary['gpu']}, vLLM {summary['vllm']}, {summary['date']}.\n"
    )
