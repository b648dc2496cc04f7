"""docs/benchmarks.md's table of the speculation guard against static k and vLLM's table
(region "speculation-guard"), from the two runs' committed guard reports
(docs/bench-guard-idle-drafter/guard-report.json on the CPU,
docs/bench-guard-gpu/2026-12-04-long/guard-report.json on the H200): each row is one of the
report's `cells`, a workload at one concurrency."""

from __future__ import annotations

import json
from typing import Any

from serving.records.regions import bench_machine, table_row
from serving.records.store import ROOT

# (the machine as the table names it, the run's guard report). The reports' `bench.json`
# beside them hold only the engines' start: the grid's figures are in `cells` here.
SUMMARIES = (
    ("CPU", "docs/bench-guard-idle-drafter/guard-report.json"),
    ("H200", "docs/bench-guard-gpu/2026-12-04-long/guard-report.json"),
)
DOC = "docs/benchmarks.md"
REGION = "speculation-guard"
# The columns' targets in order; every run had these.
TARGETS = ("vllm-k0", "vllm-k1", "vllm-k2", "vllm-batch", "vllm-guard")
# Only the CPU run had the idle drafter (the H200's sixth engine was the trimming guard, not
# shown): a run that did not start it shows "-".
IDLE = "vllm-idle-drafter"
RATIOS = ("best_static", "guard_vs_best_static", "guard_vs_batch_table")
Report = dict[str, Any]


def _tok_s(value: float) -> str:
    return f"{value:.0f}"


def _row(machine: str, path: str, report: Report, i: int, cell: dict[str, Any]) -> str:
    where = f"{path}: cells[{i}]"
    for field in ("workload", "concurrency", "tokens_per_s", *RATIOS):
        if field not in cell:
            raise ValueError(f"{where}: no {field}")
    # tokens_per_s: the cell's output tokens over the summed wall time of the rounds it ran.
    tps = cell["tokens_per_s"]
    ran_idle = IDLE in report.get("start", {}).get("order", [])
    for target in (*TARGETS, IDLE) if ran_idle else TARGETS:
        if target not in tps:
            raise ValueError(f"{where}: no tokens_per_s.{target}")
    best = cell["best_static"].removeprefix("vllm-")
    cells = [
        machine,
        cell["workload"],
        str(cell["concurrency"]),
        *(_tok_s(tps[t]) for t in TARGETS),
        _tok_s(tps[IDLE]) if ran_idle else "-",
        f"{cell['guard_vs_best_static']:.3f} ({best})",
        f"{cell['guard_vs_batch_table']:.3f}",
    ]
    return table_row(cells)


def _source(path: str, report: Report) -> str:
    return f"`{path}` ({bench_machine(path, report)})"


def table(summaries: list[Report] | None = None) -> str:
    summaries = summaries or [json.loads((ROOT / path).read_text()) for _, path in SUMMARIES]
    lines = [
        "| machine | workload | c | k=0 | k=1 | k=2 | table | guard | idle drafter "
        "| guard / best static | guard / table |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (machine, path), report in zip(SUMMARIES, summaries, strict=True):
        if "cells" not in report:
            raise ValueError(f"{path}: no cells")
        lines += [_row(machine, path, report, i, c) for i, c in enumerate(report["cells"])]
    sources = " and ".join(
        _source(path, r) for (_, path), r in zip(SUMMARIES, summaries, strict=True)
    )
    return "\n".join(lines) + f"\n\nFrom {sources}.\n"
