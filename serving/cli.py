"""dsv4-serve: serve DeepSeek-V4 with MTP speculative decoding on vLLM and Ray Serve."""

import argparse
import os
import sys
from pathlib import Path


def _cmd_golden_model(args: argparse.Namespace) -> int:
    from serving.golden import GoldenDesign, write_golden_model

    try:
        design = GoldenDesign(
            draft_agreement=args.draft_agreement,
            seed=args.seed,
            variant=args.variant,
            weight_format=args.weight_format,
            draft_pattern=args.draft_pattern,
            next_token_choices=args.next_token_choices,
            draft_logit_scale=args.draft_logit_scale,
        )
    except ValueError as exc:
        print(f"dsv4-serve golden-model: {exc}", file=sys.stderr)
        return 2
    out = write_golden_model(args.out_dir, design)
    print(
        f"golden DSV4 checkpoint written to {out} "
        f"(variant={design.variant}, draft_agreement={design.draft_agreement}, "
        f"weights={design.weight_format}, drafts={design.draft_pattern}, "
        f"next_token_choices={design.next_token_choices}, "
        f"draft_logit_scale={design.draft_logit_scale})"
    )
    return 0


def _cmd_bench_model(args: argparse.Namespace) -> int:
    from serving.bench_model import write_bench_model

    try:
        out = write_bench_model(args.out_dir, args.shape, args.layers, args.experts)
    except (ValueError, OSError) as exc:
        print(f"dsv4-serve bench-model: {exc}", file=sys.stderr)
        return 2
    print(
        f"bench model written to {out} (DeepSeek-V4-{args.shape.capitalize()} shape, "
        f"{args.layers} layers + MTP, {args.experts} experts, no weights: serve it with "
        "load_format=dummy)"
    )
    return 0


def _cmd_overrides(args: argparse.Namespace) -> int:
    from model_overrides.__main__ import main as overrides_main

    return overrides_main(["status"])


def _cmd_serve_vllm(args: argparse.Namespace) -> int:
    """vLLM's own OpenAI server on the golden model (a baseline; `up` serves through Ray)."""
    from serving.config.vllm_args import to_cli_args
    from serving.golden import write_golden_model
    from serving.golden.golden_engine import CPU_ENV, golden_engine_kwargs, mtp_config

    model_dir = Path(args.model_dir)
    if not (model_dir / "config.json").exists():
        print(f"writing the golden model to {model_dir} ...", flush=True)
        write_golden_model(model_dir)
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    spec = mtp_config(args.spec_k)
    engine = golden_engine_kwargs(model_dir, **({"speculative_config": spec} if spec else {}))
    cmd += to_cli_args(engine)
    cmd += ["--host", args.host, "--port", str(args.port)]
    env = {**CPU_ENV, **os.environ}
    print(f"starting vLLM's OpenAI server on http://{args.host}:{args.port}/v1 ...", flush=True)
    os.execvpe(cmd[0], cmd, env)
    return 0  # not reached


def _build_args(args: argparse.Namespace):
    from serving.config.build_args import BuildArgs

    return BuildArgs(
        preset=args.preset,
        set=args.set or [],
        override_files=args.values or [],
        gateway_metrics_port=getattr(args, "gateway_metrics_port", None),
        # `up` on loopback keeps the metrics port on loopback too.
        **({"gateway_metrics_host": args.host} if args.command == "up" else {}),
    )


def _cmd_check(args: argparse.Namespace) -> int:
    import json

    from serving.config.build_args import resolve
    from serving.config.llm_config import llm_config, resolve_model_source

    _, preset = resolve(_build_args(args))
    print(f"preset {preset.name!r}: {preset.description}")
    print(f"speculation guard: {preset.speculation.guard.describe()}")
    print("resolved vLLM engine arguments:")
    print(json.dumps(preset.engine_kwargs(), indent=2, sort_keys=True))
    source = resolve_model_source(preset)
    if pd := preset.disaggregation:
        from serving.disagg.configs import pd_llm_configs

        print(
            f"disaggregation: {pd.prefill.replicas} prefill and {pd.decode.replicas} decode "
            f"replicas over {pd.connector}, MTP on {pd.mtp_on}"
        )
        print("Ray Serve LLM P/D configs:")
        print(json.dumps(pd_llm_configs(preset, source), indent=2, sort_keys=True))
        return 0
    print("Ray Serve LLM config:")
    print(json.dumps(llm_config(preset, source), indent=2, sort_keys=True))
    return 0


