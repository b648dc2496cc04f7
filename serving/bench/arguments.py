"""The bench's command-line arguments (light: parsed before any heavy import)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def sampling_temperature(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 2:
        raise argparse.ArgumentTypeError(f"must be within 0..2 (OpenAI's range), got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--local",
        nargs="+",
        default=[],
        metavar="KIND",
        help="start on the preset's golden model: vllm-k0 .. vllm-k8 (vLLM's server, MTP k), "
        "ray-app (the Ray Serve app); on a CPU preset append @avx512 or @avx2 to run on that "
        "CPU kernel library; on a bench model append ~PROFILE (random-token, real-thinking, "
        "real-no-thinking) for that acceptance profile's synthetic rates",
    )
    parser.add_argument(
        "--preset",
        default="cpu-tiny",
        help="preset the local targets take their engine arguments, env and accelerator "
        "from (gpu-golden: one NVIDIA GPU)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override one preset field for every local target (as `up --set`)",
    )
    parser.add_argument(
        "--kv-cache-gib",
        type=non_negative_float,
        default=None,
        metavar="GIB",
        help="on a GPU preset, each local engine's KV cache (default 2; the local targets "
        "share the GPU); 0: the preset's own gpu_memory_utilization",
    )
    parser.add_argument(
        "--start",
        choices=["serial", "parallel", "staggered"],
        default="serial",
        help="serial: local targets start one at a time, each start timed alone; "
        "parallel: all at once (faster, the starts overlap); staggered: the first alone "
        "(it fills the kernel caches), then the rest at once",
    )
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME=URL[,metrics=URL][,model=ID]",
        help="a running OpenAI endpoint (repeat to compare several)",
    )
    parser.add_argument("--api-key-env", default="DSV4_API_KEY", help="env var with the key")
    parser.add_argument("--concurrency", type=positive_int, nargs="+", default=[1, 8])
    parser.add_argument("--requests", type=positive_int, default=16, help="per level and round")
    parser.add_argument(
        "--requests-per-stream",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="at least N requests per concurrent stream at each level (max of this times "
        "the concurrency and --requests)",
    )
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--max-tokens", type=positive_int, default=64)
    parser.add_argument(
        "--temperature",
        type=sampling_temperature,
        default=0.0,
        help="every request's sampling temperature (default 0: greedy, the texts comparable "
        "across targets); DeepSeek-V4 is served at 1, where draft sampling matters",
    )
    parser.add_argument("--prompt-words", type=positive_int, default=8)
    parser.add_argument("--dataset", choices=["synthetic", "chat"], default="synthetic")
    parser.add_argument(
        "--workloads",
        nargs="+",
        default=[],
        choices=["high", "half", "zero", "mixed"],
        help="designed-acceptance workloads on the golden families checkpoint (drafts always, "
        "half, never right; mixed: high and zero in turn), one run each over the same local "
        "targets, e.g. --local vllm-k0 vllm-k1 vllm-k2 vllm-batch vllm-guard (the guard bench; "
        "vllm-idle-drafter: the preset's k held at 0, what vLLM's drafter pass costs)",
    )
    parser.add_argument(
        "--switch-requests",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="with --workloads: then N requests, high, zero, high in order, on each target, "
        "with throughput and the guard's k over time (0: no switch run)",
    )
    parser.add_argument(
        "--switch-concurrency", type=positive_int, default=8, help="the switch run's concurrency"
    )
    parser.add_argument(
        "--routing",
        action="store_true",
        help="the prefix-routing bench: conversations sharing a long system prompt that "
        "grow turn by turn, plus unrelated prompts (--conversations ...), on each arm in turn: "
        "--local ray-app ray-app-prefix ray-app-single (two replicas each but the last, which "
        "gives the ideal hit rate) and/or --target NAME=URL (a running deployment)",
    )
    parser.add_argument(
        "--pd",
        action="store_true",
        help="the P/D bench: the conversation workload (--conversations ...) at each "
        "--concurrency, on each arm in turn: --local ray-app-ingress ray-app-pd (one engine, "
        "or prefill and decode engines with the KV over NIXL, both behind the ingress; on a "
        "one-GPU machine the two share it) and/or --target NAME=URL",
    )
    parser.add_argument("--conversations", type=positive_int, default=16)
    parser.add_argument("--turns", type=positive_int, default=5, help="per conversation")
    parser.add_argument(
        "--system-words",
        type=positive_int,
        nargs="+",
        default=[1000],
        help="the shared system prompt; with --routing, several lengths are played in turn "
        "(each at every --concurrency) on each arm's one start",
    )
    parser.add_argument("--user-words", type=positive_int, default=250, help="per user turn")
    parser.add_argument(
        "--unrelated", type=non_negative_int, default=16, help="one-turn requests of their own"
    )
    parser.add_argument(
        "--cold-starts",
        type=int,
        default=0,
        metavar="N",
        help="first start each local target alone N times (median start-to-ready, nothing "
        "else running); 0: time the starts of the load phase",
    )
    parser.add_argument(
        "--budget-s",
        type=non_negative_float,
        default=0,
        metavar="S",
        help="wall-clock budget of the whole run: the targets' start may use what is left "
        "of it, and load cells that would start too late to stop the targets and write the "
        "report within it are skipped (0: none, and the start waits its default limit)",
    )
    parser.add_argument(
        "--ray-metrics-interval-ms",
        type=non_negative_int,
        default=0,
        metavar="MS",
        help="the Ray app's metrics export period (RAY_metrics_report_interval_ms; Ray's "
        "default ~10 s): shorter means shorter waits for its MTP counters after each level",
    )
    parser.add_argument(
        "--logs", default=None, metavar="DIR", help="keep the local targets' logs here"
    )
    parser.add_argument("--out", default="bench-results", help="report directory")
