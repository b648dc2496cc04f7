"""The input checks in front of every inference route that takes a body (the route
table's inference POST routes; ``input_policy.RULES`` says how each body is read),
before anything else buffers it: the body is read in chunks and refused with 413 once
it passes the limit, so no more than the limit is held; then it must be JSON of the
route's shape, checked by ``input_policy.check``. A body that passes goes on to the app
unchanged, with what the checks found in the scope (``CHECKED``) for the per-key
limits, the metrics and the stored-response tenancy.

An oversized body is read on (and dropped) up to ``DRAIN_LIMIT`` before the 413 is
sent, so a client that is still sending reads the answer rather than a reset
connection; a body declared larger than that is answered at once.
"""

from __future__ import annotations

import os
from typing import Any

from serving.gateway.auth import ROUTE
from serving.gateway.errors import send_error
from serving.gateway.input_policy import CHECKED, RULES, BadRequest, check
from serving.gateway.routes import TABLE, Kind

MAX_BODY_ENV = "DSV4_MAX_BODY_BYTES"
DEFAULT_MAX_BODY = 4 << 20  # a 4096-token context is a few tens of KB of text
DRAIN_LIMIT = 64 << 20  # bytes of an oversized body read and dropped before the 413
__all__ = ["CHECKED", "InputCheckMiddleware", "read_body"]


class TooLarge(Exception):
    def __init__(self, size: int, complete: bool) -> None:
        super().__init__(size)
        self.size, self.complete = size, complete


def declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def read_body(receive: Any, limit: int, drain: int = DRAIN_LIMIT) -> bytes | None:
    """The body, read in chunks; None if the client went away. Past ``limit`` the chunks
    are dropped (read on up to ``drain`` bytes) and TooLarge is raised."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        more = message.get("more_body", False)
        if size > limit:
            chunks.clear()
            if not more or size > drain:
                raise TooLarge(size, not more)
            continue
        chunks.append(chunk)
        if not more:
            return b"".join(chunks)


def content_type_error(headers: list[tuple[bytes, bytes]]) -> str | None:
    value = next((v for k, v in headers if k.lower() == b"content-type"), b"")
    text = value.decode("latin-1")
    if text.split(";")[0].strip().lower() == "application/json":
        return None
    return f"Content-Type must be application/json, got {text or 'none'!r}"


class InputCheckMiddleware:
    """ASGI middleware: the input policy of every inference POST route."""

    def __init__(
        self,
        app: Any,
        max_body: int | None = None,
        max_output_tokens: int | None = None,
    ) -> None:
        self.app = app
        self.max_body = max_body or int(os.environ.get(MAX_BODY_ENV, DEFAULT_MAX_BODY))
        self.max_output_tokens = max_output_tokens

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        route = scope.get(ROUTE) or TABLE.match(scope.get("path", ""))
        if route is None or route.kind is not Kind.INFERENCE:
            return await self.app(scope, receive, send)
        rule = RULES.get(route.path)
        if rule is None:  # an inference route no rule reads: closed until it has one
            text = f"{route.label} has no input policy in this gateway"
            return await send_error(send, 404, text, "not_found_error", "route_not_served")
        try:
            body = await self._read(scope, receive, bool(rule.model))
            if body is None:
                return
            checked = check(route.path, body, self.max_output_tokens)
        except BadRequest as exc:
            return await send_error(send, exc.status, str(exc), "invalid_request_error", exc.code)
        if checked.request is not None:  # a route that reads no body reserves nothing
            scope[CHECKED] = checked
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read(self, scope: dict, receive: Any, json_body: bool) -> bytes | None:
        headers = scope.get("headers", [])
        declared = declared_length(headers)
        limit = f"the limit is {self.max_body}"
        if declared is not None and declared > DRAIN_LIMIT:
            text = f"request body is {declared} bytes; {limit}"
            raise BadRequest(413, text, "body_too_large")
        try:
            body = await read_body(receive, self.max_body)
        except TooLarge as exc:
            size = f"{exc.size} bytes" if exc.complete else f"over {exc.size} bytes"
            raise BadRequest(413, f"request body is {size}; {limit}", "body_too_large") from None
        if body and (json_body or body.strip()):
            problem = content_type_error(headers)
            if problem is not None:
                raise BadRequest(415, problem, "unsupported_media_type")
        return body
