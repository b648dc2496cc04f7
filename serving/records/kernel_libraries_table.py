"""docs/benchmarks.md's CPU kernel libraries table (region "kernel-libraries"), from the run's
committed bench report (docs/bench-kernels/bench.json): the native `_C` rows are the levels of
`vllm-kK`, each fallback row the report's `figures.kernel_libraries` entries for
`vllm-kK@ISA` against them."""

from __future__ import annotations

import json
from typing import Any

from serving.records.regions import table_row
from serving.records.store import ROOT

SUMMARY = "docs/bench-kernels/bench.json"
DOC = "docs/benchmarks.md"
REGION = "kernel-libraries"
# The run's MTP settings: each library served k = 0 and k = 2 (`vllm-k0@ISA`, `vllm-k2@ISA`).
KS = ("0", "2")
Report = dict[str, Any]


def _native(report: Report, k: str, c: int) -> float:
    """The native target's level over all its rounds, the figure each ratio divides by."""
    for level in report.get("levels", []):
        if level.get("target") == f"vllm-k{k}" and level.get("concurrency") == c:
            return level["output_tokens_per_s"]
    raise ValueError(f"{SUMMARY}: no levels entry for vllm-k{k} at c = {c}")


def _fallback(report: Report, isa: str, k: str, c: int) -> dict[str, Any]:
    for row in report.get("figures", {}).get("kernel_libraries", []):
        if row.get("target") == f"vllm-k{k}@{isa}" and row.get("concurrency") == c:
            for field in ("tokens_per_s", "throughput_ratio"):
                if field not in row:
                    raise ValueError(
                        f"{SUMMARY}: figures.kernel_libraries vllm-k{k}@{isa} at c = {c}: "
                        f"no {field}"
                    )
            return row
    raise ValueError(f"{SUMMARY}: no figures.kernel_libraries entry for vllm-k{k}@{isa} at c = {c}")


def _isas(report: Report) -> list[str]:
    """The forced libraries in the order the run named its targets (`vllm-k0@avx512` ...)."""
    found = [t.partition("@")[2] for t in report["targets"] if "@" in t]
    return list(dict.fromkeys(found))


def table(report: Report | None = None) -> str:
    report = report or json.loads((ROOT / SUMMARY).read_text())
    concurrency = report["plan"]["concurrency"]
    lines = [
        "| library | c | k=0 tok/s | k=2 tok/s | k=0 vs native | k=2 vs native |",
        "|---|---|---|---|---|---|",
    ]
    for c in concurrency:
        native = [f"{_native(report, k, c):.1f}" for k in KS]
        lines.append(table_row(["`_C` (native)", str(c), *native, "-", "-"]))
    for isa in _isas(report):
        for c in concurrency:
            rows = [_fallback(report, isa, k, c) for k in KS]
            lines.append(
                table_row(
                    [
                        f"`_C_{isa.upper()}` (fallbacks)",
                        str(c),
                        *(f"{r['tokens_per_s']:.1f}" for r in rows),
                        *(f"{r['throughput_ratio']:.2f}" for r in rows),
                    ]
                )
            )
    plan, m = report["plan"], report.get("client_machine")
    # This run predates the report's `client_machine`: no CPU model or vLLM version to name.
    machine = f"{m['cpu_model']}, vLLM {m['software']['vllm']}" if m else "machine not recorded"
    return (
        "\n".join(lines) + f"\n\nFrom `{SUMMARY}` ({machine}); {plan['rounds']} rounds of "
        f"{plan['requests_per_level']} requests x {plan['max_tokens']} tokens a level.\n"
    )
