"""Decode throughput of the golden DSV4 on vLLM's CPU backend, at concurrency 1 and 8.

Each speculation setting gets its own engine, measured in the same run, so the
figures are comparable with each other (not with another machine or another day).

    .venv/bin/python benchmarks/golden_throughput.py --spec-k 0 [--spec-k 2 ...]
"""

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from serving.golden import GoldenDesign, write_golden_model  # noqa: E402
from serving.golden_engine import CPU_ENV, golden_engine_kwargs, mtp_config  # noqa: E402


def _prompts(design: GoldenDesign, n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(design.words) for _ in range(16)) for _ in range(n)]


def measure(llm, design: GoldenDesign, concurrency: int, max_tokens: int, rounds: int) -> dict:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    llm.generate(_prompts(design, concurrency, 0), params, use_tqdm=False)  # warm-up
    rates = []
    for r in range(rounds):
        prompts = _prompts(design, concurrency, r + 1)
        start = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        elapsed = time.perf_counter() - start
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        for o, p in zip(outs, prompts, strict=True):
            if o.outputs[0].text != design.continuation(p, max_tokens):
                raise SystemExit(
                    f"wrong output at concurrency {concurrency}: {o.outputs[0].text!r}"
                )
        rates.append(tokens / elapsed)
    rates.sort()
    return {"concurrency": concurrency, "tok_s_median": rates[len(rates) // 2], "tok_s_all": rates}


def run(model_dir: Path, spec_k: int, max_tokens: int, rounds: int) -> dict:
    from vllm import LLM

    started = time.perf_counter()
    llm = LLM(**golden_engine_kwargs(model_dir, speculative_config=mtp_config(spec_k)))
    ready_s = time.perf_counter() - started
    design = GoldenDesign()
    results = []
    for concurrency in (1, 8):
        print(f"  k={spec_k} concurrency={concurrency} ...", file=sys.stderr, flush=True)
        results.append(measure(llm, design, concurrency, max_tokens, rounds))
    llm.llm_engine.engine_core.shutdown()
    return {"spec_k": spec_k, "engine_ready_s": ready_s, "results": results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-dir", type=Path, default=ROOT / ".cache/models/golden")
    parser.add_argument("--spec-k", type=int, action="append", default=None)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results/golden_throughput.json")
    args = parser.parse_args()
    for key, value in CPU_ENV.items():
        os.environ.setdefault(key, value)
    if not (args.model_dir / "config.json").exists():
        write_golden_model(args.model_dir)
    report = []
    for k in args.spec_k or [0]:
        print(f"engine with k={k} ...", file=sys.stderr, flush=True)
        report.append(run(args.model_dir, k, args.max_tokens, args.rounds))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print("| k | concurrency | output tok/s (median) |\n|---|---|---|")
    for entry in report:
        for res in entry["results"]:
            print(f"| {entry['spec_k']} | {res['concurrency']} | {res['tok_s_median']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
