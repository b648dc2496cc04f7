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
    for k in args.spec_k or [0, 1, 2, 3]:
        print(f"engine with k={k} ...", file=sys.stderr, flush=True)
        report.append(run(args.model_dir, k, args.max_tokens, args.rounds))
    analysis = cost_model(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": report, "cost_model": analysis}, indent=2))
    print(render(report, analysis))
    return 0


def _rate(report: list[dict], k: int, concurrency: int) -> float | None:
    for entry in report:
        if entry["spec_k"] == k:
            return next(
                r["tok_s_median"] for r in entry["results"] if r["concurrency"] == concurrency
            )
    return None


def cost_model(report: list[dict]) -> dict | None:
    """Draft/target cost from batch-1 step times at 100% acceptance (k + 1 tokens a step).

    Step time s_k = t_verify + k * t_draft is fitted over k >= 1; the draft's cost is
    then taken relative to a plain decode step s_0, and the speedup bound at full
    acceptance is (k + 1) / (1 + k * c), as if verifying k + 1 tokens cost one step.
    """
    base = _rate(report, 0, 1)
    points = [
        (e["spec_k"], (e["spec_k"] + 1) / _rate(report, e["spec_k"], 1))
        for e in report
        if e["spec_k"] > 0
    ]
    if base is None or len(points) < 2:
        return None
    n = len(points)
    mean_k = sum(k for k, _ in points) / n
    mean_s = sum(s for _, s in points) / n
    slope = sum((k - mean_k) * (s - mean_s) for k, s in points) / sum(
        (k - mean_k) ** 2 for k, _ in points
    )
    step0 = 1 / base
    ratio = slope / step0
    return {
        "decode_step_ms": step0 * 1e3,
        "draft_step_ms": slope * 1e3,
        "verify_step_ms": (mean_s - slope * mean_k) * 1e3,
        "draft_target_cost_ratio": ratio,
        "bound": {str(k): (k + 1) / (1 + k * ratio) for k, _ in points},
    }


def render(report: list[dict], analysis: dict | None) -> str:
    lines = [
        "| k | tok/s c=1 | speedup c=1 | bound c=1 | tok/s c=8 | speedup c=8 |",
        "|---|---|---|---|---|---|",
    ]
    base1, base8 = _rate(report, 0, 1), _rate(report, 0, 8)
    for entry in report:
        k = entry["spec_k"]
        r1, r8 = _rate(report, k, 1), _rate(report, k, 8)
        bound = analysis["bound"].get(str(k)) if analysis else None
        s1 = f"{r1 / base1:.2f}x" if base1 else "-"
        s8 = f"{r8 / base8:.2f}x" if base8 else "-"
        lines.append(
            f"| {k} | {r1:.1f} | {s1} | {f'{bound:.2f}x' if bound else '-'} | {r8:.1f} | {s8} |"
        )
    if analysis:
        lines.append(
            f"\ndecode step {analysis['decode_step_ms']:.1f} ms, "
            f"draft step {analysis['draft_step_ms']:.1f} ms, "
            f"draft/target cost ratio {analysis['draft_target_cost_ratio']:.3f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
