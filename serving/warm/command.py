"""`dsv4-serve warm`: fill a node's JIT cache before its engines start, and carry it.

    dsv4-serve warm PRESET [--cache DIR] [--jobs N] [--export DIR_OR_FILE]
    dsv4-serve warm --import FILE [--cache DIR] [--force]
    dsv4-serve warm --check [--cache DIR]

A warm answers vLLM's model-class inspection ahead (serving/warm/model_info.py), starts the
preset's warm engine (serving/warm/plan.py) with every JIT cache under DIR and the compile
pool on N processes (model_overrides/jit_pool), sends it the sweep
(serving/warm/sweep.py) twice, stops it and writes the cache's manifest. One line per
stage on the console.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

from model_overrides.jit_pool import manifest as cache_manifest
from model_overrides.jit_pool.pool import JOBS_ENV, default_jobs
from serving.config.jit_cache import DEFAULT_ROOT, cache_env
from serving.warm.archive import ArchiveError, export, import_archive
from serving.warm.model_info import answer_ahead
from serving.warm.plan import WARM_LAYERS, WarmPlanError, cache_shapes, model_shape, warm_sets

PRECOMPILE_LINE = re.compile(r"\[dsv4-jit\] (pre-compile.*)$")
WARM_TIMEOUT_S = 3600


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("preset", nargs="?", help="preset name or YAML path (to warm)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE")
    parser.add_argument(
        "--cache",
        default=os.environ.get(cache_manifest.ROOT_ENV, DEFAULT_ROOT),
        help=f"the JIT cache root (default ${cache_manifest.ROOT_ENV} or {DEFAULT_ROOT})",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="compile processes (default: the cores this process may use, at most 16)",
    )
    parser.add_argument("--export", metavar="PATH", help="after warming, write the archive here")
    parser.add_argument(
        "--import", dest="import_file", metavar="FILE", help="unpack an archive into --cache"
    )
    parser.add_argument("--force", action="store_true", help="import an archive that does not fit")
    parser.add_argument("--check", action="store_true", help="say whether --cache fits this node")
    parser.add_argument(
        "--timeout", type=float, default=WARM_TIMEOUT_S, help="seconds for the engine"
    )
    parser.add_argument(
        "--logs", default=None, help="where the engine's log goes (default CACHE/logs)"
    )


def _say(began: float, text: str) -> None:
    print(f"[warm {time.monotonic() - began:6.1f}s] {text}", flush=True)


def run(args: argparse.Namespace) -> int:
    root = Path(args.cache).resolve()
    if args.check:
        return _check(root)
    if args.import_file:
        return _import(args, root)
    if not args.preset:
        print(
            "dsv4-serve warm: name a preset to warm, or --import FILE, or --check", file=sys.stderr
        )
        return 2
    return _warm(args, root)


def _check(root: Path) -> int:
    try:
        found = cache_manifest.load(root)
    except cache_manifest.ManifestError as exc:
        print(f"dsv4-serve warm: {exc}", file=sys.stderr)
        return 2
    versions, gpu = cache_manifest.node_versions(), cache_manifest.node_gpu()
    print(cache_manifest.fit_line(found, versions, gpu, str(root)))
    return 0 if found and not cache_manifest.differences(found, versions, gpu) else 1


def _import(args: argparse.Namespace, root: Path) -> int:
    began = time.monotonic()
    versions, gpu = cache_manifest.node_versions(), cache_manifest.node_gpu()
    try:
        found = import_archive(args.import_file, root, versions, gpu, force=args.force)
    except (ArchiveError, cache_manifest.ManifestError) as exc:
        print(f"dsv4-serve warm: {exc}", file=sys.stderr)
        return 2
    _say(began, f"imported {Path(args.import_file).name} into {root}")
    print(cache_manifest.fit_line(found, versions, gpu, str(root)))
    return 0


def _warm(args: argparse.Namespace, root: Path) -> int:
    from serving.bench.local import log_tail, start_all, stop_all
    from serving.bench.stages import jit_monitor_kernels, start_stages
    from serving.bench.targets import local_setup, local_specs
    from serving.bench_model.writer import ensure_bench_model
    from serving.config.build_args import BuildArgs, resolve
    from serving.warm.sweep import plan_for, run_sweep

    began = time.monotonic()
    try:
        jobs = args.jobs if args.jobs is not None else default_jobs()
        if jobs < 0:
            raise ValueError(f"--jobs must be >= 0, got {jobs}")
        _, preset = resolve(BuildArgs(preset=args.preset, set=list(args.set)))
        shape, experts = model_shape(preset)
        model_dir = root / "warm-model" / f"{shape}-{WARM_LAYERS}-{experts}"
        sets = [*args.set, *warm_sets(preset, str(model_dir))]
        setup = local_setup(args.preset, sets, kv_cache_gib=0)
    except (ValueError, WarmPlanError) as exc:
        print(f"dsv4-serve warm: {exc}", file=sys.stderr)
        return 2
    root.mkdir(parents=True, exist_ok=True)
    logs = Path(args.logs) if args.logs else root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env_add = cache_env(str(root)) | {
        JOBS_ENV: str(jobs),
        "VLLM_TRITON_JIT_WARMUP_NUM_THREADS": str(max(jobs, 1)),
    }
    os.environ.update(env_add)
    # DeepGEMM's warm-up compiles before ready (vLLM's default), here on the pool.
    os.environ.setdefault("VLLM_DEEP_GEMM_WARMUP", "relax")
    k = preset.speculation.num_speculative_tokens
    kind = "vllm-guard" if preset.speculation.guard.mode != "off" else f"vllm-k{k}"
    _say(
        began,
        f"preset {preset.name}: warm model {shape} {WARM_LAYERS} layers ({experts} experts) at "
        f"{model_dir}, target {kind}, cache {root}, {jobs} compile processes",
    )
    ensure_bench_model(model_dir, shape, WARM_LAYERS, experts)
    _say(began, answer_ahead(str(model_dir), os.environ))
    before, _ = cache_manifest.count_kernels(root)
    spec = local_specs([kind], setup)[0]
    servers, errors = start_all([spec], logs, lambda line: None, timeout_s=args.timeout)
    log_path = logs / f"{kind}.log"
    if errors:
        _say(began, f"engine failed to start: {errors[kind]}")
        print(log_tail(log_path), file=sys.stderr)
        return 1
    server = servers[0]
    try:
        log = log_path.read_text(errors="replace")
        stages = start_stages(log)
        pre = [m.group(1) for line in log.splitlines() if (m := PRECOMPILE_LINE.search(line))]
        shown = ", ".join(f"{name} {secs:.1f}s" for name, secs in stages.items())
        _say(began, f"engine ready in {server.ready_seconds:.1f}s ({shown})")
        for line in pre:
            _say(began, line)
        started, _ = cache_manifest.count_kernels(root)
        plan = plan_for(preset.engine_kwargs())
        during: dict[str, int] = {}
        for sweep in (1, 2):
            offset = len(log_path.read_text(errors="replace"))
            ok, failed = run_sweep(spec.base_url, spec.model, plan, seed=sweep)
            after, _ = cache_manifest.count_kernels(root)
            new = {t: after[t] - started[t] for t in after if after[t] != started[t]}
            monitor = jit_monitor_kernels(log_path.read_text(errors="replace")[offset:])
            _say(
                began,
                f"sweep {sweep}: {ok} requests answered, {failed} failed (prompt words "
                f"{list(plan.prompt_words)}, concurrency {list(plan.concurrency)}); new kernels "
                f"on disk {new or 'none'}; JIT monitor lines {len(monitor)}",
            )
            during = {f"sweep{sweep}_{t}": n for t, n in new.items()} | during
            during[f"sweep{sweep}_monitor"] = len(monitor)
            started = after
            if failed:
                _say(began, "a sweep request failed: see the engine log")
    finally:
        stop_all([server.proc])
    record = cache_manifest.WarmRecord(
        jobs=jobs,
        seconds=round(time.monotonic() - began, 1),
        stages={"ready": round(server.ready_seconds, 1), **stages},
        precompile=pre[-1] if pre else "",
        compiled_during_sweep=during,
    )
    manifest = cache_manifest.build(root, preset.name, cache_shapes(preset), record)
    manifest.dump(root)
    grown = sum(manifest.kernels[t] - before.get(t, 0) for t in manifest.kernels)
    per_tool = ", ".join(f"{t} {n}" for t, n in manifest.kernels.items() if n)
    _say(
        began,
        f"manifest {root / cache_manifest.MANIFEST_NAME}: key {manifest.key}, "
        f"{manifest.total_kernels} kernels ({per_tool}; {grown} new), "
        f"{sum(manifest.bytes.values()) >> 20} MiB",
    )
    if args.export:
        path = export(root, args.export)
        _say(began, f"exported {path} ({path.stat().st_size >> 20} MiB)")
    return 0
