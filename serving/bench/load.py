"""Streamed OpenAI requests at a fixed concurrency (the official client, on httpx)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx
import openai

from serving.bench.stats import SPEC_COUNTERS, RequestRecord
from serving.metrics_page import Samples, scrape


@dataclass(frozen=True)
class Target:
    name: str
    base_url: str  # ends in /v1
    model: str
    metrics_url: str | None = None
    api_key: str = "none"


async def one_request(
    client: openai.AsyncOpenAI, target: Target, prompt: str, max_tokens: int, chat: bool
) -> RequestRecord:
    record = RequestRecord(start=time.perf_counter())
    common = {
        "model": target.model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "extra_body": {"ignore_eos": True},  # fixed output lengths make levels comparable
    }
    try:
        if chat:
            messages = [{"role": "user", "content": prompt}]
            stream = await client.chat.completions.create(messages=messages, **common)
        else:
            stream = await client.completions.create(prompt=prompt, **common)
        async for chunk in stream:
            now = time.perf_counter()
            if chunk.usage is not None:
                record.output_tokens = chunk.usage.completion_tokens
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            text = choice.delta.content if chat else choice.text
            if text:
                record.first_token = record.first_token or now
                record.chunk_times.append(now)
        record.end = time.perf_counter()
    except (openai.APIError, httpx.HTTPError) as exc:
        status = getattr(exc, "status_code", None)
        record.error = f"{type(exc).__name__}{f' {status}' if status else ''}"
    return record


async def run_level(
    target: Target, prompts: list[str], concurrency: int, max_tokens: int, chat: bool
) -> tuple[list[RequestRecord], float]:
    """All ``prompts``, at most ``concurrency`` in flight; returns records and wall time."""
    gate = asyncio.Semaphore(concurrency)
    client = openai.AsyncOpenAI(
        base_url=target.base_url, api_key=target.api_key, max_retries=0, timeout=600
    )

    async def gated(prompt: str) -> RequestRecord:
        async with gate:
            return await one_request(client, target, prompt, max_tokens, chat)

    start = time.perf_counter()
    try:
        records = await asyncio.gather(*(gated(p) for p in prompts))
    finally:
        await client.close()
    return list(records), time.perf_counter() - start


def _spec_only(samples: Samples) -> Samples:
    names = tuple(SPEC_COUNTERS.values())
    return {k: v for k, v in samples.items() if k[0].endswith(names)}


def settled_scrape(url: str, previous: Samples | None, period: float, timeout: float) -> Samples:
    """Scrape until the spec-decode counters moved past ``previous`` (when given) and
    two scrapes ``period`` apart agree: Ray exports engine metrics every few seconds."""
    deadline = time.monotonic() + timeout
    last = _spec_only(scrape(url))
    while time.monotonic() < deadline:
        time.sleep(period)
        now = _spec_only(scrape(url))
        moved = previous is None or not now or now != _spec_only(previous)
        if now == last and moved:
            return scrape(url)
        last = now
    return scrape(url)