def _cmd_render(args: argparse.Namespace) -> int:
    from serving.config.serve_config import render

    print(render(_build_args(args), host=args.host, port=args.port), end="")
    return 0


def _cmd_up(args: argparse.Namespace) -> int:
    from serving.local.local_up import up

    return up(
        _build_args(args),
        args.host,
        args.port,
        args.ray_metrics_port,
        args.num_cpus,
        verbose=args.verbose,
    )


def _cmd_generate(args: argparse.Namespace) -> int:
    from serving.chart import derived_files

    if not args.check:
        for path in derived_files.write(build_parser()):
            print(f"wrote {path}")
        return 0
    stale = derived_files.stale(build_parser())
    for path in stale:
        print(f"out of date: {path} (run `dsv4-serve generate`)", file=sys.stderr)
    if not stale:
        print("every generated file (chart, docs tables, CLI reference) matches its source")
    return 1 if stale else 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from serving.bench.command import BenchError, run

    try:
        return run(args)
    except BenchError as exc:
        print(f"dsv4-serve bench: {exc}", file=sys.stderr)
        return 2


def _cmd_warm(args: argparse.Namespace) -> int:
    from serving.warm.command import run

    return run(args)


def _cmd_doctor(args: argparse.Namespace) -> int:
    from serving.doctor.command import run

    return run(args)


def _add_preset_args(parser: argparse.ArgumentParser, default: str | None = "cpu-tiny") -> None:
    if default is None:  # a deployment's config: no toy default
        parser.add_argument("preset", help="preset name or a preset YAML path")
    else:
        parser.add_argument(
            "preset",
            nargs="?",
            default=default,
            help=f"preset name or YAML path (default {default})",
        )
    parser.add_argument(
        "--set", action="append", metavar="KEY.PATH=VALUE", help="override one field"
    )
    parser.add_argument(
        "-f", "--values", action="append", metavar="FILE", help="YAML file of overrides"
    )


