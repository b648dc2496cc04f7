"""Input checks in front of the OpenAI routes, for what vLLM and Ray Serve LLM let
through or answer with a 5xx: body size, content type, UTF-8 JSON objects, unknown
fields, stop lists, ``n``, tool schemas.

Policy on unknown fields: a top-level field that neither vLLM's completion nor its
chat request model knows is rejected with 400 naming it (a typo such as ``max_token``
would otherwise be ignored silently). Vendor extensions vLLM supports (``top_k``,
``ignore_eos``, ...) are known fields and pass.
"""

from __future__ import annotations

import json
import os
from functools import cache
from typing import Any

from serving.gateway.errors import send_error

MAX_BODY_ENV = "DSV4_MAX_BODY_BYTES"
DEFAULT_MAX_BODY = 4 << 20  # a 4096-token context is a few tens of KB of text
MAX_STOP = 16
MAX_N = 8
GUARDED_ROUTES = frozenset({"/v1/completions", "/v1/chat/completions"})


class BadRequest(ValueError):
    def __init__(self, status: int, message: str, code: str, param: str | None = None):
        super().__init__(message)
        self.status, self.code, self.param = status, code, param


@cache
def known_fields(route: str) -> frozenset[str]:
    if route == "/v1/completions":
        from vllm.entrypoints.openai.completion.protocol import CompletionRequest as model
    else:
        from vllm.entrypoints.openai.chat_completion.protocol import (
            ChatCompletionRequest as model,
        )
    names = set(model.model_fields)
    names |= {f.alias for f in model.model_fields.values() if f.alias}
    return frozenset(names)


def _check_tools(tools: Any) -> None:
    import jsonschema

    if not isinstance(tools, list):
        raise BadRequest(400, "tools must be a list", "invalid_tools", "tools")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            message = f"tools[{i}] must be {{type: function, function: {{name, ...}}}}"
            raise BadRequest(400, message, "invalid_tools", f"tools[{i}]")
        schema = function.get("parameters", {})
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise BadRequest(
                400,
                f"tools[{i}].function.parameters is not a valid JSON Schema: {exc.message}",
                "invalid_tools",
                f"tools[{i}].function.parameters",
            ) from None


def _check_messages(messages: Any) -> None:
    # vLLM answers 500 for messages null or a list of non-objects.
    if not isinstance(messages, list) or not messages:
        text = "messages must be a non-empty list of message objects"
        raise BadRequest(400, text, "invalid_messages", "messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            text = f"messages[{i}] must be an object with a string role"
            raise BadRequest(400, text, "invalid_messages", f"messages[{i}]")


def check_body(route: str, content_type: str, body: bytes, max_body: int) -> None:
    """Raise BadRequest naming the problem; return when the body may go on."""
    if len(body) > max_body:
        raise BadRequest(
            413, f"request body is {len(body)} bytes; the limit is {max_body}", "body_too_large"
        )
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise BadRequest(
            415,
            f"Content-Type must be application/json, got {content_type or 'none'!r}",
            "unsupported_media_type",
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(
            400, f"request body is not valid UTF-8 (byte {exc.start})", "invalid_encoding"
        ) from None
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRequest(400, f"request body is not valid JSON: {exc}", "invalid_json") from None
    if not isinstance(payload, dict):
        raise BadRequest(400, "request body must be a JSON object", "invalid_json")
    unknown = sorted(set(payload) - known_fields(route))
    if unknown:
        raise BadRequest(
            400, f"unknown field(s) {', '.join(unknown)} for {route}", "unknown_field", unknown[0]
        )
    if route == "/v1/chat/completions":
        _check_messages(payload.get("messages"))
    if route == "/v1/completions" and payload.get("prompt") in ("", []):
        raise BadRequest(400, "prompt must not be empty", "empty_prompt", "prompt")
    stop = payload.get("stop")
    if isinstance(stop, list) and len(stop) > MAX_STOP:
        raise BadRequest(
            400, f"stop has {len(stop)} entries; at most {MAX_STOP}", "too_many_stop", "stop"
        )
    n = payload.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and n > MAX_N:
        raise BadRequest(400, f"n={n} exceeds the limit of {MAX_N}", "n_too_large", "n")
    if "tools" in payload and payload["tools"] is not None:
        _check_tools(payload["tools"])


class RequestGuard:
    """ASGI middleware: buffer the body of a guarded POST (up to the limit), check it,
    then replay it to the app."""

    def __init__(self, app: Any, max_body: int | None = None) -> None:
        self.app = app
        self.max_body = max_body or int(os.environ.get(MAX_BODY_ENV, DEFAULT_MAX_BODY))

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or scope.get("path") not in GUARDED_ROUTES
        ):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body.extend(message.get("body", b""))
            more = message.get("more_body", False)
            if len(body) > self.max_body:
                break  # do not buffer an oversized body
        try:
            check_body(scope["path"], headers.get("content-type", ""), bytes(body), self.max_body)
        except BadRequest as exc:
            return await send_error(send, exc.status, str(exc), "invalid_request_error", exc.code)

        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
