"""``x-dsv4-replica`` on every response: which engine replica answered.

With several replicas a client (or the routing benchmark) can see where a request
landed: whether a conversation stays on one replica (``serving.routing: prefix``) and
how the load spreads. The value is Ray Serve's replica id (no host or address).

Only the direct layout (the engine replica is the ingress, ``serving.path: direct``) sets
it: in the ingress layout and in a disaggregated release the gateway runs in the ingress
replica, which does not learn which engine replica answered (docs/api.md says so)."""

import logging
from typing import Any

logger = logging.getLogger("ray.serve.dsv4")  # logged with the replica's own lines

HEADER = b"x-dsv4-replica"


class ReplicaHeader:
    def __init__(self, app: Any, replica_id: str) -> None:
        self.app, self.value = app, replica_id.encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def tagged(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {
                    **message,
                    "headers": [*message.get("headers", []), (HEADER, self.value)],
                }
            await send(message)

        await self.app(scope, receive, tagged)


def this_replica() -> str:
    """The Serve replica id of the calling process ("" outside a replica)."""
    from ray import serve

    try:
        context = serve.get_replica_context()
    except Exception:  # not inside a Serve replica (tests building the app alone)
        return ""
    try:
        return context.replica_id.unique_id
    except Exception as exc:  # a Ray that moved the id: the header goes, and says why
        logger.warning("x-dsv4-replica is off: the replica id is unreadable (%r)", exc)
        return ""
