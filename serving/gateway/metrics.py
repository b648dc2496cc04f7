"""Request-level gateway metrics with prometheus-client, as seen by the client.

Served by each ingress replica on its own port (``DSV4_GATEWAY_METRICS_PORT``,
default 9464; the ingress runs at most one replica per node), next to Ray's metrics
export port that carries the engine's ``ray_vllm_*`` series.
"""

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from model_overrides.engine_status import STATUS_METHOD
from serving.gateway.input_policy import CHECKED, Checked
from serving.gateway.routes import TABLE

logger = logging.getLogger("ray.serve.dsv4")  # logged with the replica's own lines
REGISTRY = CollectorRegistry(auto_describe=True)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1, 2.5)

REQUESTS = Counter(
    "dsv4_gateway_requests",
    "Requests by route, model and HTTP status",
    ["route", "model_name", "status"],
    registry=REGISTRY,
)
IN_FLIGHT = Gauge(
    "dsv4_gateway_requests_in_flight", "Requests being served", ["route"], registry=REGISTRY
)
REJECTED = Counter(
    "dsv4_gateway_rejected",
    "Requests refused for overload (429/503)",
    ["route", "model_name", "status"],
    registry=REGISTRY,
)
TTFT = Histogram(
    "dsv4_gateway_time_to_first_token_seconds",
    "Request start to first response body bytes",
    ["route", "model_name"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
ITL = Histogram(
    "dsv4_gateway_inter_token_latency_seconds",
    "Gap between streamed chunks",
    ["route", "model_name"],
    buckets=_ITL_BUCKETS,
    registry=REGISTRY,
)
E2E = Histogram(
    "dsv4_gateway_request_duration_seconds",
    "Request start to last response byte",
    ["route", "model_name"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
# Both describe the engine's worker processes (engine_host, engine_pid), not this one.
PATCHES = Gauge(
    "dsv4_overrides_patch_info",
    "DSV4 override status in the engine's workers (value 1)",
    ["patch", "override", "status", "engine_host", "engine_pid"],
    registry=REGISTRY,
)
KERNEL_LIBRARY = Gauge(
    "dsv4_cpu_kernel_library_info",
    "vLLM CPU kernel library the engine's workers loaded (_C, _C_AVX512, _C_AVX2) and the"
    " CPU's own ISA (value 1)",
    ["library", "hardware_isa", "engine_host", "engine_pid"],
    registry=REGISTRY,
)
THRESHOLDS = Gauge(
    "dsv4_monitoring_threshold",
    "Alert thresholds of the served preset (its monitoring block), read by the dsv4 rules",
    ["model_name", "threshold"],
    registry=REGISTRY,
)
SPECULATION = Gauge(
    "dsv4_speculation_info",
    "The served preset's speculation: method, draft tokens per step and how drafts are"
    " sampled (value 1)",
    ["model_name", "method", "num_speculative_tokens", "draft_sample_method"],
    registry=REGISTRY,
)
# Per API key: the key's id (a SHA-256 prefix, never the key), so the series count is
# bounded by the keys the server holds.
KEY_REQUESTS = Counter(
    "dsv4_gateway_key_requests",
    "Requests by API key id (a hash of the key), route class and HTTP status",
    ["key_id", "route_class", "status"],
    registry=REGISTRY,
)
KEY_IN_FLIGHT = Gauge(
    "dsv4_gateway_key_requests_in_flight",
    "Inference requests of a key in flight (running or queued)",
    ["key_id"],
    registry=REGISTRY,
)
KEY_TOKENS = Counter(
    "dsv4_gateway_key_tokens",
    "Tokens charged to a key's per-minute budget (the response's usage, else the reservation)",
    ["key_id"],
    registry=REGISTRY,
)
KEY_REJECTED = Counter(
    "dsv4_gateway_key_rejected",
    "Requests refused with 429 for a key over its limit (concurrency or tokens per minute)",
    ["key_id", "reason"],
    registry=REGISTRY,
)
UNCLASSIFIED_ROUTES = Gauge(
    "dsv4_gateway_unclassified_routes",
    "Routes the served app mounts that the gateway's route table does not classify (denied)",
    registry=REGISTRY,
)


async def publish_engine_status(collective_rpc: Callable[[str], Awaitable[list[dict]]]) -> None:
    """Ask the engine's workers for their override status (``LLMServer.collective_rpc``,
    or a handle's ``collective_rpc.remote``) and publish one report per worker."""
    try:
        reports = await collective_rpc(STATUS_METHOD)
    except Exception as exc:  # e.g. engine_args replaced our worker extension
        logger.error("override status unavailable from the engine's workers: %s", exc)
        return
    for report in reports:
        where = (report["host"], str(report["pid"]))
        for patch in report["patches"]:
            PATCHES.labels(patch["name"], patch["override"], patch["status"], *where).set(1)
        if report["kernel_library"] is not None:  # only where vLLM's CPU kernels run
            KERNEL_LIBRARY.labels(report["kernel_library"], report["hardware_isa"], *where).set(1)


def publish_served_models(
    thresholds: dict[str, dict[str, float]], speculation: dict[str, dict[str, str]]
) -> None:
    """``{model_id: {threshold_name: value}}`` and ``{model_id: speculation labels}``
    (Speculation.info_labels) from each served preset.

    Also creates the rejection series at 0, so that rates over them exist before the
    first overload instead of appearing with it.
    """
    for model, values in thresholds.items():
        for name, value in values.items():
            THRESHOLDS.labels(model, name).set(value)
    for model, labels in speculation.items():
        SPECULATION.labels(model_name=model, **labels).set(1)
    for model in thresholds:
        for route in ("/v1/completions", "/v1/chat/completions"):
            for status in ("429", "503"):
                REJECTED.labels(route, model, status)


def model_label(checked: Checked | None, served: frozenset[str] | None = None) -> str:
    """The model a request named, from the body the input checks passed ("none" for a
    request without one, or refused before its body was read; "unknown" for a name the
    replica does not serve, so clients cannot grow the series count)."""
    if checked is None:
        return "none"
    model = checked.model
    if model is None or (served is not None and model not in served):
        return "unknown"
    return model


def route_label(path: str) -> str:
    """The route table's template for the path: label values come from a fixed set, so
    clients cannot grow the series count."""
    route = TABLE.match(path)
    return route.label if route is not None else "other"


class GatewayMetrics:
    """ASGI middleware recording what a client of the OpenAI routes experiences."""

    def __init__(self, app: Any, models: list[str] | None = None) -> None:
        self.app = app
        self.models = frozenset(models) if models is not None else None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not path.startswith("/v1/"):
            return await self.app(scope, receive, send)
        route = route_label(path)
        start = time.perf_counter()
        state: dict[str, Any] = {"status": 500, "first": None, "last": None}
        gaps: list[float] = []

        async def tapped_send(message: dict) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
            elif message["type"] == "http.response.body" and message.get("body"):
                now = time.perf_counter()
                if state["first"] is None:
                    state["first"] = now
                else:
                    gaps.append(now - state["last"])
                state["last"] = now
            await send(message)

        IN_FLIGHT.labels(route).inc()
        try:
            await self.app(scope, receive, tapped_send)
        finally:
            IN_FLIGHT.labels(route).dec()
            model = model_label(scope.get(CHECKED), self.models)
            status = state["status"]
            REQUESTS.labels(route, model, str(status)).inc()
            if status in (429, 503):
                REJECTED.labels(route, model, str(status)).inc()
            if 200 <= status < 300:
                end = time.perf_counter()
                E2E.labels(route, model).observe(end - start)
                if state["first"] is not None:
                    TTFT.labels(route, model).observe(state["first"] - start)
                for gap in gaps:
                    ITL.labels(route, model).observe(gap)
