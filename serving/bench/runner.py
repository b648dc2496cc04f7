"""Interleaved comparison: every concurrency level, every round, every target in a
rotating order, so slow drifts of a shared machine hit all targets alike. Ours because
`vllm bench serve` measures one target per run; each level's requests and figures are
vLLM's (``serving.bench.load``, ``serving.bench.stats``)."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field

from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput

from serving.bench.load import Target, run_level, settled_scrape
from serving.bench.stats import acceptance, spec_decode_delta, summarize
from serving.metrics_page import RAY_EXPORT_PERIOD_S, scrape


@dataclass
class BenchPlan:
    concurrency: list[int]
    requests_per_level: int
    rounds: int
    max_tokens: int
    prompts: list[str]
    chat: bool = False
    warmup_requests: int = 2


@dataclass
class _Cell:
    outputs: list[RequestFuncOutput] = field(default_factory=list)
    wall: float = 0.0
    spec: list[dict] = field(default_factory=list)


def _progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _merge_spec(deltas: list[dict]) -> dict | None:
    if not deltas:
        return None
    accepted_at: dict[str, float] = {}
    for d in deltas:
        for position, rate in d["acceptance_by_position"].items():
            accepted_at[position] = accepted_at.get(position, 0.0) + (rate or 0) * d["drafts"]
    return acceptance(
        sum(d["drafts"] for d in deltas),
        sum(d["draft_tokens"] for d in deltas),
        sum(d["accepted_tokens"] for d in deltas),
        dict(sorted(accepted_at.items(), key=lambda item: int(item[0]))),
    )


def run_bench(targets: list[Target], plan: BenchPlan, progress=_progress) -> dict:
    for target in targets:
        progress(f"warm-up {target.name}")
        asyncio.run(run_level(target, plan.prompts[: plan.warmup_requests], 1, 8, plan.chat))
    cells: dict[tuple[str, int], _Cell] = {}
    started = time.monotonic()
    for concurrency in plan.concurrency:
        for round_ in range(plan.rounds):
            order = targets[round_ % len(targets) :] + targets[: round_ % len(targets)]
            for target in order:
                prompts = [
                    plan.prompts[(round_ * plan.requests_per_level + i) % len(plan.prompts)]
                    for i in range(plan.requests_per_level)
                ]
                before = scrape(target.metrics_url) if target.metrics_url else None
                outputs, wall = asyncio.run(
                    run_level(target, prompts, concurrency, plan.max_tokens, plan.chat)
                )
                cell = cells.setdefault((target.name, concurrency), _Cell())
                cell.outputs += outputs
                cell.wall += wall
                tokens = sum(o.output_tokens for o in outputs if o.success)
                failed = sum(not o.success for o in outputs)
                progress(
                    f"c={concurrency} round {round_ + 1}/{plan.rounds} {target.name}: "
                    f"{tokens / wall:.1f} tok/s, {failed} failed "
                    f"({time.monotonic() - started:.0f} s)"
                )
                if before is not None:
                    after = settled_scrape(
                        target.metrics_url, before, period=2.0, timeout=3 * RAY_EXPORT_PERIOD_S
                    )
                    delta = spec_decode_delta(before, after, model=target.model)
                    if delta["drafts"]:
                        cell.spec.append(delta)
    levels = []
    for (name, concurrency), cell in cells.items():
        summary = summarize(cell.outputs, cell.wall)
        summary.update(target=name, concurrency=concurrency, spec_decode=_merge_spec(cell.spec))
        levels.append(summary)
    return {
        "plan": {
            "concurrency": plan.concurrency,
            "requests_per_level": plan.requests_per_level,
            "rounds": plan.rounds,
            "max_tokens": plan.max_tokens,
            "chat": plan.chat,
        },
        "targets": [t.name for t in targets],
        "levels": levels,
    }
