"""The summary of one draft-sampling cost run (tests/gpu/draft_sampling.sh's output folder):
the same engine benched with greedy and with probabilistic drafts, cell by cell, as the
committed record docs/speculation.md cites (docs/bench-draft-sampling/).

    python -m serving.bench.draft_sampling_record OUT_DIR --commit REV --date YYYY-MM-DD

Each figure comes from the two arms' bench.json; a missing arm or cell is an error naming it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from serving.records.summary_cli import RecordError, run_versions, summary_main

METHODS = ("greedy", "probabilistic")


def _arm(out: Path, method: str) -> dict[str, Any]:
    path = out / method / "bench.json"
    if not path.exists():
        raise RecordError(f"{path}: missing (the {method} arm did not finish)")
    return json.loads(path.read_text())


def _cell(level: dict[str, Any]) -> dict[str, Any]:
    spec = level.get("spec_decode") or {}
    return {
        "output_tok_s": round(level["output_tokens_per_s"], 1),
        "tpot_p50_ms": round(level["tpot_s"]["p50"] * 1e3, 2),
        "acceptance_length": round(spec["acceptance_length"], 2) if spec else None,
        "requests": level["requests"],
        "failed": level["failed"],
    }


def build(out: Path, commit: str, date: str, what: str, command: str) -> dict[str, Any]:
    arms = {method: _arm(out, method) for method in METHODS}
    temperatures = {arms[m]["plan"].get("temperature", 0.0) for m in METHODS}
    if len(temperatures) != 1:
        raise RecordError(f"{out}: the arms ran at different temperatures {sorted(temperatures)}")
    cells: dict[str, dict[str, Any]] = {}
    for method in METHODS:
        for level in arms[method]["levels"]:
            cells.setdefault(f"c{level['concurrency']}", {})[method] = _cell(level)
    for name, cell in cells.items():
        if set(cell) != set(METHODS):
            raise RecordError(f"{out}: cell {name} ran only with {sorted(cell)}")
        greedy, sampled = cell["greedy"]["output_tok_s"], cell["probabilistic"]["output_tok_s"]
        cell["probabilistic_over_greedy"] = round(sampled / greedy, 3) if greedy else None
    machine = arms["greedy"].get("client_machine", {})
    return {
        "what": what,
        "command": command,
        "commit": commit,
        "date": date,
        "gpu": {"name": (machine.get("gpu") or {}).get("name"), "cpu_cores": machine.get("cpus")},
        "versions": run_versions(machine),
        "temperature": temperatures.pop(),
        "ready_s": {m: round(next(iter(arms[m]["ready_seconds"].values())), 1) for m in METHODS},
        "cells": dict(sorted(cells.items(), key=lambda item: int(item[0][1:]))),
    }


def main(argv: list[str]) -> int:
    return summary_main(
        "serving.bench.draft_sampling_record",
        argv,
        build,
        "the 12-layer V4-Flash bench engine at k = 2 with greedy, then probabilistic drafts, "
        "the same synthetic acceptance, one round each",
        "OUT=... tests/gpu/on-h200.sh draft-sampling, then draft-sampling-wait",
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
