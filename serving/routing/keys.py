"""The routing key of a request: what must land on the same replica for its prefix to
be in that replica's KV cache.

- ``x-session-id`` (Ray's session header, forwarded by HAProxy's router call): the
  client says which requests belong together.
- Chat: the leading system/developer messages, the tools and the first user message.
  Every later turn of a conversation repeats them, so all its turns share one key,
  while conversations that share only a system prompt get different keys (and spread
  over the replicas, each of which caches the system prompt once).
- Completions: the first ``key_chars`` characters of the prompt (or the first
  ``key_chars // 4`` token ids). A client whose prompts share a longer prefix than that
  across unrelated sessions should send ``x-session-id``.
Each part is cut at ``key_chars`` characters, so the key is bounded however long the
request. ``None``: nothing to route on (the router balances load only).
"""

import hashlib
import json
from typing import Any

LEADING_ROLES = ("system", "developer")


def _canonical(value: Any, key_chars: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text[:key_chars]


def _chat_key(messages: list[Any], tools: Any, key_chars: int) -> str | None:
    parts = []
    for message in messages:
        if not isinstance(message, dict):
            return None
        role = message.get("role")
        parts.append(f"{role}:{_canonical(message.get('content'), key_chars)}")
        if role not in LEADING_ROLES:
            break
    if tools:
        parts.append("tools:" + _canonical(tools, key_chars))
    return "chat\n" + "\n".join(parts) if parts else None


def _prompt_key(prompt: Any, key_chars: int) -> str | None:
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        prompt = prompt[0]  # a batch of prompts: routed by its first
    if isinstance(prompt, str) and prompt:
        return "prompt\n" + prompt[:key_chars]
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        return "tokens\n" + ",".join(map(str, prompt[: max(key_chars // 4, 1)]))
    return None


def routing_key(payload: Any, session_id: str = "", key_chars: int = 1024) -> str | None:
    """The key of a request whose body fields are attributes of ``payload`` (Ray's
    ingress router wraps the parsed body that way), or None."""
    if session_id:
        return "session\n" + session_id
    messages = getattr(payload, "messages", None)
    if isinstance(messages, list) and messages:
        return _chat_key(messages, getattr(payload, "tools", None), key_chars)
    return _prompt_key(getattr(payload, "prompt", None), key_chars)


def key_hash(key: str) -> bytes:
    return hashlib.blake2b(key.encode(), digest_size=16).digest()
