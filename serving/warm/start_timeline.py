"""Where an engine's start went, read from its own log and its cache's file times: when each
of vLLM's processes got past its imports, when the weights, the compile pool, vLLM's JIT
warm-up and CUDA-graph capture ended, and when each tool's kernel files landed.

vLLM stamps its lines to the second without a year ("INFO 12-07 15:25:38"), torch its
warnings to the microsecond ("W1207 15:25:14.013000"); both are the machine's clock (UTC on
the GPU machines), so the run's year places them beside the cache files' epoch times.
"""

from __future__ import annotations

import datetime as dt
import re
import statistics
from collections.abc import Iterable
from pathlib import Path

VLLM_STAMP = re.compile(r"\b(?:INFO|WARNING|ERROR|DEBUG) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) ")
TORCH_STAMP = re.compile(r"^[IWE](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) ")
# (name, what the line holds), in the order a start passes them; the first match counts.
MILESTONES = (
    ("api_server_first_line", re.compile(r"^\(APIServer pid=\d+\) (?:INFO|WARNING)")),
    ("engine_core_first_line", re.compile(r"^\(EngineCore pid=\d+\) (?:INFO|WARNING)")),
    ("weights_loaded", re.compile(r"Model loading took")),
    ("precompile_ended", re.compile(r"\[dsv4-jit\] pre-compile")),
    ("jit_warmup_started", re.compile(r"JIT kernel warmup starting")),
    ("jit_warmup_ended", re.compile(r"JIT kernel warmup finished")),
    ("cuda_graphs_started", re.compile(r"Breakable CUDA graph enabled|Capturing CUDA graphs")),
    ("engine_init_ended", re.compile(r"init engine \(profile")),
    ("serving", re.compile(r"Starting vLLM server")),
)


def _epoch(year: int, parts: Iterable[str]) -> float:
    month, day, hour, minute, second, *micro = (int(p) for p in parts)
    stamp = dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.UTC)
    return stamp.timestamp() + (micro[0] / 1e6 if micro else 0.0)


def _stamp(line: str, year: int) -> float | None:
    if found := VLLM_STAMP.search(line):
        return _epoch(year, found.groups())
    if found := TORCH_STAMP.match(line):
        return _epoch(year, found.groups())
    return None


def milestones(log: str, year: int) -> dict[str, float]:
    """Each milestone's epoch time, from the first line that shows it; "first_line" is the
    log's first stamped line (the API server's torch import done)."""
    found: dict[str, float] = {}
    for line in log.splitlines():
        if (when := _stamp(line, year)) is None:
            continue
        found.setdefault("first_line", when)
        for name, pattern in MILESTONES:
            if name not in found and pattern.search(line):
                found[name] = when
    return found


def since_launch(found: dict[str, float], ready_s: float) -> dict[str, float]:
    """``milestones``' times in seconds after the server's launch, placed by its measured
    ready time (the "Starting vLLM server" line is within a health poll of ready: about a
    second)."""
    if "serving" not in found:
        raise ValueError("the log has no 'Starting vLLM server' line: the engine never served")
    launched = found["serving"] - ready_s
    return {name: round(when - launched, 1) for name, when in found.items()}


def kernel_file_times(listing: Path, since: float) -> dict[str, dict[str, float]]:
    """Per tool, when its first, median and last file landed, in seconds after ``since``
    (epoch): ``listing`` holds "MTIME SIZE PATH" lines (tests/gpu/cold_start.sh's
    files-*.txt). The compile pool's own lock and ledger are not the tool's files."""
    times: dict[str, list[float]] = {}
    for line in listing.read_text().splitlines():
        mtime, _, rest = line.partition(" ")
        path = rest.partition(" ")[2]
        ours = Path(path).name.lstrip(".").startswith("dsv4-jit-")
        if "/" in path and not ours and float(mtime) >= since:
            times.setdefault(path.split("/", 1)[0], []).append(float(mtime) - since)
    return {
        tool: {
            "first_s": round(min(t), 1),
            "median_s": round(statistics.median(t), 1),
            "last_s": round(max(t), 1),
            "files": len(t),
        }
        for tool, t in sorted(times.items())
    }
