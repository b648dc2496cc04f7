"""docs/benchmarks.md's break-even map by acceptance profile, from its committed summary
(serving/bench/break_even_projection.py's output): per profile and concurrency, the k
that made the most output tok/s and by how much."""

from __future__ import annotations

import json
from typing import Any

from serving.records.regions import table_row
from serving.records.store import ROOT

SUMMARY = "docs/bench-realwidth/break-even-h100-6-layers.json"
DOC = "docs/benchmarks.md"
REGION = "break-even"


def _cell(row: dict[str, Any] | None) -> str:
    """The winner and its margin: over k = 0 for a k that drafts (and over the next best
    k when that is another drafting k); for k = 0, over the best k that drafts."""
    if row is None:
        return "-"
    best, runner_up = row["best_k"], row["next_best_k"]
    if best == 0:
        return f"k = 0 ({row['over_next_best']:.2f}x k = {runner_up})"
    text = f"k = {best}: {row['over_k0']:.2f}x k = 0"
    return text + (f", {row['over_next_best']:.2f}x k = {runner_up}" if runner_up else "")


def table(summary: dict[str, Any] | None = None) -> str:
    summary = summary or json.loads((ROOT / SUMMARY).read_text())
    rows = summary["rows"]
    levels = sorted({r["concurrency"] for r in rows})
    profiles = list(dict.fromkeys(r["profile"] for r in rows))
    cell = {(r["profile"], r["concurrency"]): r for r in rows}
    lines = [
        "| acceptance | " + " | ".join(f"c = {c}" for c in levels) + " |",
        "|---" * (len(levels) + 1) + "|",
    ]
    for profile in profiles:
        found = [_cell(cell.get((profile, c))) for c in levels]
        lines.append(table_row([profile, *found]))
    lengths = "; ".join(
        f"{name} {' / '.join(f'{x:.2f}' for x in p['acceptance_lengths'])}"
        for name, p in summary["profiles"].items()
    )
    return (
        "\n".join(lines)
        + f"\n\n{summary['layers']} layers, {summary['gpu']}, vLLM {summary['vllm']}. The"
        f" winning k in each cell and its output tok/s over the others. Acceptance"
        f" lengths at k = 1 / 2 / 3: {lengths}; `measured` is the run's own. Projected, not"
        f" measured: `{SUMMARY}` (`{summary['command']}`).\n"
    )
