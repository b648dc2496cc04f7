"""`dsv4-serve bench`: parse targets, start local ones, run the plan, write the report."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from serving.bench import local, report
from serving.bench.load import Target
from serving.bench.prompts import synthetic_prompts
from serving.bench.runner import BenchPlan, run_bench
from serving.golden_engine import SERVED_MODEL_NAME
from serving.processes import stop_group


class BenchError(ValueError):
    """A bench argument is invalid; the message names it."""


def parse_target(spec: str, api_key: str) -> Target:
    """``NAME=BASE_URL[,metrics=URL][,model=ID]``."""
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise BenchError(f"--target {spec!r}: expected NAME=BASE_URL[,metrics=URL][,model=ID]")
    url, *options = rest.split(",")
    if not url.startswith(("http://", "https://")):
        raise BenchError(f"--target {spec!r}: base URL must start with http:// or https://")
    extra: dict[str, str] = {}
    for option in options:
        key, sep, value = option.partition("=")
        if key not in {"metrics", "model"} or not sep or not value:
            raise BenchError(f"--target {spec!r}: unknown option {option!r} (metrics=, model=)")
        extra[key] = value
    base = url.rstrip("/")
    base = base if base.endswith("/v1") else base + "/v1"
    return Target(name, base, extra.get("model", SERVED_MODEL_NAME), extra.get("metrics"), api_key)


def run(args: argparse.Namespace) -> int:
    api_key = os.environ.get(args.api_key_env, "none")
    targets = [parse_target(spec, api_key) for spec in args.target]
    if not targets and not args.local:
        raise BenchError("nothing to measure: give --target NAME=URL and/or --local KIND")
    names = [t.name for t in targets] + list(args.local)
    if len(set(names)) != len(names):
        raise BenchError(f"target names must be unique, got {names}")
    plan = BenchPlan(
        concurrency=sorted(set(args.concurrency)),
        requests_per_level=args.requests,
        rounds=args.rounds,
        max_tokens=args.max_tokens,
        prompts=synthetic_prompts(max(64, args.requests * args.rounds), args.prompt_words),
        chat=args.dataset == "chat",
    )
    ready: dict[str, float] = {}
    stages: dict[str, dict[str, float]] = {}
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="dsv4-bench-") as logs:
        if args.cold_starts > 0:
            ready, stages = local.cold_starts(args.local, args.cold_starts, Path(logs), _progress)
        for kind in args.local:  # one at a time, so each start is timed alone
            server = local.start(kind, Path(logs), _progress)
            stack.callback(stop_group, server.proc, 60)
            targets.append(server.target)
            ready.setdefault(kind, server.ready_seconds)
            stages.setdefault(kind, server.stages)
        result = run_bench(targets, plan, _progress)
    result["ready_seconds"] = ready
    result["start_stages_seconds"] = stages
    result["client_machine"] = client_machine()
    for path in report.write(result, Path(args.out)):
        _progress(f"wrote {path}")
    print(report.markdown({**result, "figures": report.figures(result)}))
    return 1 if any(e["failed"] for e in result["levels"]) else 0


def client_machine() -> dict:
    """Where the bench ran (for local targets, also where they ran): figures from two
    machines of a pool differ more than any setting does."""
    from model_overrides.kernel_library import hardware_isa

    cpuinfo = Path("/proc/cpuinfo")
    models = [
        line.split(":", 1)[1].strip()
        for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
        if line.startswith("model name")
    ]
    return {
        "cpu_model": models[0] if models else None,
        "cpus": os.cpu_count(),
        "isa": hardware_isa(),
    }


def _progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)
