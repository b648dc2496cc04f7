"""Who may call what: API keys with roles (``keys``) against the route table (``routes``).

Auth is on whenever an inference or an admin key is configured. Then every route but
the probes (``/health``, Ray's ``/-/healthz`` and ``/-/routes``) needs
``Authorization: Bearer <key>``; a missing or wrong key gets a 401 OpenAI-style error.
A key source that is configured but missing or empty fails closed: its routes answer
nobody (no inference or admin key at all: 401 ``no_server_keys``; no admin key: the
control routes take no key).

Past the key: inference routes take inference and admin keys; metrics and control
routes take admin keys only (403 for an inference key) and are off (404) while no
admin key is configured; routes the table marks off, control routes whose engine
feature is off, and paths the table does not list answer 404 to every key.

Each request's caller and route are left in the ASGI scope (``CALLER``, ``ROUTE``) for
the per-key limits and the served schema.
"""

from __future__ import annotations

import logging
from typing import Any

from serving.gateway.errors import send_error
from serving.gateway.keys import (
    ANONYMOUS,
    Caller,
    KeyRing,
    KeySource,
    Role,
    key_matches,
)
from serving.gateway.metrics import KEY_REQUESTS
from serving.gateway.routes import TABLE, Kind, Route, RouteTable

CALLER = "dsv4.caller"
ROUTE = "dsv4.route"
OPEN_PATHS = frozenset(r.path for r in TABLE.routes if r.kind is Kind.PROBE)
ADMIN_ONLY = frozenset({Kind.METRICS, Kind.CONTROL})
logger = logging.getLogger("dsv4.gateway.auth")

__all__ = ["ApiKeyAuth", "KeyRing", "KeySource", "decide", "key_matches", "presented_key"]


def presented_key(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.partition(b" ")
            return token.strip() if scheme.lower() == b"bearer" and token.strip() else b""
    return None


def decide(
    path: str,
    route: Route | None,
    caller: Caller,
    admin_on: bool,
    features: frozenset[str],
) -> tuple[int, str, str] | None:
    """None when the caller may use the route, else (status, code, message)."""
    if route is None:
        return 404, "route_not_served", f"{path} is not a route this server serves"
    name = route.label
    if route.kind is Kind.OFF:
        return 404, "route_off", f"{name} is not served by this deployment: {route.why}"
    if route.needs and route.needs not in features:
        text = f"{name} needs the engine argument {route.needs}, which this deployment leaves off"
        return 404, "feature_off", text
    if route.kind not in ADMIN_ONLY:
        return None
    if not admin_on:
        text = (
            f"{name} is a {route.kind} route: off while no admin key is configured "
            "(DSV4_ADMIN_KEYS / DSV4_ADMIN_KEYS_FILE)"
        )
        return 404, "admin_routes_off", text
    if caller.role is not Role.ADMIN:
        return 403, "admin_key_required", f"{name} is a {route.kind} route: it needs an admin key"
    return None


ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error"}


async def _deny(scope: dict, send: Any, status: int, code: str, message: str) -> None:
    if scope["type"] == "websocket":  # closing before accept answers HTTP 403
        return await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
    headers = {"www-authenticate": "Bearer"} if status == 401 else None
    await send_error(send, status, message, ERROR_TYPES[status], code, headers)


class ApiKeyAuth:
    """ASGI middleware: identify the caller by key, then apply the route table."""

    def __init__(
        self,
        app: Any,
        source: KeySource | None = None,
        keys: KeyRing | None = None,
        table: RouteTable = TABLE,
        features: frozenset[str] = frozenset(),
    ) -> None:
        self.app = app
        if keys is None:
            keys = KeyRing()
            if source is not None:  # inference keys only (tests, the earlier API)
                keys.inference, keys.admin = source, KeySource({})
        self.keys = keys
        self.table = table
        self.features = features

    def _identify(self, scope: dict) -> tuple[Caller | None, tuple[int, str, str] | None]:
        if not self.keys.auth_on():
            return Caller(None, ANONYMOUS), None
        presented = presented_key(scope.get("headers", []))
        caller = self.keys.identify(presented or b"")
        if caller is not None:
            return caller, None
        if not (self.keys.inference.keys() or self.keys.admin.keys()):
            text = "No API keys are available on the server (key file missing or empty)."
            return None, (401, "no_server_keys", text)
        if presented is None:
            return None, (
                401,
                "missing_api_key",
                "Missing API key: send 'Authorization: Bearer <key>'.",
            )
        return None, (401, "invalid_api_key", "Invalid API key.")

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        path = scope["path"]
        route = self.table.match(path)
        scope[ROUTE] = route
        if route is not None and route.kind is Kind.PROBE:
            return await self.app(scope, receive, send)
        caller, refusal = self._identify(scope)
        if caller is None:
            return await _deny(scope, send, *refusal)
        scope[CALLER] = caller
        denial = decide(path, route, caller, self.keys.admin.configured(), self.features)
        kind = route.kind.value if route else "unlisted"
        if denial is not None:
            KEY_REQUESTS.labels(caller.key_id, kind, str(denial[0])).inc()
            return await _deny(scope, send, *denial)
        if scope["type"] == "websocket":
            return await self.app(scope, receive, send)
        status = {"code": 500}

        async def recorded(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recorded)
        finally:
            KEY_REQUESTS.labels(caller.key_id, kind, str(status["code"])).inc()
