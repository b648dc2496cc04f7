"""docs/benchmarks.md's table of MTP over concurrency at real width (region
"mtp-over-concurrency"), from the run's committed summary
(docs/bench-realwidth/vllm034-h100-mtp.json): output tok/s a cell and the acceptance length
of the engines that started with every cache kept."""

from __future__ import annotations

import json
from typing import Any

from serving.records.regions import table_row
from serving.records.store import ROOT

SUMMARY = "docs/bench-realwidth/vllm034-h100-mtp.json"
DOC = "docs/benchmarks.md"
REGION = "mtp-over-concurrency"
CONCURRENCY = ("1", "8", "32", "64", "128")
# (run, target, the target of the same run its ratio is taken against). Only the runs whose
# engines started with every cache kept: run "depth-3" on the fresh machine paid DeepGEMM's
# run-time compiles in its rounds (k = 0's second is clean only at c = 1..64), so it gives
# no whole clean row.
ROWS: tuple[tuple[str, str, str | None], ...] = (
    ("depth-6", "vllm-k0", None),
    ("depth-6", "vllm-k2", "vllm-k0"),
    ("depth-3b", "vllm-k1", None),
    # The guard is weighed against static k = 1 at its depth: no clean k = 0 ran at 3 layers.
    ("depth-3b", "vllm-guard", "vllm-k1"),
)
# The run's preset (h200-flash-bench) drafts k = 2, the most the guard may pick.
TARGETS = {
    "vllm-k0": "k = 0",
    "vllm-k1": "k = 1",
    "vllm-k2": "k = 2",
    "vllm-guard": "guard (k <= 2)",
}
Cells = dict[str, dict[str, Any]]


def _cells(summary: dict[str, Any], run: str, target: str) -> Cells:
    try:
        return summary["runs"][run]["cells"][target]
    except KeyError as exc:
        raise ValueError(f"{SUMMARY}: no runs.{run}.cells.{target} ({exc} missing)") from None


def _tok_s(summary: dict[str, Any], run: str, target: str) -> list[float]:
    """Each concurrency's one round. A clean run's engines started with their kernels cached,
    so one round measures them; several rounds mean some paid compiles, and no rule here
    picks one."""
    cells, figures = _cells(summary, run, target), []
    for c in CONCURRENCY:
        cell, where = cells.get(c, {}), f"{SUMMARY}: runs.{run}.cells.{target}.{c}"
        if "tok_s_per_round" not in cell:
            raise ValueError(f"{where}: no tok_s_per_round")
        if len(rounds := cell["tok_s_per_round"]) != 1:
            raise ValueError(f"{where}: {len(rounds)} rounds, the table shows one")
        figures.append(rounds[0])
    return figures


def _acceptance(cells: Cells) -> str:
    """The range over the row's cells: the guard's varies with the k it picks; k = 0 has none."""
    found = [cell["acceptance_length"] for cell in cells.values() if "acceptance_length" in cell]
    if not found:
        return "-"
    low, high = f"{min(found):.2f}", f"{max(found):.2f}"
    return low if low == high else f"{low}-{high}"


def _row(summary: dict[str, Any], run: str, target: str, baseline: str | None) -> str:
    got = _tok_s(summary, run, target)
    figures = [f"{x:.0f}" for x in got]
    if baseline:
        base = _tok_s(summary, run, baseline)
        figures = [f"{x:.0f} ({x / b:.2f}x)" for x, b in zip(got, base, strict=True)]
    layers = summary["runs"][run]["layers"]
    cells = [str(layers), TARGETS[target], *figures, _acceptance(_cells(summary, run, target))]
    return table_row(cells)


def table(summary: dict[str, Any] | None = None) -> str:
    summary = summary or json.loads((ROOT / SUMMARY).read_text())
    lines = [
        "| layers | target | c = 1 | 8 | 32 | 64 | 128 | acceptance length |",
        "|---|---|---|---|---|---|---|---|",
        *(_row(summary, *row) for row in ROWS),
    ]
    runs = dict.fromkeys(run for run, _, _ in ROWS)
    return (
        "\n".join(lines) + f"\n\nFrom `{SUMMARY}` (runs {', '.join(runs)}): {summary['gpu']}, "
        f"vLLM {summary['vllm']}, {summary['date']}.\n"
    )
