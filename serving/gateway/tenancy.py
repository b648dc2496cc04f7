"""Stored responses belong to the key that created them.

vLLM keeps a ``/v1/responses`` answer in the replica's memory when its store is on
(``VLLM_ENABLE_RESPONSES_API_STORE=1``; in vLLM's Responses handler, under
``entrypoints/openai/responses/``, ``store`` is dropped silently while it is off) and
hands it to whoever names its id: ``GET /v1/responses/{id}``,
``POST /v1/responses/{id}/cancel``, and a new request's ``previous_response_id``, which
continues that conversation. The gateway records which
key's request created each stored response (the key's id, never the key) as the answer
passes, before the client can read the id, and answers any other key 404 as if the
response were absent. An id it never recorded answers 404 to every key, so a response
whose id the gateway could not read stays closed (the store off, that is every id, as
vLLM would answer too).

A response's id is the request's ``request_id``, which a client may choose: while the
store is on, a ``/v1/responses`` request that sets ``request_id`` is refused, since it
could name, and overwrite, another key's stored response.

Both stores live in the replica's process and are lost with it; vLLM never removes a
stored response, and the record of its owner (a few dozen bytes) stays as long.
"""

from __future__ import annotations

import json
from typing import Any

from serving.gateway.auth import CALLER, ROUTE
from serving.gateway.errors import send_error
from serving.gateway.input_policy import CHECKED
from serving.gateway.keys import ANONYMOUS

CREATE = "/v1/responses"
STORED = frozenset({"/v1/responses/{response_id}", "/v1/responses/{response_id}/cancel"})
ID_SCAN = 64 << 10  # bytes of a stream searched for the response's id (its first event)


def store_on(scope: dict) -> bool:
    """Whether vLLM's Responses handler stores responses: its own switch when the app
    has the handler, else vLLM's environment variable."""
    state = getattr(scope.get("app"), "state", None)
    handler = getattr(state, "openai_serving_responses", None)
    if handler is not None and hasattr(handler, "enable_store"):
        return bool(handler.enable_store)
    from vllm import envs

    return bool(envs.VLLM_ENABLE_RESPONSES_API_STORE)


def response_id(body: bytes, stream: bool) -> str | None:
    """The id of a Responses answer: a JSON response's ``id``, or a stream's first event
    that carries its ``response``."""
    if not stream:
        try:
            payload = json.loads(body)
        except Exception:
            return None
        found = payload.get("id") if isinstance(payload, dict) else None
        return found if isinstance(found, str) else None
    for line in body.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        try:
            event = json.loads(line[5:])
        except Exception:
            continue
        response = event.get("response") if isinstance(event, dict) else None
        if isinstance(response, dict) and isinstance(response.get("id"), str):
            return response["id"]
    return None


async def _not_found(send: Any, rid: str) -> None:
    text = f"Response with id '{rid}' not found."
    await send_error(send, 404, text, "invalid_request_error", "response_not_found")


class ResponseOwners:
    """ASGI middleware (inside ``InputCheckMiddleware``): record who created each stored
    response and answer other keys 404."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.owners: dict[str, str] = {}  # response id -> key id

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        route = scope.get(ROUTE)
        if scope["type"] != "http" or route is None:
            return await self.app(scope, receive, send)
        caller = scope.get(CALLER)
        key = caller.key_id if caller is not None else ANONYMOUS
        if route.path in STORED:
            match = route.regex.match(scope.get("path", ""))
            rid = match.group("response_id") if match else ""
            if self.owners.get(rid) != key:
                return await _not_found(send, rid)
            return await self.app(scope, receive, send)
        checked = scope.get(CHECKED)
        if route.path != CREATE or scope.get("method") != "POST" or checked is None:
            return await self.app(scope, receive, send)
        request = checked.request
        previous = request.previous_response_id
        if previous is not None and self.owners.get(previous) != key:
            return await _not_found(send, previous)
        if not store_on(scope):
            return await self.app(scope, receive, send)
        if "request_id" in checked.sent:
            text = (
                "request_id names the stored response on /v1/responses and is chosen by "
                "the server while responses are stored"
            )
            return await send_error(send, 400, text, "invalid_request_error", "request_id_set")
        if not request.store:
            return await self.app(scope, receive, send)
        await self.app(scope, receive, self._recording(send, key))

    def _recording(self, send: Any, key: str) -> Any:
        """A send that holds the answer until its id is read and recorded (the id's
        owner is known before the client reads the id), then passes everything on."""
        state: dict[str, Any] = {"start": None, "held": [], "size": 0, "done": False}

        async def release() -> None:
            state["done"] = True
            await send(state["start"])
            for message in state["held"]:
                await send(message)
            state["held"].clear()

        async def recording(message: dict) -> None:
            if state["done"]:
                return await send(message)
            if message["type"] == "http.response.start":
                state["start"] = message
                if message["status"] >= 300:
                    await release()
                return
            state["held"].append(message)
            state["size"] += len(message.get("body", b""))
            headers = dict(state["start"].get("headers", []))
            stream = b"text/event-stream" in headers.get(b"content-type", b"")
            ended = not message.get("more_body", False)
            rid = None
            if stream or ended:
                body = b"".join(m.get("body", b"") for m in state["held"])
                rid = response_id(body, stream)
                if rid is not None:
                    self.owners[rid] = key
            if rid is None and not ended and (not stream or state["size"] < ID_SCAN):
                return  # a JSON answer whole; a stream up to its first event with the id
            await release()

        return recording
