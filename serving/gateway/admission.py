"""Admission control for the direct path: at most ``max_ongoing`` generation requests
in the engine replica, ``max_queued`` more waiting, the rest answered at once with
503, ``Retry-After`` and an OpenAI-style JSON error.

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
from typing import Any

from serving.gateway.overload import DEFAULT_RETRY_AFTER, RETRY_AFTER_ENV, openai_error_body

GENERATION_METHODS = frozenset({"POST"})


def ray_limits(max_ongoing: int, max_queued: int) -> dict[str, int]:
    """Ray's per-replica limits on the direct path: never the binding ones. Requests we
    reject finish in milliseconds, so Ray's own queue (unbounded) only ever holds a
    burst for that long."""
    ceiling = max_ongoing + max(max_queued, 0)
    return {"max_ongoing_requests": 2 * ceiling + 16, "max_queued_requests": -1}


class Admission:
    def __init__(self, app: Any, max_ongoing: int, max_queued: int) -> None:
        self.app = app
        self.max_ongoing = max_ongoing
        self.max_queued = max_queued  # -1: unbounded
        self.ongoing = 0
        self.waiting = 0
        self._slots: asyncio.Semaphore | None = None
        self.retry_after = os.environ.get(RETRY_AFTER_ENV, str(DEFAULT_RETRY_AFTER))

    def _full(self) -> bool:
        busy = self.ongoing >= self.max_ongoing
        return busy and 0 <= self.max_queued <= self.waiting

    async def _reject(self, send: Any) -> None:
        body = openai_error_body(
            503,
            json.dumps(
                {
                    "error": {
                        "message": f"server busy: {self.ongoing} requests running and "
                        f"{self.waiting} queued on this replica; retry after "
                        f"{self.retry_after}s",
                        "type": "service_unavailable",
                        "param": None,
                        "code": 503,
                    }
                }
            ),
        )
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", self.retry_after.encode()),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") not in GENERATION_METHODS:
            return await self.app(scope, receive, send)
        if self._slots is None:  # created in the replica's event loop
            self._slots = asyncio.Semaphore(self.max_ongoing)
        if self._full():
            return await self._reject(send)
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.ongoing += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.ongoing -= 1
            self._slots.release()
