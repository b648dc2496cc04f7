"""OpenAI-style error bodies, sent straight from ASGI middleware."""

import json
from collections.abc import Awaitable, Callable
from typing import Any

Send = Callable[[dict[str, Any]], Awaitable[None]]


async def send_error(
    send: Send,
    status: int,
    message: str,
    err_type: str,
    code: str,
    headers: dict[str, str] | None = None,
) -> None:
    body = json.dumps(
        {"error": {"message": message, "type": err_type, "param": None, "code": code}}
    ).encode()
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    raw_headers += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})
