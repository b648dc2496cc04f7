"""The summary of one draft-sampling run (tests/gpu/draft_sampling.sh's output folder): the
same engine benched with greedy and with probabilistic drafts, cell by cell, and the golden
draft-sampling check's arms on the GPU, as the committed record docs/speculation.md cites
(docs/bench-draft-sampling/).

    python -m serving.bench.draft_sampling_record OUT_DIR --commit REV --date YYYY-MM-DD

Each figure comes from the run's files: the two bench arms' bench.json, each golden arm's
record and pytest's last line. A bench arm or cell missing, or a run with neither bench nor
golden arms, is an error naming it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from serving.records.summary_cli import RecordError, run_versions, summary_main

METHODS = ("greedy", "probabilistic")
# The record tests/serving/golden/test_golden_draft_sampling.py writes, whatever its platform.
GOLDEN_RECORD = "draft_sampling_cpu.json"
PYTEST_RESULT = re.compile(r"^=*\s*(\d+ (?:passed|failed).*?)\s*=*$")


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


def _golden(out: Path) -> dict[str, Any]:
    """Each golden arm (golden-ARM.log, its record in records-ARM/): its figures and pytest's
    verdict. An arm whose engines never finished has a log and no record: kept, figures None."""
    arms = {}
    for log in sorted(out.glob("golden-*.log")):
        arm = log.stem.removeprefix("golden-")
        lines = log.read_text(errors="replace").splitlines()
        verdicts = [m.group(1) for line in lines if (m := PYTEST_RESULT.match(line.strip()))]
        path = out / f"records-{arm}" / GOLDEN_RECORD
        if not path.exists():
            verdict = verdicts[-1] if verdicts else "no pytest result"
            arms[arm] = {"result": f"{verdict}; no record", "vllm": None, "figures": None}
            continue
        if not verdicts:
            raise RecordError(f"{log}: no pytest result line (the {arm} arm did not finish)")
        record = json.loads(path.read_text())
        arms[arm] = {"result": verdicts[-1], "vllm": record["vllm"], "figures": record["figures"]}
    return arms


def _gpu_name(out: Path) -> str | None:
    path = out / "gpu.txt"  # nvidia-smi's name, driver, memory line
    return path.read_text().split(",")[0].strip() if path.exists() else None


def _bench(out: Path) -> dict[str, Any]:
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
        "gpu": {"name": (machine.get("gpu") or {}).get("name"), "cpu_cores": machine.get("cpus")},
        "versions": run_versions(machine),
        "temperature": temperatures.pop(),
        "ready_s": {m: round(next(iter(arms[m]["ready_seconds"].values())), 1) for m in METHODS},
        "cells": dict(sorted(cells.items(), key=lambda item: int(item[0][1:]))),
    }


def build(out: Path, commit: str, date: str, what: str, command: str) -> dict[str, Any]:
    golden = _golden(out)
    benched = any((out / method / "bench.json").exists() for method in METHODS)
    if not benched and not golden:
        raise RecordError(f"{out}: neither a bench arm ({', '.join(METHODS)}) nor a golden arm")
    record: dict[str, Any] = {"what": what, "command": command, "commit": commit, "date": date}
    if benched:
        record |= _bench(out)
    else:
        vllm = {arm["vllm"] for arm in golden.values() if arm["vllm"]}
        record["gpu"] = {"name": _gpu_name(out)}
        record["versions"] = {"vllm": vllm.pop() if len(vllm) == 1 else sorted(vllm)}
    if golden:
        record["golden"] = golden
    return record


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
