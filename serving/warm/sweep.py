"""Traffic that reaches the shapes vLLM's own warm-up does not: after the warm engine is up,
requests of several prompt lengths at several concurrencies (prefill chunks of many sizes,
decode batches up to ``max_num_seqs``, speculation's verify batches). Each wave is followed
by its follow-up turns, the same prompts extended as a conversation's next turn, so prefills
that start from the prefix cache run too (attention over cached context takes other shapes
than a fresh prompt's). Whatever compiles then is compiled into the cache, not during users'
traffic. The sweep runs twice: what the second pass still compiles is what no warm can reach
(it is reported)."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import httpx

from serving.bench.prompts import synthetic_prompts


@dataclass(frozen=True)
class SweepPlan:
    prompt_words: tuple[int, ...]
    concurrency: tuple[int, ...]
    max_tokens: int = 24
    follow_up_words: int = 64  # what a follow-up turn adds to its prompt (0: none)


def plan_for(engine_args: dict) -> SweepPlan:
    """Prompt lengths up to the engine's token budget per step and past it (chunked
    prefill), concurrency up to its batch bound."""
    budget = int(engine_args.get("max_num_batched_tokens") or 8192)
    max_len = int(engine_args.get("max_model_len") or 16384)
    longest = max(min(2 * budget, max_len // 2), 16)
    words = sorted({w for w in (16, 200, 1000, budget // 2, longest) if w <= longest})
    seqs = int(engine_args.get("max_num_seqs") or 128)
    levels = sorted({c for c in (1, 4, 16, 64, seqs) if c <= seqs})
    return SweepPlan(tuple(words), tuple(levels))


async def _one(client: httpx.AsyncClient, url: str, model: str, prompt: str, tokens: int) -> bool:
    body = {"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 1.0}
    body["ignore_eos"] = True
    try:
        response = await client.post(url, json=body)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


async def _run(base_url: str, model: str, plan: SweepPlan, seed: int) -> tuple[int, int]:
    ok = failed = 0
    url = f"{base_url}/completions"
    rng = random.Random(seed)
    async with httpx.AsyncClient(timeout=600) as client:
        for concurrency in plan.concurrency:
            # Mixed lengths in one wave: prefill and decode share steps as in serving.
            words = [plan.prompt_words[i % len(plan.prompt_words)] for i in range(concurrency)]
            rng.shuffle(words)
            prompts = [synthetic_prompts(1, w, seed=seed + i)[0] for i, w in enumerate(words)]
            waves = [prompts]
            if plan.follow_up_words:
                turn = synthetic_prompts(len(prompts), plan.follow_up_words, seed=seed + 7919)
                waves.append([f"{p} {t}" for p, t in zip(prompts, turn, strict=True)])
            for wave in waves:
                results = await asyncio.gather(
                    *(_one(client, url, model, p, plan.max_tokens) for p in wave)
                )
                ok += sum(results)
                failed += len(results) - sum(results)
    return ok, failed


def run_sweep(base_url: str, model: str, plan: SweepPlan, seed: int = 0) -> tuple[int, int]:
    """Requests answered and failed."""
    return asyncio.run(_run(base_url, model, plan, seed))
