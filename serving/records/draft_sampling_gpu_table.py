"""docs/speculation.md's table of what probabilistic drafting costs on a GPU: each run's
committed summary (docs/bench-draft-sampling/*.json, made by
serving.bench.draft_sampling_record), greedy and probabilistic side by side."""

from __future__ import annotations

import json
from typing import Any

from serving.records.regions import table_row
from serving.records.store import ROOT

SUMMARIES = (
    "docs/bench-draft-sampling/h100-temperature-0.json",
    "docs/bench-draft-sampling/h100-temperature-1.json",
)
DOC = "docs/speculation.md"
REGION = "draft-sampling-gpu"
Run = dict[str, Any]


def _rows(path: str, run: Run) -> list[list[str]]:
    rows = []
    for level, cell in run["cells"].items():
        greedy, probabilistic = cell["greedy"], cell["probabilistic"]
        rows.append(
            [
                f"{run['gpu']['name']}, {run['date']} (`{path.rsplit('/', 1)[-1]}`)",
                f"{run['temperature']:g}",
                level.removeprefix("c"),
                f"{greedy['output_tok_s']}",
                f"{probabilistic['output_tok_s']}",
                f"{cell['probabilistic_over_greedy']:.3f}",
                f"{greedy['acceptance_length']} / {probabilistic['acceptance_length']}",
            ]
        )
    return rows


def table(runs: list[Run] | None = None) -> str:
    runs = runs or [json.loads((ROOT / path).read_text()) for path in SUMMARIES]
    lines = [
        "| run | temperature | c | greedy tok/s | probabilistic tok/s | probabilistic / greedy |"
        " acceptance length, greedy / probabilistic |",
        "|---|---|---|---|---|---|---|",
    ]
    for path, run in zip(SUMMARIES, runs, strict=True):
        for row in _rows(path, run):
            lines.append(table_row(row))
    sources = "; ".join(
        f"`{path}` (vLLM {r['versions']['vllm']}, commit {r['commit']}: {r['command']})"
        for path, r in zip(SUMMARIES, runs, strict=True)
    )
    return "\n".join(lines) + f"\n\nOne round per cell. From {sources}.\n"
