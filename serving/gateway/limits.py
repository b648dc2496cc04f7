"""Per-key limits on every inference route, so that one tenant cannot starve the
others: at most ``max_concurrent`` requests of one key in flight (running or queued) and
a budget of ``tokens_per_minute``. A key over either gets 429 with ``Retry-After`` and
an OpenAI-style error at once; other keys are not affected.

Tokens: a request with a body reserves what the input checks counted
(``input_policy.Checked.reservation``: body bytes / 4 for the prompt, plus the most
tokens it may generate, from the values vLLM's request model coerces, times the
sequences it starts; nothing more on /tokenize, /detokenize and count_tokens) and is
charged what its response's ``usage`` says when it ends (a chat or completions stream
carries usage with ``stream_options.include_usage``, without it the reservation stands;
Responses and Messages streams always carry it; an error answer costs nothing). A
request without a body (listing models, reading a stored response) takes a slot but no
tokens, and is served while the key is in token debt.

The budget is a bucket of ``tokens_per_minute`` refilled continuously. A request is
admitted while the key's bucket is above zero and may take it below, so a
request larger than the budget is served once rather than refused forever; the key then
waits until the debt is repaid, which ``Retry-After`` says.

Requests are counted by key id (``keys.key_id``: a hash, never the key); while auth is
off every caller shares the id ``anonymous``.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from serving.gateway.auth import CALLER, ROUTE
from serving.gateway.errors import send_error
from serving.gateway.input_policy import CHECKED, Checked
from serving.gateway.keys import ANONYMOUS
from serving.gateway.metrics import KEY_IN_FLIGHT, KEY_REJECTED, KEY_TOKENS
from serving.gateway.overload import DEFAULT_RETRY_AFTER, RETRY_AFTER_ENV
from serving.gateway.routes import TABLE, Kind

USAGE_TAIL = 64 << 10  # bytes of a long answer kept to find its usage (it comes last)


@dataclass
class _KeyState:
    in_flight: int = 0
    level: float = 0.0  # tokens left in the bucket; below zero: debt
    stamp: float = 0.0


class KeyBudgets:
    """The limits' state per key id (no ASGI: unit-tested on its own clock)."""

    def __init__(
        self,
        max_concurrent: int | None = None,
        tokens_per_minute: int | None = None,
        retry_after_s: int = DEFAULT_RETRY_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_concurrent = max_concurrent
        self.tokens_per_minute = tokens_per_minute
        self.retry_after_s = retry_after_s
        self.clock = clock
        self._keys: dict[str, _KeyState] = {}

    @property
    def active(self) -> bool:
        return self.max_concurrent is not None or self.tokens_per_minute is not None

    def _state(self, key: str) -> _KeyState:
        now = self.clock()
        state = self._keys.get(key)
        if state is None:
            state = self._keys[key] = _KeyState(level=float(self.tokens_per_minute or 0), stamp=now)
        elif self.tokens_per_minute:
            rate = self.tokens_per_minute / 60
            state.level = min(self.tokens_per_minute, state.level + rate * (now - state.stamp))
            state.stamp = now
        return state

    def admit(self, key: str, spends: bool = True) -> tuple[str, int, str] | None:
        """Take a slot for the key, or say why not: (reason, retry-after seconds, message).
        ``spends``: the request reserves tokens, so a key in debt waits."""
        state = self._state(key)
        if self.max_concurrent is not None and state.in_flight >= self.max_concurrent:
            text = (
                f"this key has {state.in_flight} requests in flight; at most {self.max_concurrent}"
            )
            return "concurrency", self.retry_after_s, text
        if spends and self.tokens_per_minute is not None and state.level <= 0:
            wait = max(1, math.ceil(-state.level / (self.tokens_per_minute / 60)))
            text = f"this key used its {self.tokens_per_minute} tokens per minute"
            return "tokens", wait, text
        state.in_flight += 1
        return None

    def charge(self, key: str, tokens: float) -> None:
        if self.tokens_per_minute is not None:
            self._state(key).level -= tokens

    def release(self, key: str) -> None:
        self._state(key).in_flight -= 1

    def in_flight(self, key: str) -> int:
        return self._state(key).in_flight

    def level(self, key: str) -> float:
        return self._state(key).level


def usage_tokens(usage: Any) -> int | None:
    """Total tokens of an OpenAI (prompt/completion), Responses or Anthropic
    (input/output) usage object."""
    if not isinstance(usage, dict):
        return None
    total = usage.get("total_tokens")
    if isinstance(total, int):
        return total
    parts = [usage.get(k) for k in ("prompt_tokens", "input_tokens")]
    parts += [usage.get(k) for k in ("completion_tokens", "output_tokens")]
    counted = [p for p in parts if isinstance(p, int)]
    return sum(counted) if counted else None


def answer_usage(body: bytes, stream: bool) -> int | None:
    """Tokens an answer's usage reports (a stream: its last event with usage; a
    Responses stream has it in ``response.completed``'s ``response``)."""
    if not stream:
        try:
            payload = json.loads(body)
        except Exception:  # not JSON, or nested past the parser's recursion limit
            return None
        return usage_tokens(payload.get("usage")) if isinstance(payload, dict) else None
    found = None
    for line in body.split(b"\n"):
        if b'"usage"' not in line or not line.startswith(b"data:"):
            continue
        try:
            event = json.loads(line[5:])
        except Exception:
            continue
        if isinstance(event, dict):
            usage = event.get("usage")
            if usage is None and isinstance(event.get("response"), dict):
                usage = event["response"].get("usage")
            found = usage_tokens(usage) or found
    return found


class KeyLimits:
    """ASGI middleware: the per-key limits in front of every inference route (inside
    ``InputCheckMiddleware``, whose checked body says what a request reserves)."""

    def __init__(
        self,
        app: Any,
        max_concurrent: int | None = None,
        tokens_per_minute: int | None = None,
        budgets: KeyBudgets | None = None,
    ) -> None:
        self.app = app
        retry = int(os.environ.get(RETRY_AFTER_ENV, DEFAULT_RETRY_AFTER))
        self.budgets = budgets or KeyBudgets(max_concurrent, tokens_per_minute, retry)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        route = scope.get(ROUTE) or TABLE.match(scope.get("path", ""))
        limited = (
            scope["type"] == "http"
            and route is not None
            and route.kind is Kind.INFERENCE
            and self.budgets.active
        )
        if not limited:
            return await self.app(scope, receive, send)
        caller = scope.get(CALLER)
        key = caller.key_id if caller is not None else ANONYMOUS
        checked = scope.get(CHECKED)  # a body the input checks passed: it reserves tokens
        refused = self.budgets.admit(key, spends=checked is not None)
        if refused is not None:
            reason, wait, text = refused
            KEY_REJECTED.labels(key, reason).inc()
            message = f"rate limited: {text}; retry after {wait}s"
            code, headers = f"key_{reason}_limit", {"retry-after": str(wait)}
            return await send_error(send, 429, message, "rate_limit_error", code, headers)
        KEY_IN_FLIGHT.labels(key).inc()
        try:
            if checked is None:  # no body: a slot, no tokens
                await self.app(scope, receive, send)
            else:
                await self._charged(scope, receive, send, key, checked)
        finally:
            self.budgets.release(key)
            KEY_IN_FLIGHT.labels(key).dec()

    async def _charged(
        self, scope: dict, receive: Any, send: Any, key: str, checked: Checked
    ) -> None:
        reserved = checked.reservation
        usage_kept = checked.sequences > 0  # /tokenize and the like report no usage
        self.budgets.charge(key, reserved)
        answer = {"status": 500, "stream": False, "body": bytearray()}

        async def tapped(message: dict) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                headers = dict(message.get("headers", []))
                answer["stream"] = b"text/event-stream" in headers.get(b"content-type", b"")
            elif message["type"] == "http.response.body" and usage_kept:
                kept = answer["body"]
                kept.extend(message.get("body", b""))
                if answer["stream"] and len(kept) > 2 * USAGE_TAIL:
                    del kept[:-USAGE_TAIL]
            await send(message)

        try:
            await self.app(scope, receive, tapped)
        finally:
            if answer["status"] >= 400:
                used = 0
            elif usage_kept:
                used = answer_usage(bytes(answer["body"]), answer["stream"])
                used = reserved if used is None else used
            else:
                used = reserved
            self.budgets.charge(key, used - reserved)
            KEY_TOKENS.labels(key).inc(used)
