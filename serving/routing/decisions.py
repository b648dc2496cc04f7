"""The prefix router's decisions as a metric: ``ray_dsv4_router_decisions_total`` by
``outcome`` (affinity: the key's own replica; spill: a later one, the first being at its
load bound or full; no_key: nothing to route on, the least loaded).

A rising spill share says a hot prefix is being spread (its cache is held twice) or the
replicas are too few for the load. The router runs in Ray Serve LLM's ingress router
replicas, several to a node, so a prometheus-client port per process would collide; a
``ray.util.metrics`` counter goes through the node's Ray metrics agent and comes out on
Ray's metrics export port beside the engines' ``ray_vllm_*`` series (Ray prefixes
``ray_`` and adds ``_total``, ray/util/metrics.py ``Counter``), which the chart's scrape
already reads.
"""

from ray.util.metrics import Counter

NAME = "dsv4_router_decisions"
EXPORTED = f"ray_{NAME}_total"


class Decisions:
    def __init__(self, deployment: str) -> None:
        self._counter = Counter(
            NAME,
            description="Prefix router picks by outcome (affinity, spill, no_key)",
            tag_keys=("deployment", "outcome"),
        ).set_default_tags({"deployment": deployment})

    def count(self, outcome: str) -> None:
        self._counter.inc(1, tags={"outcome": outcome})
