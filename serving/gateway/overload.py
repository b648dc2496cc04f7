"""Overload answers (429/503) in the shape OpenAI clients handle: a JSON error body and
a ``Retry-After`` header. Ray Serve answers back-pressure with plain text."""

import json
import os
from typing import Any

RETRY_AFTER_ENV = "DSV4_RETRY_AFTER_SECONDS"
DEFAULT_RETRY_AFTER = 2
OVERLOAD_STATUSES = frozenset({429, 503})


def openai_error_body(status: int, text: str) -> bytes:
    try:
        if isinstance(json.loads(text).get("error"), dict):
            return text.encode()
    except Exception:  # not JSON (Ray's plain text), or not an object
        pass
    kind = "rate_limit_error" if status == 429 else "service_unavailable"
    error = {"message": text.strip() or "overloaded", "type": kind, "param": None, "code": status}
    return json.dumps({"error": error}).encode()


class OverloadResponses:
    """ASGI middleware: give 429/503 responses a Retry-After header and a JSON body."""

    def __init__(self, app: Any, seconds: int | None = None) -> None:
        self.app = app
        self.retry_after = str(seconds or int(os.environ.get(RETRY_AFTER_ENV, DEFAULT_RETRY_AFTER)))

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        held: dict[str, Any] = {}

        async def rewrite(message: dict) -> None:
            if message["type"] == "http.response.start" and message["status"] in OVERLOAD_STATUSES:
                held["start"], held["body"] = message, bytearray()
                return
            if "start" not in held:
                return await send(message)
            held["body"].extend(message.get("body", b""))
            if message.get("more_body", False):
                return
            start = held["start"]
            body = openai_error_body(start["status"], held["body"].decode("utf-8", "replace"))
            headers = [
                (k, v)
                for k, v in start.get("headers", [])
                if k.lower() not in (b"content-length", b"content-type")
            ]
            if not any(k.lower() == b"retry-after" for k, _ in headers):
                headers.append((b"retry-after", self.retry_after.encode()))
            headers += [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, rewrite)
