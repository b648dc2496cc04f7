"""docs/benchmarks.md's cold-start table: each fresh-machine run's committed summary
(docs/bench-cold-start/*.json) side by side, so the page cannot drift from them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from serving.records.regions import table_row
from serving.records.store import ROOT

SUMMARIES = (
    "docs/bench-cold-start/h100-warm.json",
    "docs/bench-cold-start/h100-import.json",
    "docs/bench-cold-start/h100-ledger.json",
    "docs/bench-cold-start/h100-prenorm-jobs.json",
    "docs/bench-cold-start/h100-oproj-jobs.json",
)
DOC = "docs/benchmarks.md"
REGION = "cold-start"
Run = dict[str, Any]


def _stages(stages: dict[str, float]) -> str:
    parts = ("weights", "engine_init", "jit_warmup", "cuda_graphs")
    return " / ".join(f"{stages[p]:.1f}" for p in parts)


def _kernels(counts: dict[str, int] | None) -> str:
    found = {tool: n for tool, n in (counts or {}).items() if n}
    return ", ".join(f"{tool} {n}" for tool, n in found.items()) or "none"


def _engine(run: Run) -> dict[str, Any] | None:
    """The 12-layer engine started after the warm: from the imported cache, else the
    earlier start on an empty cache with the pool alone."""
    return run.get("imported_engine") or run.get("pool_only_start_12_layers")


def _ready(run: Run) -> str:
    if imported := run.get("imported_engine"):
        pool = imported["stages_s"].get("compile_pool_on_the_imported_cache")
        why = f"the pool re-checking it {pool}" if pool else "the pool skipped: its ledger"
        return f"{imported['ready_s']:.1f} from the imported cache ({why})"
    engine = run["pool_only_start_12_layers"]
    return f"{engine['ready_s']:.1f} on an empty cache, the pool alone (no warm)"


def _rounds(run: Run, level: str) -> str:
    if imported := run.get("imported_engine"):
        first, second = imported["rounds_tok_per_s"][level]
        return f"{first} / {second}"
    first = run["pool_only_start_12_layers"]["round_1"][level]["output_tok_s"]
    return f"{first} / not recorded"


def _k0(run: Run) -> str:
    """The k = 0 engine from the same imported cache, where the run started one."""
    engine = run.get("imported_engines", {}).get("k0")
    if engine is None:
        return "not run"
    rounds = engine["rounds_tok_per_s"]
    return (
        f"{engine['ready_s']:.1f}; {rounds['c8'][0]} / {rounds['c8'][1]};"
        f" {rounds['c64'][0]} / {rounds['c64'][1]}"
    )


ROWS: tuple[tuple[str, Callable[[Run], str]], ...] = (
    ("warm in all, s", lambda r: f"{r['warm']['total_s']:.1f}"),
    (
        "warm engine ready, s (weights / engine init / JIT warm-up / CUDA graphs)",
        lambda r: f"{r['warm']['engine_ready_s']:.1f} ({_stages(r['warm']['stages_s'])})",
    ),
    (
        "compile pool",
        lambda r: (
            f"{r['warm']['precompile']['jobs']} jobs on {r['warm']['precompile']['processes']}"
            f" processes in {r['warm']['precompile']['seconds']} s,"
            f" {r['warm']['precompile']['failed']} failed"
        ),
    ),
    (
        "kernel files the sweeps compiled (1 / 2)",
        lambda r: " / ".join(_kernels(s["new_kernels"]) for s in r["warm"]["sweeps"]),
    ),
    (
        "the cache: kernel files, MiB",
        lambda r: f"{sum(r['warm']['cache']['kernels'].values())}, {r['warm']['cache']['mib']}",
    ),
    (
        "archive MiB, import s",
        lambda r: f"{r['warm']['archive_mib']}, {r['import_s']}" if "import_s" in r else "not run",
    ),
    ("12-layer engine (k = 2) ready, s", _ready),
    (
        "its stages, s (weights / engine init / JIT warm-up / CUDA graphs)",
        lambda r: _stages(_engine(r)["stages_s"]),
    ),
    ("output tok/s at c = 8, round 1 / 2", lambda r: _rounds(r, "c8")),
    ("output tok/s at c = 64, round 1 / 2", lambda r: _rounds(r, "c64")),
    (
        "k = 0 engine from the imported cache: ready, s; output tok/s round 1 / 2 at"
        " c = 8; at c = 64",
        _k0,
    ),
    (
        "kernel files compiled during its traffic",
        lambda r: (
            _kernels(r["imported_engine"]["kernels_compiled_during_traffic"])
            if "imported_engine" in r
            else "not counted"
        ),
    ),
)


def table(runs: list[Run] | None = None) -> str:
    runs = runs or [json.loads((ROOT / path).read_text()) for path in SUMMARIES]
    head = " | ".join(f"{r['gpu']['name']}, {r['date']} ({r['commit']})" for r in runs)
    lines = [f"| | {head} |", "|---" * (len(runs) + 1) + "|"]
    for label, cell in ROWS:
        lines.append(table_row([label, *(cell(r) for r in runs)]))
    sources = "; ".join(
        f"`{path}` (vLLM {r['versions']['vllm']}, driver {r['gpu']['driver']},"
        f" {r['gpu']['cpu_cores']} cores)"
        for path, r in zip(SUMMARIES, runs, strict=True)
    )
    return "\n".join(lines) + f"\n\nFrom {sources}.\n"
