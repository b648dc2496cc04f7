"""A request either completes or ends in an OpenAI-style error, never in a silent close
that looks like a complete answer, nor in Starlette's plain-text 500.

vLLM's handlers already turn engine errors into a JSON 5xx (non-streamed) or an
``error`` event (streamed). This is the net under them and under every layer of the
gateway, the outermost of its middleware: whatever escapes a stream after it started
answering ends it with an ``error`` event and ``[DONE]``; an answer that never started
gets a 500 JSON error (with ``headers``, the replica's header, since this layer sits
outside the one that adds it).
"""

import json
import logging
from typing import Any

logger = logging.getLogger("ray.serve.dsv4")


def error_event(message: str, code: int = 500) -> bytes:
    error = {"message": message, "type": "internal_server_error", "param": None, "code": code}
    return f"data: {json.dumps({'error': error})}\n\ndata: [DONE]\n\n".encode()


class FailureAnswers:
    def __init__(self, app: Any, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self.app = app
        self.headers = list(headers or [])

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        state = {"started": False, "ended": False, "stream": False}

        async def watched(message: dict) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
                headers = dict(message.get("headers", []))
                state["stream"] = b"text/event-stream" in headers.get(b"content-type", b"")
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                state["ended"] = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as exc:
            logger.exception("request failed: %s", type(exc).__name__)
            text = f"the server failed while answering: {type(exc).__name__}"
            if not state["started"]:
                body = error_event(text)[len("data: ") :].split(b"\n\n")[0]
                headers = [(b"content-type", b"application/json"), *self.headers]
                await send({"type": "http.response.start", "status": 500, "headers": headers})
                await send({"type": "http.response.body", "body": body})
            elif state["stream"] and not state["ended"]:
                await send({"type": "http.response.body", "body": error_event(text)})
            else:
                raise
