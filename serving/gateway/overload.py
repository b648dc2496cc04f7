"""Tell clients refused for overload (429/503) when to come back."""

import os
from typing import Any

RETRY_AFTER_ENV = "DSV4_RETRY_AFTER_SECONDS"
DEFAULT_RETRY_AFTER = 2
OVERLOAD_STATUSES = frozenset({429, 503})


class RetryAfter:
    """ASGI middleware: add ``Retry-After`` to 429/503 responses that lack one."""

    def __init__(self, app: Any, seconds: int | None = None) -> None:
        self.app = app
        self.value = str(seconds or int(os.environ.get(RETRY_AFTER_ENV, DEFAULT_RETRY_AFTER)))

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_retry_after(message: dict) -> None:
            if message["type"] == "http.response.start" and message["status"] in OVERLOAD_STATUSES:
                headers = list(message.get("headers", []))
                if not any(k.lower() == b"retry-after" for k, _ in headers):
                    headers.append((b"retry-after", self.value.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_retry_after)