def _version() -> str:
    """The installed distribution's version; pyproject.toml's in a checkout not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dsv4-serve")
    except PackageNotFoundError:
        import tomllib

        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        try:
            return tomllib.loads(pyproject.read_text())["project"]["version"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


def build_parser() -> argparse.ArgumentParser:
    from serving.golden.design import DRAFT_PATTERNS, VARIANTS, WEIGHT_FORMATS
    from serving.golden.golden_engine import DEFAULT_MODEL_DIR, DEFAULT_SPEC_K

    parser = argparse.ArgumentParser(
        prog="dsv4-serve",
        description=__doc__,
        epilog="Operator commands: up, check, render-serve-config, doctor, bench, warm. Developer "
        "commands: golden-model, bench-model, serve-vllm, overrides, generate. Exit codes: 0 "
        "done; 1 the command ran and found a failure (a bench target failed, generate --check "
        "found stale files, a start failed); 2 bad input (a preset, an override, an argument), "
        "named in one line; doctor's own codes: docs/kubernetes.md. `dsv4-serve COMMAND -h` "
        "describes each command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    # Operator commands first: run, check and render a preset, preflight a cluster, measure.
    up = sub.add_parser("up", help="run a preset on local Ray Serve (default cpu-tiny)")
    _add_preset_args(up)
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=8000)
    up.add_argument("--ray-metrics-port", type=int, default=8089, help="Ray's metrics export port")
    up.add_argument("--gateway-metrics-port", type=int, default=None, help="default 9464")
    up.add_argument("--num-cpus", type=int, default=None)
    up.add_argument(
        "--verbose",
        action="store_true",
        help="show Ray's, Serve's and vLLM's output too (DSV4_VERBOSE=1 does the same)",
    )
    up.set_defaults(func=_cmd_up)

    check = sub.add_parser(
        "check", help="validate a preset and print the resolved engine arguments"
    )
    _add_preset_args(check)
    check.set_defaults(func=_cmd_check)

    render = sub.add_parser("render-serve-config", help="print the Ray Serve config for a preset")
    _add_preset_args(render, default=None)
    render.add_argument("--host", default="0.0.0.0")
    render.add_argument("--port", type=int, default=8000)
    render.set_defaults(func=_cmd_render)

    from serving.bench.arguments import add_arguments as add_bench_arguments

    bench = sub.add_parser(
        "bench", help="streamed load against OpenAI endpoints: latency, tok/s, MTP acceptance"
    )
    add_bench_arguments(bench)
    bench.set_defaults(func=_cmd_bench)

    from serving.warm.command import add_arguments as add_warm_arguments

    warm = sub.add_parser(
        "warm",
        help="compile a preset's JIT kernels into the cache ahead of its engines; carry a cache",
    )
    add_warm_arguments(warm)
    warm.set_defaults(func=_cmd_warm)

    from serving.doctor.command import add_arguments as add_doctor_arguments

    doctor = sub.add_parser(
        "doctor", help="preflight a cluster for a preset, or diagnose an installed release"
    )
    add_doctor_arguments(doctor)
    doctor.set_defaults(func=_cmd_doctor)

    # Developer commands: test models, vLLM's own server, the plugin table, generated files.
    golden = sub.add_parser("golden-model", help="write the golden tiny DSV4 checkpoint")
    golden.add_argument("out_dir")
    golden.add_argument("--draft-agreement", type=float, default=1.0)
    golden.add_argument("--seed", type=int, default=0)
    golden.add_argument(
        "--variant",
        choices=VARIANTS,
        default="designed",
        help="designed: known text and acceptance; numeric: attention, experts and "
        "hyper-connections reach the logits; clamp: experts reach SwiGLU's clamp",
    )
    golden.add_argument(
        "--weight-format",
        choices=WEIGHT_FORMATS,
        default="bf16",
        help="bf16: as designed; fp8: DeepSeek-V4's FP8 release format (e4m3 128x128 blocks, "
        "power-of-two scales, fp8 experts), loaded through vLLM's DeepseekV4FP8Config",
    )
    golden.add_argument(
        "--draft-pattern",
        choices=DRAFT_PATTERNS,
        default="random",
        help="random: --draft-agreement's share of words drafted right; families: three arcs "
        "of the ring whose drafts are all right, right at every other step, never right",
    )
    golden.add_argument(
        "--next-token-choices",
        type=int,
        default=1,
        help="words the target's next-token distribution spreads over (1: certain); above 1 "
        "the greedy text stays and temperature-1 acceptance is known for greedy and "
        "probabilistic draft sampling",
    )
    golden.add_argument(
        "--draft-logit-scale",
        type=float,
        default=1.0,
        help="with --next-token-choices > 1: the drafter's logits over the target's (0.5, 1 "
        "or 2); below 1 a flatter draft, so probabilistic drafts are not all accepted",
    )
    golden.set_defaults(func=_cmd_golden_model)

    bench_model = sub.add_parser(
        "bench-model",
        help="write a config-only DSV4 checkpoint with the released layer shapes (no weights)",
    )
    bench_model.add_argument("out_dir")
    bench_model.add_argument(
        "--shape", choices=("flash", "pro"), default="flash", help="whose released config"
    )
    bench_model.add_argument(
        "--layers", type=int, default=12, help="decoder layers (the released model's first ones)"
    )
    bench_model.add_argument(
        "--experts", choices=("fp4", "fp8"), default="fp4", help="routed experts' format"
    )
    bench_model.set_defaults(func=_cmd_bench_model)

    serve_vllm = sub.add_parser("serve-vllm", help="vLLM's own OpenAI server on the golden model")
    serve_vllm.add_argument("--model-dir", default=str(DEFAULT_MODEL_DIR))
    serve_vllm.add_argument("--host", default="127.0.0.1")
    serve_vllm.add_argument("--port", type=int, default=8000)
    serve_vllm.add_argument(
        "--spec-k", type=int, default=DEFAULT_SPEC_K, help="MTP draft tokens (0: off)"
    )
    serve_vllm.set_defaults(func=_cmd_serve_vllm)

    overrides = sub.add_parser("overrides", help="print the DSV4 override status table")
    overrides.set_defaults(func=_cmd_overrides)

    generate = sub.add_parser(
        "generate",
        help="write the chart's generated files (rules, rule tests, dashboard, presets, schema)",
    )
    generate.add_argument("--check", action="store_true", help="fail if any is out of date")
    generate.set_defaults(func=_cmd_generate)
    return parser


def main(argv: list[str] | None = None) -> int:
    from serving.config.preset import PresetError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except PresetError as exc:
        print(f"dsv4-serve {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
