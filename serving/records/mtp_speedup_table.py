"""docs/benchmarks.md's MTP speedup table (region "mtp-speedup"), from the two golden runs'
committed bench reports (docs/bench/bench.json on the CPU, docs/bench-gpu/bench.json on the
H200): each row is the report's `figures.mtp` entry for one concurrency and k, beside the
k = 0 level it is weighed against."""

from __future__ import annotations

import json
from typing import Any

from serving.records.regions import bench_machine, table_row
from serving.records.store import ROOT

# (the machine as the table names it, the run's report). The CPU run predates the report's
# `client_machine`, so its machine is named here, not read.
SUMMARIES = (
    ("CPU", "docs/bench/bench.json"),
    ("H200", "docs/bench-gpu/bench.json"),
)
DOC = "docs/benchmarks.md"
REGION = "mtp-speedup"
# The k that presets cpu-tiny and gpu-golden draft: its speedups are the ones in bold.
SHIPPED_K = "2"
Report = dict[str, Any]


def _k0_tok_s(report: Report, path: str, concurrency: int) -> float:
    """The k = 0 level's output tok/s over all its rounds: the figure `speedup` divides by."""
    for level in report.get("levels", []):
        if level.get("target") == "vllm-k0" and level.get("concurrency") == concurrency:
            return level["output_tokens_per_s"]
    raise ValueError(f"{path}: no levels entry for vllm-k0 at c = {concurrency}")


def _ratio(value: float | None) -> str:
    # A bound is null where the report could not fit the draft cost.
    return "-" if value is None else f"{value:.2f}x"


def _rows(machine: str, path: str, report: Report) -> list[str]:
    if "mtp" not in report.get("figures", {}):
        raise ValueError(f"{path}: no figures.mtp")
    rows = []
    for block in report["figures"]["mtp"]:
        c = block["concurrency"]
        base = _k0_tok_s(report, path, c)
        for k, got in block["by_k"].items():
            missing = [f for f in ("tokens_per_s", "speedup", "bound") if f not in got]
            if missing:
                raise ValueError(f"{path}: figures.mtp at c = {c}, k = {k}: no {missing[0]}")
            speedup = _ratio(got["speedup"])
            if k == SHIPPED_K:
                speedup = f"**{speedup}**"
            cells = [
                machine,
                str(c),
                k,
                f"{got['tokens_per_s']:.1f}",
                f"{base:.1f}",
                speedup,
                _ratio(got["bound"]),
            ]
            rows.append(table_row(cells))
    return rows


def _source(label: str, path: str, report: Report) -> str:
    if not report.get("client_machine"):
        return f"`{path}` ({label}, machine not recorded)"
    return f"`{path}` ({bench_machine(path, report)})"


def table(summaries: list[Report] | None = None) -> str:
    summaries = summaries or [json.loads((ROOT / path).read_text()) for _, path in SUMMARIES]
    lines = [
        "| machine | c | k | tok/s | k=0 tok/s | speedup | bound |",
        "|---|---|---|---|---|---|---|",
    ]
    for (machine, path), report in zip(SUMMARIES, summaries, strict=True):
        lines += _rows(machine, path, report)
    sources = " and ".join(
        _source(label, path, r) for (label, path), r in zip(SUMMARIES, summaries, strict=True)
    )
    return "\n".join(lines) + f"\n\nFrom {sources}.\n"
