"""Requests in flight per replica, as the router sees them.

Each replica reports its ongoing requests (Serve's queue-length probe, ``RunningReplica
.get_queue_len``; direct-ingress requests count there too, ray/serve/_private/
replica.py ``_change_num_ongoing_requests``). A reading is reused for ``ttl_s``; an older
one is refreshed before the pick (one probe at a time, shared by the picks waiting on
it), so a key's replica is never judged on a finished request. Requests this router
placed are added on top until a probe sent at least ``grace_s`` after them has answered:
a placed request reaches its replica only after HAProxy forwards it, so a probe sent right
after the placement does not count it yet. Counting a request twice for a moment only
makes a key spill a little early; a placement HAProxy never forwarded is forgotten after
the next probe.
"""

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol


class Replica(Protocol):
    """What the tracker needs of Ray's ``RunningReplica``."""

    @property
    def replica_id(self) -> Any: ...

    async def get_queue_len(self, *, deadline_s: float) -> int: ...


def replica_key(replica: Replica) -> str:
    return replica.replica_id.unique_id


class ReplicaLoads:
    def __init__(
        self,
        ttl_s: float = 0.05,
        deadline_s: float = 0.1,
        grace_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s, self.deadline_s, self.grace_s, self.clock = ttl_s, deadline_s, grace_s, clock
        self._probed: dict[str, tuple[float, int]] = {}  # replica -> (sent, ongoing)
        self._tried: dict[str, float] = {}  # replica -> when last probed, answered or not
        self._placed: dict[str, deque[float]] = {}  # replica -> when we placed requests
        self._refresh: asyncio.Task | None = None

    async def current(self, replicas: Sequence[Replica]) -> dict[str, int]:
        """In flight per replica: a probe at most ``ttl_s`` old plus what we placed since."""
        now = self.clock()
        stale = [r for r in replicas if now - self._tried.get(replica_key(r), -1e9) > self.ttl_s]
        if stale:
            if self._refresh is None or self._refresh.done():
                self._refresh = asyncio.get_running_loop().create_task(self._probe(stale))
            await asyncio.shield(self._refresh)  # a cancelled pick leaves the probe running
        return {replica_key(r): self._load(replica_key(r)) for r in replicas}

    def _load(self, key: str) -> int:
        sent, ongoing = self._probed.get(key, (0.0, 0))
        placed = self._placed.get(key)
        while placed and placed[0] < sent - self.grace_s:  # the probe counts these
            placed.popleft()
        return ongoing + len(placed or ())

    def placed(self, replica_id: str) -> None:
        self._placed.setdefault(replica_id, deque()).append(self.clock())

    async def _probe(self, replicas: Sequence[Replica]) -> None:
        sent = self.clock()
        results = await asyncio.gather(
            *(r.get_queue_len(deadline_s=self.deadline_s) for r in replicas),
            return_exceptions=True,
        )
        for replica, result in zip(replicas, results, strict=True):
            key = replica_key(replica)
            self._tried[key] = sent  # a hung replica does not put a probe on every pick
            if isinstance(result, BaseException):
                # Keep the last reading, and with it every placement made since (a probe
                # that timed out on a busy host must not read as an idle replica; Serve
                # drops a dead replica itself).
                continue
            self._probed[key] = (sent, int(result))

    def forget(self, live: set[str]) -> None:
        for table in (self._probed, self._placed, self._tried):
            for key in [k for k in table if k not in live]:
                del table[key]
