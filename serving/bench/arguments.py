"""The bench's command-line arguments (light: parsed before any heavy import)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--local",
        nargs="+",
        default=[],
        metavar="KIND",
        help="start on the golden model: vllm-k0 .. vllm-k3 (vLLM's server, MTP k), ray-app; "
        "append @avx512 or @avx2 to run on that CPU kernel library",
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
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--max-tokens", type=positive_int, default=64)
    parser.add_argument("--prompt-words", type=positive_int, default=8)
    parser.add_argument("--dataset", choices=["synthetic", "chat"], default="synthetic")
    parser.add_argument(
        "--cold-starts",
        type=int,
        default=0,
        metavar="N",
        help="first start each local target alone N times (median start-to-ready, nothing "
        "else running); 0: time the starts of the load phase (one after another)",
    )
    parser.add_argument("--out", default="bench-results", help="report directory")
