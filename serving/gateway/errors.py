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


ERROR_TYPES = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error"}


async def http_exception_as_openai(request: Any, exc: Any) -> Any:
    """FastAPI's HTTPException (Ray Serve LLM raises it for an unknown model) answers
    ``{"detail": ...}``; clients of an OpenAI API expect ``{"error": {...}}``."""
    from starlette.responses import JSONResponse

    status = exc.status_code
    kind = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    body = {"error": {"message": str(exc.detail), "type": kind, "param": None, "code": status}}
    return JSONResponse(body, status_code=status, headers=getattr(exc, "headers", None))
