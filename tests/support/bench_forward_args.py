"""Child process: command lines through this vLLM's own `vllm bench forward` parser.

Reads a JSON list of argument lists (what follows `vllm` on a command line) on stdin. Each
goes through ``vllm.entrypoints.cli.main.main``, the CLI as `vllm` runs it, with the
bench's entry point (``vllm.benchmarks.forward.main.main``, which ``BenchmarkForwardSubcommand``
calls) swapped for a recorder: it parses every ``--case`` with vLLM's ``parse_case`` and
builds the engine arguments with the bench's own ``_make_engine_args``, and starts nothing.
Prints one line: ``FORWARD_ARGS`` and a JSON list with, per command line, the parsed
namespace's bench keys, the cases and the engine arguments the bench would start.

    python -m tests.support.bench_forward_args < ARGV_LISTS.json
"""

import json
import sys
from dataclasses import asdict

import vllm.entrypoints.cli.benchmark.forward as forward_cli
from vllm.benchmarks.forward import main as forward_main
from vllm.benchmarks.forward.shapes import parse_case
from vllm.entrypoints.cli.main import main as vllm_main

BENCH_KEYS = ("case", "routing", "kv_len_jitter", "iters", "samples", "output_json")
ENGINE_KEYS = ("model", "load_format", "enable_prefix_caching", "max_num_seqs", "seed")
ENGINE_KEYS += ("kv_cache_dtype", "block_size", "speculative_config", "kv_cache_memory_bytes")

parsed: list[dict] = []


def record(args) -> None:
    cases = [parse_case(text) for text in args.case]
    engine = forward_main._make_engine_args(args, cases)
    parsed.append(
        {
            "bench": {k: getattr(args, k) for k in BENCH_KEYS},
            "cases": [
                {
                    "name": c.name,
                    "requests": [asdict(r) for r in c.requests[:1]],
                    "count": len(c.requests),
                }
                for c in cases
            ],
            "engine": {k: getattr(engine, k) for k in ENGINE_KEYS},
            "executor": str(engine.distributed_executor_backend),
        }
    )


forward_cli.main = record  # BenchmarkForwardSubcommand.cmd looks `main` up at call time
for argv in json.loads(sys.stdin.read()):
    sys.argv = ["vllm", *argv]
    vllm_main()
print("FORWARD_ARGS " + json.dumps(parsed, default=str))
