"""API-key authentication for the OpenAI routes.

Keys come from ``DSV4_API_KEYS`` (comma-separated) and/or the file named by
``DSV4_API_KEYS_FILE`` (one key per line; re-read when it changes, so a rotated
Kubernetes Secret takes effect without a restart). Auth is on whenever at least one
key is configured. Keys are compared in constant time and never logged.

A key file that is configured but missing or empty fails closed: every protected
route is refused (401) rather than served without auth.

Policy: ``/health``, ``/-/healthz`` and ``/-/routes`` stay open (probes); every
``/v1/*`` route, ``/v1/models`` included (it names what is served), and ``/tokenize``
need ``Authorization: Bearer <key>``.
"""

import hmac
import logging
import os
from pathlib import Path
from typing import Any

from serving.gateway.errors import send_error

KEYS_ENV = "DSV4_API_KEYS"
KEYS_FILE_ENV = "DSV4_API_KEYS_FILE"
OPEN_PATHS = frozenset({"/health", "/-/healthz", "/-/routes"})
logger = logging.getLogger("dsv4.gateway.auth")


class KeySource:
    def __init__(self, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ if env is None else env)
        self._inline = [k.strip() for k in env.get(KEYS_ENV, "").split(",") if k.strip()]
        self._file = Path(env[KEYS_FILE_ENV]) if env.get(KEYS_FILE_ENV) else None
        self._file_stamp: float | None = None
        self._file_keys: list[str] = []

    def _refresh(self) -> None:
        if self._file is None:
            return
        try:
            stamp = self._file.stat().st_mtime
        except OSError:
            if self._file_keys:
                logger.error("API key file %s is gone; keeping the last keys read", self._file)
            return
        if stamp != self._file_stamp:
            lines = self._file.read_text().splitlines()
            self._file_keys = [
                line.strip() for line in lines if line.strip() and not line.startswith("#")
            ]
            self._file_stamp = stamp

    def keys(self) -> list[bytes]:
        self._refresh()
        return [k.encode() for k in self._inline + self._file_keys]

    def configured(self) -> bool:
        """True when any key source is set, whether or not it yields keys right now."""
        return bool(self._inline) or self._file is not None

    def describe(self) -> str:
        sources = ([KEYS_ENV] if self._inline else []) + ([str(self._file)] if self._file else [])
        return f"{len(self.keys())} key(s) from {', '.join(sources)}" if sources else "no keys"


def key_matches(presented: bytes, keys: list[bytes]) -> bool:
    """Constant time in the key contents: every key is compared, no early exit."""
    found = False
    for key in keys:
        found |= hmac.compare_digest(presented, key)
    return found


def presented_key(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.partition(b" ")
            return token.strip() if scheme.lower() == b"bearer" and token.strip() else b""
    return None


class ApiKeyAuth:
    """ASGI middleware: 401 with an OpenAI-style error unless a configured key is presented."""

    def __init__(self, app: Any, source: KeySource | None = None) -> None:
        self.app = app
        self.source = source or KeySource()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        keys = self.source.keys()
        if not keys:
            if not self.source.configured():
                return await self.app(scope, receive, send)
            return await send_error(
                send,
                401,
                "No API keys are available on the server (key file missing or empty).",
                "authentication_error",
                "no_server_keys",
                {"www-authenticate": "Bearer"},
            )
        key = presented_key(scope.get("headers", []))
        if key is None:
            return await send_error(
                send,
                401,
                "Missing API key: send 'Authorization: Bearer <key>'.",
                "authentication_error",
                "missing_api_key",
                {"www-authenticate": "Bearer"},
            )
        if not key_matches(key, keys):
            return await send_error(
                send,
                401,
                "Invalid API key.",
                "authentication_error",
                "invalid_api_key",
                {"www-authenticate": "Bearer"},
            )
        return await self.app(scope, receive, send)
