"""Per-key limits on the generation routes, so that one tenant cannot starve the others:
at most ``max_concurrent`` requests of one key in flight (running or queued) and a
budget of ``tokens_per_minute``. A key over either gets 429 with ``Retry-After`` and
an OpenAI-style error at once; other keys are not affected.

Tokens: an admitted request reserves its estimate (request bytes / 4 for the prompt,
plus the most tokens it asks for, times ``n``) and is charged what its response's
``usage`` says when it ends (a chat or completions stream carries usage with
``stream_options.include_usage``, without it the reservation stands; Responses and
Messages streams always carry it; an error answer costs nothing). The budget is a
bucket of ``tokens_per_minute`` refilled continuously. A request is admitted while the
key's bucket is above zero and may take it below, so a request larger than the budget
is served once rather than refused forever; the key then waits until the debt is
repaid, which ``Retry-After`` says.

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
from serving.gateway.keys import ANONYMOUS
from serving.gateway.metrics import KEY_IN_FLIGHT, KEY_REJECTED, KEY_TOKENS
from serving.gateway.overload import DEFAULT_RETRY_AFTER, RETRY_AFTER_ENV
from serving.gateway.request_guard import DEFAULT_MAX_BODY, MAX_BODY_ENV
from serving.gateway.routes import TABLE

DEFAULT_OUTPUT_RESERVATION = 256  # tokens reserved when a request names no maximum
OUTPUT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
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

    def admit(self, key: str) -> tuple[str, int, str] | None:
        """Take a slot for the key, or say why not: (reason, retry-after seconds, message)."""
        state = self._state(key)
        if self.max_concurrent is not None and state.in_flight >= self.max_concurrent:
            text = (
                f"this key has {state.in_flight} requests in flight; at most {self.max_concurrent}"
            )
            return "concurrency", self.retry_after_s, text
        if self.tokens_per_minute is not None and state.level <= 0:
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


def reservation(body: bytes) -> int:
    """Tokens a request may cost: its bytes / 4 for the prompt (about 4 bytes a token
    in English text; the JSON around it makes it an over-estimate) and the output it
    asks for."""
    prompt = math.ceil(len(body) / 4)
    try:
        payload = json.loads(body)
    except ValueError:
        return max(1, prompt)
    if not isinstance(payload, dict):
        return max(1, prompt)
    asked = [payload.get(f) for f in OUTPUT_FIELDS]
    output = next(
        (v for v in asked if isinstance(v, int) and not isinstance(v, bool) and v > 0),
        DEFAULT_OUTPUT_RESERVATION,
    )
    n = payload.get("n")
    n = n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1
    return prompt + output * n


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
        except ValueError:
            return None
        return usage_tokens(payload.get("usage")) if isinstance(payload, dict) else None
    found = None
    for line in body.split(b"\n"):
        if b'"usage"' not in line or not line.startswith(b"data:"):
            continue
        try:
            event = json.loads(line[5:])
        except ValueError:
            continue
        if isinstance(event, dict):
            usage = event.get("usage")
            if usage is None and isinstance(event.get("response"), dict):
                usage = event["response"].get("usage")
            found = usage_tokens(usage) or found
    return found


class KeyLimits:
    """ASGI middleware: the per-key limits in front of the generation routes."""

    def __init__(
        self,
        app: Any,
        max_concurrent: int | None = None,
        tokens_per_minute: int | None = None,
        budgets: KeyBudgets | None = None,
        max_body: int | None = None,
    ) -> None:
        self.app = app
        retry = int(os.environ.get(RETRY_AFTER_ENV, DEFAULT_RETRY_AFTER))
        self.budgets = budgets or KeyBudgets(max_concurrent, tokens_per_minute, retry)
        self.max_body = max_body or int(os.environ.get(MAX_BODY_ENV, DEFAULT_MAX_BODY))

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        route = scope.get(ROUTE) or TABLE.match(scope.get("path", ""))
        limited = (
            scope["type"] == "http"
            and scope.get("method") == "POST"
            and route is not None
            and route.generates
            and self.budgets.active
        )
        if not limited:
            return await self.app(scope, receive, send)
        caller = scope.get(CALLER)
        key = caller.key_id if caller is not None else ANONYMOUS
        refused = self.budgets.admit(key)
        if refused is not None:
            reason, wait, text = refused
            KEY_REJECTED.labels(key, reason).inc()
            message = f"rate limited: {text}; retry after {wait}s"
            code, headers = f"key_{reason}_limit", {"retry-after": str(wait)}
            return await send_error(send, 429, message, "rate_limit_error", code, headers)
        KEY_IN_FLIGHT.labels(key).inc()
        try:
            await self._serve(scope, receive, send, key)
        finally:
            self.budgets.release(key)
            KEY_IN_FLIGHT.labels(key).dec()

    async def _serve(self, scope: dict, receive: Any, send: Any, key: str) -> None:
        messages, body = [], bytearray()
        while True:  # the body, to estimate the cost (vLLM reads it whole too)
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            messages.append(message)
            if len(body) <= self.max_body:
                body.extend(message.get("body", b""))
            if not message.get("more_body", False):
                break
        reserved = reservation(bytes(body))
        self.budgets.charge(key, reserved)

        async def replay() -> dict:
            return messages.pop(0) if messages else await receive()

        answer = {"status": 500, "stream": False, "body": bytearray()}

        async def tapped(message: dict) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                headers = dict(message.get("headers", []))
                answer["stream"] = b"text/event-stream" in headers.get(b"content-type", b"")
            elif message["type"] == "http.response.body":
                kept = answer["body"]
                kept.extend(message.get("body", b""))
                if answer["stream"] and len(kept) > 2 * USAGE_TAIL:
                    del kept[:-USAGE_TAIL]
            await send(message)

        try:
            await self.app(scope, replay, tapped)
        finally:
            if answer["status"] >= 400:
                used = 0
            else:
                used = answer_usage(bytes(answer["body"]), answer["stream"])
                used = reserved if used is None else used
            self.budgets.charge(key, used - reserved)
            KEY_TOKENS.labels(key).inc(used)
