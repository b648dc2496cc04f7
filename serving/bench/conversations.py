"""The prefix-routing workload: conversations that share a long system
prompt and grow turn by turn, mixed with unrelated one-turn prompts, played against an
OpenAI chat endpoint with the ``openai`` client.

Each conversation sends its turns in order, each turn carrying the whole history (the
system prompt, every earlier user message and reply): a turn can reuse the KV of the
turn before only on the replica that served it. ``concurrency`` conversations run at a
time. Per request it records the time to first token, the prompt tokens, how many of them
the engine served from its prefix cache (``usage.prompt_tokens_details.cached_tokens``,
which vLLM reports when the server runs with ``enable_prompt_tokens_details``) and the
replica that answered (the ``x-dsv4-replica`` header our gateway adds).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from serving.gateway.replica_header import HEADER

REPLICA_HEADER = HEADER.decode()
# `up --set` assignments a local app needs for this workload: cached tokens in each
# response's usage (vLLM's enable_prompt_tokens_details).
CACHED_TOKENS_SETS = ("engine_args.enable_prompt_tokens_details=true",)


@dataclass(frozen=True)
class ConversationWorkload:
    conversations: int = 16
    turns: int = 5
    system_words: int = 1000
    user_words: int = 250  # each turn: a document, a tool result, a long question
    unrelated: int = 16  # one-turn requests with a system prompt of their own
    max_tokens: int = 32
    concurrency: int = 8
    seed: int = 0

    def check(self) -> None:
        for name in ("conversations", "turns", "system_words", "user_words", "max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"conversation workload: {name} must be at least 1")
        if self.unrelated < 0 or self.concurrency < 1:
            raise ValueError("conversation workload: unrelated >= 0 and concurrency >= 1")


@dataclass(frozen=True)
class Session:
    """One client's turns: a conversation of the shared system prompt, or one unrelated request."""

    name: str
    shared: bool  # starts with the workload's shared system prompt
    system: str
    users: list[str]


def sessions(workload: ConversationWorkload, words: Sequence[str]) -> list[Session]:
    """The sessions in the order clients start them, unrelated ones spread among the
    conversations; the same workload and words give the same sessions."""
    rng = random.Random(workload.seed)

    def text(count: int) -> str:
        return " ".join(rng.choice(words) for _ in range(count))

    system = text(workload.system_words)
    out = [
        Session(f"c{i}", True, system, [text(workload.user_words) for _ in range(workload.turns)])
        for i in range(workload.conversations)
    ]
    for i in range(workload.unrelated):
        alone = Session(f"u{i}", False, text(workload.system_words), [text(workload.user_words)])
        out.insert(rng.randrange(len(out) + 1), alone)
    return out


@dataclass
class Turn:
    session: str
    turn: int
    shared: bool
    ok: bool = False
    error: str = ""
    ttft_s: float | None = None
    latency_s: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    output_tokens: int = 0
    replica: str = ""
    text: str = ""
    started_s: float = 0.0  # since the run began

    def row(self) -> dict:
        return asdict(self)


@dataclass
class Client:
    base_url: str  # ends in /v1
    model: str
    api_key: str = "none"
    timeout_s: float = 600
    extra_body: dict = field(default_factory=dict)


async def _turn(client, cfg: Client, session: Session, messages: list, turn: Turn, max_tokens: int):
    started = time.monotonic()
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model=cfg.model,
            messages=messages,
            max_tokens=max_tokens,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=cfg.extra_body,
        )
        turn.replica = raw.headers.get(REPLICA_HEADER, "")
        parts = []
        async for chunk in raw.parse():
            if chunk.choices and chunk.choices[0].delta.content:
                if turn.ttft_s is None:
                    turn.ttft_s = time.monotonic() - started
                parts.append(chunk.choices[0].delta.content)
            if chunk.usage:
                turn.prompt_tokens = chunk.usage.prompt_tokens
                turn.output_tokens = chunk.usage.completion_tokens
                details = chunk.usage.prompt_tokens_details
                turn.cached_tokens = details.cached_tokens if details else None
        turn.text = "".join(parts)
        turn.ok = turn.output_tokens == max_tokens
        if not turn.ok:
            turn.error = f"short output: {turn.output_tokens} of {max_tokens} tokens"
    except Exception as exc:  # a failed turn ends its session; the run goes on
        turn.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200]}"
    turn.latency_s = time.monotonic() - started


async def run_sessions(
    cfg: Client,
    workload: ConversationWorkload,
    all_sessions: list[Session],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[Turn], float]:
    """Every session, ``workload.concurrency`` at a time; the turns and the wall time."""
    from openai import AsyncOpenAI

    turns: list[Turn] = []
    queue = list(reversed(all_sessions))
    total = sum(len(s.users) for s in all_sessions)
    t0 = time.monotonic()

    async def worker(client) -> None:
        while queue:
            session = queue.pop()
            messages: list[dict] = [{"role": "system", "content": session.system}]
            for index, user in enumerate(session.users):
                messages.append({"role": "user", "content": user})
                turn = Turn(session.name, index, session.shared, started_s=time.monotonic() - t0)
                await _turn(client, cfg, session, messages, turn, workload.max_tokens)
                turns.append(turn)
                if progress:
                    progress(len(turns), total)
                if not turn.ok:
                    break
                messages.append({"role": "assistant", "content": turn.text})

    async with AsyncOpenAI(
        base_url=cfg.base_url, api_key=cfg.api_key, timeout=cfg.timeout_s, max_retries=0
    ) as client:
        await asyncio.gather(*(worker(client) for _ in range(workload.concurrency)))
    return turns, time.monotonic() - t0


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def quantiles(values: list[float]) -> dict:
    """p50 and p90 of per-turn seconds, and how many there were."""
    return {"p50_s": percentile(values, 50), "p90_s": percentile(values, 90), "n": len(values)}
