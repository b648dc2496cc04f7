"""``PrefixAffinityRouter``: Serve's request router for ``serving.routing: prefix``.

Where it runs: HAProxy asks Ray Serve LLM's ingress router (``LLMRouter``, a small
deployment beside the engine replicas) for a replica on every request (HAProxy's Lua
action, ray/serve/_private/ingress_request_router.lua.tmpl); ``LLMRouter.route`` parses
the body and calls ``choose_replica(body, _reserve=False)`` on the engine deployment's
handle (ray/llm/_internal/serve/core/ingress/router.py), whose request router is this
class (the deployment's ``request_router_config``). On that pick-only path Serve takes
the first replica of the first rank this returns and neither probes queue lengths nor
calls ``on_request_routed`` (ray/serve/_private/router.py ``choose_replica``), which is
why Ray's ``PrefixCacheAffinityRouter``, which learns prefixes in
``on_request_routed``, never learns there. This router keeps no prefix state: the key
(serving/routing/keys.py) decides by rendezvous hashing, the replicas' own load
(serving/routing/loads.py) bounds it (serving/routing/policy.py). Each pick is counted
by outcome (serving/routing/decisions.py).
"""

from typing import Any

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from serving.routing.decisions import Decisions
from serving.routing.keys import key_hash, routing_key
from serving.routing.loads import ReplicaLoads, replica_key
from serving.routing.policy import choose


class PrefixAffinityRouter(RequestRouter):
    def initialize_state(
        self,
        key_chars: int = 1024,
        balance_factor: float = 1.2,
        load_ttl_s: float = 0.05,
        **_: Any,
    ) -> None:
        self.key_chars, self.balance_factor = key_chars, balance_factor
        self.loads = ReplicaLoads(ttl_s=load_ttl_s)
        # Ray's RequestRouter.__init__ sets _deployment_id before Serve calls this
        # (ray/serve/_private/request_router/request_router.py, router.py).
        deployment = getattr(getattr(self, "_deployment_id", None), "name", "")
        self.decisions = Decisions(deployment)

    def _key(self, pending_request: PendingRequest | None) -> bytes | None:
        if pending_request is None:
            return None
        payload = pending_request.args[0] if pending_request.args else None
        session = pending_request.metadata.session_id
        key = routing_key(payload, session, self.key_chars)
        return key_hash(key) if key else None

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        by_id = {replica_key(r): r for r in candidate_replicas}
        loads = await self.loads.current(candidate_replicas)
        capacity = {key: r.max_ongoing_requests for key, r in by_id.items()}
        choice = choose(self._key(pending_request), loads, capacity, self.balance_factor)
        self.loads.placed(choice.replica)
        self.decisions.count(choice.outcome)
        rest = [by_id[r] for r in choice.ranking if r != choice.replica]
        return [[by_id[choice.replica]], rest] if rest else [[by_id[choice.replica]]]

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        self.loads.forget({replica_key(r) for r in replicas})
