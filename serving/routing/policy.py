"""Which replica a key goes to: rendezvous hashing with bounded load.

Rendezvous (highest-random-weight) hashing ranks the replicas for a key by a hash of
(key, replica): every router replica computes the same ranking with no shared state,
and when a replica goes or comes only the keys it ranks first move. The first replica
in that ranking takes the request unless its load would exceed ``balance_factor``
times the mean (consistent hashing with bounded loads, Mirrokni, Thorup and
Zadimoghaddam, SODA 2018): then the next one does. So a hot prefix fills its replica
to the bound and spills over, and no replica ever holds more than about
``balance_factor / n`` of what is in flight (60% with the default 1.2 on 2 replicas).
"""

import hashlib
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

AFFINITY = "affinity"  # the key's first-ranked replica
SPILL = "spill"  # a later-ranked one: the first was at its bound or full
NO_KEY = "no_key"  # nothing to route on: the least loaded


@dataclass(frozen=True)
class Choice:
    replica: str
    ranking: list[str]  # every replica, best first
    outcome: str


def rank(key: bytes, replicas: Sequence[str]) -> list[str]:
    """Replicas by rendezvous weight for ``key``, highest first."""

    def weight(replica: str) -> bytes:
        return hashlib.blake2b(key + replica.encode(), digest_size=8).digest()

    return sorted(replicas, key=weight, reverse=True)


def load_bound(loads: Mapping[str, int], balance_factor: float) -> int:
    """Most requests one replica may hold once the new one is placed."""
    total = sum(loads.values()) + 1
    return max(1, math.ceil(balance_factor * total / len(loads)))


def choose(
    key: bytes | None,
    loads: Mapping[str, int],
    capacity: Mapping[str, int],
    balance_factor: float,
) -> Choice:
    """Pick a replica from ``loads`` (in flight per replica); ``capacity`` is each one's
    max ongoing requests (a full replica is passed over while another has room)."""
    replicas = list(loads)
    if key is None:  # least loaded, ties broken at random (as Serve's default router)
        ranking = sorted(
            replicas, key=lambda r: (loads[r] >= capacity[r], loads[r], random.random())
        )
        return Choice(ranking[0], ranking, NO_KEY)
    ranking = rank(key, replicas)
    bound = load_bound(loads, balance_factor)
    for position, replica in enumerate(ranking):
        if loads[replica] + 1 <= bound and loads[replica] < capacity[replica]:
            return Choice(replica, ranking, AFFINITY if position == 0 else SPILL)
    # Every replica at its bound or full: the least loaded, as Serve would.
    least = min(ranking, key=lambda r: (loads[r] >= capacity[r], loads[r]))
    return Choice(least, ranking, AFFINITY if least == ranking[0] else SPILL)
