"""The served OpenAPI schema, per caller: ``GET /openapi.json`` lists the routes the
caller's key may use (``auth.decide``), so the schema a client (or a fuzzer) reads is
the API it can reach, and no route the table turns off is advertised."""

from __future__ import annotations

import json
from typing import Any

from serving.gateway.auth import CALLER, decide
from serving.gateway.keys import Caller, KeyRing
from serving.gateway.routes import TABLE, RouteTable

SCHEMA_PATH = "/openapi.json"


def visible_schema(
    spec: dict[str, Any],
    caller: Caller,
    admin_on: bool,
    features: frozenset[str],
    table: RouteTable = TABLE,
) -> dict[str, Any]:
    paths = {
        path: ops
        for path, ops in spec.get("paths", {}).items()
        if decide(path, table.match(path), caller, admin_on, features) is None
    }
    return {**spec, "paths": paths}


class ServedSchema:
    """ASGI middleware (inside ``ApiKeyAuth``): rewrite the schema's paths for the caller."""

    def __init__(self, app: Any, keys: KeyRing, features: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.keys = keys
        self.features = features

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        caller = scope.get(CALLER)
        if scope["type"] != "http" or scope.get("method") != "GET" or caller is None:
            return await self.app(scope, receive, send)
        if scope.get("path") != SCHEMA_PATH:
            return await self.app(scope, receive, send)
        held: dict[str, Any] = {"body": bytearray()}

        async def rewrite(message: dict) -> None:
            if message["type"] == "http.response.start":
                held["start"] = message
                return
            held["body"].extend(message.get("body", b""))
            if message.get("more_body", False):
                return
            start, body = held["start"], bytes(held["body"])
            if start["status"] == 200:
                spec = json.loads(body)
                admin_on = self.keys.admin.configured()
                view = visible_schema(spec, caller, admin_on, self.features)
                body = json.dumps(view).encode()
            headers = [
                (k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"
            ]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, rewrite)
