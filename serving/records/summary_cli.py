"""What every run-summary builder shares: its command line (a run's output folder in, the
record's JSON out on stdout, a clear one-line error, exit 2, for a run it cannot summarise),
its error and the versions it names."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

Build = Callable[[Path, str, str, str, str], dict[str, Any]]


class RecordError(ValueError):
    """The run's output lacks what the record needs; the message names it."""


def run_versions(machine: dict[str, Any]) -> dict[str, Any]:
    """vLLM's, torch's and CUDA's versions from a bench report's ``client_machine``."""
    software, gpu = machine.get("software") or {}, machine.get("gpu") or {}
    return {"vllm": software.get("vllm"), "torch": software.get("torch"), "cuda": gpu.get("cuda")}


def summary_main(prog: str, argv: list[str], build: Build, what: str, command: str) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {prog}")
    parser.add_argument("out", type=Path, help="the run's output folder")
    parser.add_argument("--commit", required=True, help="the commit the run used")
    parser.add_argument("--date", required=True, help="the day it ran, YYYY-MM-DD")
    parser.add_argument("--what", default=what, help="what ran, in a sentence")
    parser.add_argument("--command", default=command, help="the command that ran it")
    args = parser.parse_args(argv)
    try:
        record = build(args.out, args.commit, args.date, args.what, args.command)
    except (OSError, KeyError, ValueError) as exc:
        print(f"{prog.rsplit('.', 1)[-1]}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(record, indent=2))
    return 0
