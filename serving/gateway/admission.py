"""Admission control for the direct path: at most ``max_ongoing`` generation requests
in the engine replica, ``max_queued`` more waiting, the rest answered at once with
503, ``Retry-After`` and an OpenAI-style JSON error. A replica whose engine has died
holds new requests unanswered and ends itself (``Dsv4Server``): HAProxy retries a
request cut unanswered, or a refused connection, on another replica
(``proxy.environment``) and Serve replaces the dead one, so clients meet the survivor.

On the direct path Ray Serve's own back-pressure answer comes from the replica's
direct-ingress handler before any middleware of ours runs, as plain text
("Request dropped due to backpressure", ray/serve/_private/replica.py, the
``_can_accept_request`` branch of the direct-ingress ASGI handler). So the preset's
limits are enforced here, and Ray's are set above them (``ray_limits``) so Ray
passes every request through.
"""

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

from serving.gateway.overload import DEFAULT_RETRY_AFTER, RETRY_AFTER_ENV, openai_error_body

GENERATION_METHODS = frozenset({"POST"})


def ray_limits(max_ongoing: int, max_queued: int) -> dict[str, int]:
    """Ray's per-replica limits on the direct path: never the binding ones. Requests we
    reject finish in milliseconds, so Ray's own queue (unbounded) only ever holds a
    burst for that long."""
    ceiling = max_ongoing + max(max_queued, 0)
    return {"max_ongoing_requests": 2 * ceiling + 16, "max_queued_requests": -1}


class EngineLiveness:
    """Whether the replica's engine is alive (a cheap check, asked per request), and
    what to do the first time it is not (``Dsv4Server`` ends the replica)."""

    def __init__(
        self,
        check: Callable[[], Awaitable[bool]],
        on_dead: Callable[[], None] | None = None,
        hold_s: float = 5.0,
    ) -> None:
        self.check = check
        self.on_dead = on_dead
        # How long a request that met the dead engine is held unanswered: the replica
        # ends within that time, and a request cut unanswered is one HAProxy retries on
        # another replica (retry-on empty-response); a 503 would be retried too, but
        # leastconn keeps picking the replica that answers fastest, the dead one.
        self.hold_s = hold_s
        self._dead = False

    async def alive(self) -> bool:
        if not self._dead and not await self.check():
            self._dead = True
            if self.on_dead is not None:
                self.on_dead()
        return not self._dead


class Admission:
    def __init__(
        self,
        app: Any,
        max_ongoing: int,
        max_queued: int,
        liveness: EngineLiveness | None = None,
    ) -> None:
        self.app = app
        self.max_ongoing = max_ongoing
        self.max_queued = max_queued  # -1: unbounded
        self.liveness = liveness
        self.ongoing = 0
        self.waiting = 0
        self._slots: asyncio.Semaphore | None = None
        self.retry_after = os.environ.get(RETRY_AFTER_ENV, str(DEFAULT_RETRY_AFTER))

    def _full(self) -> bool:
        busy = self.ongoing >= self.max_ongoing
        return busy and 0 <= self.max_queued <= self.waiting

    async def _reject(self, send: Any, message: str) -> None:
        error = {"message": message, "type": "service_unavailable", "param": None, "code": 503}
        body = openai_error_body(503, json.dumps({"error": error}))
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", self.retry_after.encode()),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _unless_engine_died(self, send: Any) -> Any:
        """A 500 because the engine died before answering is held like a new request
        (so it is retried elsewhere), not passed on as this request's answer."""
        if self.liveness is None:
            return send
        liveness = self.liveness

        async def guarded(message: dict) -> None:
            start = message["type"] == "http.response.start"
            if start and message["status"] == 500 and not await liveness.alive():
                await asyncio.sleep(liveness.hold_s)
            await send(message)

        return guarded

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") not in GENERATION_METHODS:
            return await self.app(scope, receive, send)
        if self._slots is None:  # created in the replica's event loop
            self._slots = asyncio.Semaphore(self.max_ongoing)
        retry = f"retry after {self.retry_after}s"
        if self.liveness is not None and not await self.liveness.alive():
            await asyncio.sleep(self.liveness.hold_s)
            return await self._reject(send, f"this replica's engine stopped; {retry}")
        if self._full():
            busy = f"{self.ongoing} requests running and {self.waiting} queued on this replica"
            return await self._reject(send, f"server busy: {busy}; {retry}")
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.ongoing += 1
        try:
            await self.app(scope, receive, self._unless_engine_died(send))
        finally:
            self.ongoing -= 1
            self._slots.release()
