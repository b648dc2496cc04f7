"""The summary of one cold-start run (tests/gpu/cold_start.sh's output folder), as the
committed record docs/benchmarks.md's cold-start table renders (docs/bench-cold-start/).

    python -m serving.warm.cold_start_record OUT_DIR --commit REV --date YYYY-MM-DD

Every figure comes from what the run wrote: the warm's console lines (serving/warm/command.py
writes them), the import's, each imported engine's bench.json and engine log, the kernel
counts and the files traffic added. A line the run did not write is an error naming it.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from serving.records.summary_cli import RecordError, run_versions, summary_main
from serving.warm.command import PRECOMPILE_LINE
from serving.warm.start_timeline import kernel_file_times, milestones, since_launch

NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
WARM_TOTAL = re.compile(rf"\[warm\s+{NUMBER}s\] exported ")
READY = re.compile(rf"engine ready in {NUMBER}s \((.*)\)")
POOL = re.compile(
    rf"pre-compiled (\d+) jobs \((.*?)\) on (\d+) processes in {NUMBER}s \((\d+) failed"
)
SWEEP = re.compile(
    rf"\[warm\s+{NUMBER}s\] sweep (\d): (\d+) requests answered, (\d+) failed .*new kernels "
    r"on disk (\{.*?\}|none); JIT monitor lines (\d+)"
)
MANIFEST = re.compile(r"key ([0-9a-f]+), (\d+) kernels \((.*?);.*\), (\d+) MiB")
ARCHIVE = re.compile(r"exported .* \((\d+) MiB\)")
IMPORTED = re.compile(rf"\[warm\s+{NUMBER}s\] imported ")
INSPECTED = re.compile(rf"\[warm\s+{NUMBER}s\] model classes inspected ahead")
KERNEL_FILE = re.compile(r"\.(cubin|so|hsaco|fatbin)$")


def _find(pattern: re.Pattern[str], text: str, where: str) -> re.Match[str]:
    found = pattern.search(text)
    if found is None:
        raise RecordError(f"{where}: no line matches {pattern.pattern!r}")
    return found


def _counts(text: str) -> dict[str, int]:
    """``deep_gemm 165, triton 383`` or ``{'deep_gemm': 20}`` as a dict."""
    if text in ("none", "{}"):
        return {}
    return {tool: int(n) for tool, n in re.findall(r"'?([a-z_]+)'?:? (\d+)", text)}


def _stages(text: str) -> dict[str, float]:
    return {name: float(s) for name, s in re.findall(rf"([a-z_]+) {NUMBER}s", text)}


def _engine_logs(folder: Path) -> list[str]:
    """The engine logs a bench or warm kept in ``folder`` (one per target), read once."""
    paths = sorted(folder.glob("*.log")) if folder.is_dir() else []
    return [path.read_text(errors="replace") for path in paths]


def _warm_timeline(out: Path, year: int, ready_s: float) -> dict[str, Any]:
    """The warm engine's start from its log, and when each tool's kernel files landed after
    its weights (the compile pool's start); empty where the run's logs were not kept."""
    logs = _engine_logs(out / "warm-logs")
    if not logs:
        return {}
    found = milestones(logs[0], year)
    timeline: dict[str, Any] = {"timeline_s": since_launch(found, ready_s)}
    listing = out / "files-after-warm.txt"
    weights = found.get("weights_loaded")
    if listing.exists() and weights is not None:
        timeline["kernel_files_after_weights_s"] = kernel_file_times(listing, weights)
    return timeline


def warm_summary(out: Path, year: int | None = None) -> dict[str, Any]:
    log = (out / "warm.log").read_text(errors="replace")
    where = str(out / "warm.log")
    ready = _find(READY, log, where)
    pool = _find(POOL, log, where)
    manifest = _find(MANIFEST, log, where)
    kinds = {kind: int(n) for n, kind in re.findall(r"(\d+) ([a-z0-9_]+)", pool.group(2))}
    summary: dict[str, Any] = {
        "total_s": float(_find(WARM_TOTAL, log, where).group(1)),
        "engine_ready_s": float(ready.group(1)),
        "stages_s": _stages(ready.group(2)),
        "precompile": {
            "jobs": int(pool.group(1)),
            "by_kind": kinds,
            "processes": int(pool.group(3)),
            "seconds": float(pool.group(4)),
            "failed": int(pool.group(5)),
        },
        "sweeps": [
            {
                "ended_at_s": float(m.group(1)),
                "requests": int(m.group(3)),
                "failed": int(m.group(4)),
                "new_kernels": _counts(m.group(5)),
                "jit_monitor_lines": int(m.group(6)),
            }
            for m in SWEEP.finditer(log)
        ],
        "cache": {
            "key": manifest.group(1),
            "kernels": _counts(manifest.group(3)),
            "mib": int(manifest.group(4)),
        },
        "archive_mib": int(_find(ARCHIVE, log, where).group(1)),
    }
    if inspected := INSPECTED.search(log):
        summary["model_classes_inspected_by_s"] = float(inspected.group(1))
    if year is not None:
        summary |= _warm_timeline(out, year, summary["engine_ready_s"])
    return summary


def _traffic_kernels(out: Path) -> dict[str, int]:
    path = out / "compiled-during-traffic.txt"
    if not path.exists():
        raise RecordError(f"{path}: missing (the files the imported engines' traffic added)")
    files = [line for line in path.read_text().splitlines() if KERNEL_FILE.search(line)]
    return dict(Counter(line.removeprefix("./").split("/")[0] for line in files))


def engine_summary(folder: Path, year: int | None = None) -> dict[str, Any]:
    """One engine's bench: its start by stage, its rounds and what compiled."""
    bench = json.loads((folder / "bench.json").read_text())
    (target,) = bench["targets"]
    logs = _engine_logs(folder / "logs")
    lines = [
        m.group(1)
        for log in logs
        for line in log.splitlines()
        if (m := PRECOMPILE_LINE.search(line))
    ]
    rounds, ttft, accepted, compiles = {}, {}, {}, {}
    added: Counter[str] = Counter()
    for level in bench["levels"]:
        key = f"c{level['concurrency']}"
        rounds[key] = level["round_tokens_per_s"]
        ttft[key] = round(level["ttft_s"]["p90"], 2)
        compiles[key] = level.get("round_jit_compiles")
        for kernels in level.get("round_cache_kernels_added") or []:
            added.update(kernels)
        if spec := level.get("spec_decode"):
            accepted[key] = round(spec["acceptance_length"], 2)
    summary = {
        "target": target,
        "ready_s": round(bench["ready_seconds"][target], 1),
        "stages_s": bench["start_stages_seconds"][target],
        "precompile": lines[-1] if lines else "not logged",
        "rounds_tok_per_s": rounds,
        "ttft_p90_s_both_rounds": ttft,
        "jit_monitor_compiles_per_round": compiles,
        "kernels_compiled_during_traffic": dict(added),
        "acceptance_length": accepted,
    }
    if year is not None and logs:
        found = milestones(logs[0], year)
        summary["timeline_s"] = since_launch(found, bench["ready_seconds"][target])
    return summary


def build(out: Path, commit: str, date: str, what: str, command: str) -> dict[str, Any]:
    gpu_line = (out / "gpu.txt").read_text().strip().splitlines()[0]
    name, driver, *_ = [part.strip() for part in gpu_line.split(",")]
    year = int(date[:4]) if date[:4].isdigit() else None
    engines = {
        folder.name.removeprefix("imported-"): engine_summary(folder, year)
        for folder in sorted(out.glob("imported-*"))
        if (folder / "bench.json").exists()
    }
    if not engines:
        raise RecordError(f"{out}: no imported-*/bench.json (no engine started from the archive)")
    first = min(out.glob("imported-*/bench.json"))
    machine = json.loads(first.read_text()).get("client_machine", {})
    record: dict[str, Any] = {
        "what": what,
        "command": command,
        "commit": commit,
        "date": date,
        "gpu": {"name": name, "driver": driver, "cpu_cores": machine.get("cpus")},
        "versions": run_versions(machine),
        "warm": warm_summary(out, year),
        "import_s": float(_find(IMPORTED, (out / "import.log").read_text(), "import.log").group(1)),
        "imported_engines": engines,
        # Every kernel file the imported engines added, at their starts and in traffic.
        "kernels_added_after_import": _traffic_kernels(out),
    }
    # vLLM's own start on an empty cache with no compile pool, where the run had it.
    default = out / "default-k2"
    if (default / "bench.json").exists():
        started = json.loads((default / "bench.json").read_text())
        record["default_start"] = (
            engine_summary(default, year)
            if started["targets"]
            else {"not_ready": started.get("start_errors", {})}  # e.g. past its budget
        )
    # The table's column reads the k = 2 engine, the preset's own speculation.
    if "k2" in engines:
        record["imported_engine"] = engines["k2"] | {"layers": 12}
    return record


def main(argv: list[str]) -> int:
    return summary_main(
        "serving.warm.cold_start_record",
        argv,
        build,
        "dsv4-serve warm, export, import, engines from it",
        "OUT=... KINDS= tests/gpu/on-h200.sh cold-start, then cold-start-wait",
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
