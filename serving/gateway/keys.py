"""API keys with roles: inference keys and admin keys, each from a variable and a file.

- inference: ``DSV4_API_KEYS`` (comma-separated) and/or ``DSV4_API_KEYS_FILE``;
- admin: ``DSV4_ADMIN_KEYS`` and/or ``DSV4_ADMIN_KEYS_FILE``.

A file holds one key per line and is re-read when it changes, so a rotated Kubernetes
Secret takes effect without a restart; both kinds rotate the same way. Blank lines and
lines whose first non-blank character is ``#`` are comments, as is a ``#`` after
whitespace to the end of its line (``key   # owner``; a ``#`` inside a key, with no
space before it, is part of the key); CRLF line ends and a UTF-8 byte-order mark are
read as plain text. A line that still holds whitespace once its comment is gone is no
key: it is skipped and logged by its line number, never its text.

Keys are compared in constant time and never logged: metrics and logs name a key by its
id, the first 12 hex digits of its SHA-256 (``key_id``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

KEYS_ENV = "DSV4_API_KEYS"
KEYS_FILE_ENV = "DSV4_API_KEYS_FILE"
ADMIN_KEYS_ENV = "DSV4_ADMIN_KEYS"
ADMIN_KEYS_FILE_ENV = "DSV4_ADMIN_KEYS_FILE"
ANONYMOUS = "anonymous"  # the caller's id while auth is off
TRAILING_COMMENT = re.compile(r"\s#.*$")
logger = logging.getLogger("dsv4.gateway.auth")


class Role(StrEnum):
    INFERENCE = "inference"
    ADMIN = "admin"


class KeySource:
    """Keys from one variable and one file."""

    def __init__(
        self,
        env: dict[str, str] | None = None,
        variable: str = KEYS_ENV,
        file_variable: str = KEYS_FILE_ENV,
    ) -> None:
        env = dict(os.environ if env is None else env)
        self.variable = variable
        self._inline = [k.strip() for k in env.get(variable, "").split(",") if k.strip()]
        self._file = Path(env[file_variable]) if env.get(file_variable) else None
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
            text = self._file.read_text(encoding="utf-8-sig")
            self._file_keys = parse_key_file(text, str(self._file))
            self._file_stamp = stamp

    def keys(self) -> list[bytes]:
        self._refresh()
        return [k.encode() for k in self._inline + self._file_keys]

    def configured(self) -> bool:
        """True when the variable or the file is set, whether or not it yields keys now."""
        return bool(self._inline) or self._file is not None

    def describe(self) -> str:
        sources = ([self.variable] if self._inline else []) + (
            [str(self._file)] if self._file else []
        )
        return f"{len(self.keys())} key(s) from {', '.join(sources)}" if sources else "no keys"


def parse_key_file(text: str, name: str = "API key file") -> list[str]:
    """The keys of a key file's text (the module's docstring says how it is read)."""
    keys = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = TRAILING_COMMENT.sub("", line).strip()
        if not line or line.startswith("#"):
            continue
        if any(c.isspace() for c in line):
            logger.error("%s: line %d holds whitespace inside a key; skipped", name, number)
            continue
        keys.append(line)
    return keys


def key_matches(presented: bytes, keys: list[bytes]) -> bool:
    """Constant time in the key contents: every key is compared, no early exit."""
    found = False
    for key in keys:
        found |= hmac.compare_digest(presented, key)
    return found


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:12]


@dataclass(frozen=True)
class Caller:
    role: Role | None  # None: auth is off
    key_id: str


class KeyRing:
    """Both kinds of keys. Auth is on whenever either kind is configured."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.inference = KeySource(env, KEYS_ENV, KEYS_FILE_ENV)
        self.admin = KeySource(env, ADMIN_KEYS_ENV, ADMIN_KEYS_FILE_ENV)

    def auth_on(self) -> bool:
        return self.inference.configured() or self.admin.configured()

    def identify(self, presented: bytes) -> Caller | None:
        """The caller a presented key belongs to, or None. Both lists are compared in
        full; a key listed as both kinds is an admin key."""
        is_admin = key_matches(presented, self.admin.keys())
        is_inference = key_matches(presented, self.inference.keys())
        if not presented or not (is_admin or is_inference):
            return None
        return Caller(Role.ADMIN if is_admin else Role.INFERENCE, key_id(presented))
