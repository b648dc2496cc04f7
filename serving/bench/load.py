"""Streamed requests at a fixed concurrency, sent by vLLM's own benchmark client.

The requests go through `vllm bench serve`'s request functions (`ASYNC_REQUEST_FUNCS`,
aiohttp), so TTFT, ITL and end-to-end latency mean here what they mean in vLLM's
benchmark. Its `benchmark()` driver is not called: it opens its own session, sends a
probe request, prints its table and returns no per-request outputs, and the runner needs
those outputs to merge its interleaved rounds (see ``serving.bench.runner``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp
from vllm.benchmarks.lib.endpoint_request_func import (
    ASYNC_REQUEST_FUNCS,
    RequestFuncInput,
    RequestFuncOutput,
)

from serving.bench.stats import SPEC_COUNTERS
from serving.monitoring.metrics_page import RAY_EXPORT_PERIOD_S, Samples, scrape

REQUEST_TIMEOUT_S = 600


@dataclass(frozen=True)
class Target:
    name: str
    base_url: str  # ends in /v1
    model: str
    metrics_url: str | None = None
    api_key: str = "none"
    # How /metrics is read after a level: two scrapes this far apart must agree. Ray
    # exports engine counters every few seconds; vLLM's own server at once.
    settle_period_s: float = 2.0
    settle_timeout_s: float = 3 * RAY_EXPORT_PERIOD_S
    # A local target's log: the bench counts the kernels compiled during each cell there.
    log_path: str | None = None


def checked_output(output: RequestFuncOutput, max_tokens: int) -> RequestFuncOutput:
    """Fail a request that streamed fewer tokens than asked for. Every request sets
    ignore_eos, so a short one was cut: vLLM's client skips a mid-stream ``error``
    event and would count it a success. Tracebacks are cut to their last line."""
    if output.success and output.output_tokens != max_tokens:
        output.success = False
        output.error = f"short output: {output.output_tokens} of {max_tokens} tokens"
    if output.error:
        output.error = output.error.strip().splitlines()[-1]
    return output


async def run_level(
    target: Target,
    prompts: list[str],
    concurrency: int,
    max_tokens: int,
    chat: bool,
    temperature: float = 0.0,
) -> tuple[list[RequestFuncOutput], float]:
    """All ``prompts``, at most ``concurrency`` in flight; returns outputs and wall time."""
    send = ASYNC_REQUEST_FUNCS["openai-chat" if chat else "openai"]
    url = f"{target.base_url}/{'chat/completions' if chat else 'completions'}"
    headers = {"Authorization": f"Bearer {target.api_key}"}
    gate = asyncio.Semaphore(concurrency)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency),
        timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
    )

    async def gated(prompt: str) -> RequestFuncOutput:
        request = RequestFuncInput(
            prompt=prompt,
            api_url=url,
            prompt_len=0,  # the server's usage chunk fills it in
            output_len=max_tokens,
            model=target.model,
            ignore_eos=True,  # fixed output lengths make levels comparable
            extra_headers=headers,
            extra_body={"temperature": temperature},
        )
        async with gate:
            return checked_output(await send(request, session), max_tokens)

    start = time.perf_counter()
    async with session:
        outputs = await asyncio.gather(*(gated(p) for p in prompts))
    return list(outputs), time.perf_counter() - start


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
