"""The gateway as one stack of ASGI middleware, and its metrics port: the same on the
direct path (inside the engine replica) and the ingress path (``Dsv4Ingress``)."""

import logging
import os
from typing import Any

from prometheus_client import start_http_server
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from serving.gateway.admission import Admission, EngineLiveness
from serving.gateway.auth import ApiKeyAuth
from serving.gateway.errors import http_exception_as_openai
from serving.gateway.failures import FailureAnswers
from serving.gateway.input_middleware import InputCheckMiddleware
from serving.gateway.keys import KeyRing
from serving.gateway.limits import KeyLimits
from serving.gateway.metrics import (
    REGISTRY,
    UNCLASSIFIED_ROUTES,
    GatewayMetrics,
    publish_served_models,
)
from serving.gateway.overload import OverloadResponses
from serving.gateway.replica_header import HEADER, ReplicaHeader
from serving.gateway.routes import TABLE
from serving.gateway.schema_view import ServedSchema
from serving.gateway.tenancy import ResponseOwners

METRICS_PORT_ENV = "DSV4_GATEWAY_METRICS_PORT"
DEFAULT_METRICS_PORT = 9464
logger = logging.getLogger("ray.serve.dsv4")  # logged with the replica's own lines


class GatewayOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metrics_port: int | None = Field(None, ge=1, le=65535)
    metrics_host: str = "0.0.0.0"
    thresholds: dict[str, dict[str, float]] = Field(default_factory=dict)
    # Per model: the labels of dsv4_speculation_info (Speculation.info_labels).
    speculation: dict[str, dict[str, str]] = Field(default_factory=dict)
    # Admission limits enforced by the gateway (direct path); None: Ray's own apply.
    max_ongoing_requests: int | None = Field(None, ge=1)
    max_queued_requests: int = Field(-1, ge=-1)
    # Per API key (serving/gateway/limits.py); None: no limit.
    key_max_concurrent: int | None = Field(None, ge=1)
    key_tokens_per_minute: int | None = Field(None, ge=1)
    # The most output tokens a request may ask for (the engine's max_model_len); None: no cap.
    max_output_tokens: int | None = Field(None, ge=1)


def wrap_app(
    app: Any,
    models: list[str],
    options: GatewayOptions,
    liveness: EngineLiveness | None = None,
    features: frozenset[str] = frozenset(),
    replica_id: str = "",
) -> None:
    """Put the gateway around a FastAPI app, outermost first: failure answers (whatever
    any layer below raises answers in JSON), the replica's header, metrics (see every
    request), keys and the route table, the schema each key sees, the input checks (every
    inference route's body, read before anything else buffers it), the per-key limits,
    stored-response tenancy, overload answers (Retry-After, JSON body) and the admission
    limits where the gateway enforces them. ``features``: the engine arguments that are
    on (routes that need one are off without it)."""
    unclassified = TABLE.unclassified(app.routes)
    UNCLASSIFIED_ROUTES.set(len(unclassified))
    if unclassified:  # denied (404) until serving/gateway/routes.py classifies them
        logger.error("routes the route table does not classify, denied: %s", unclassified)
    else:
        logger.info("route table: all %d routes the app mounts are classified", len(app.routes))
    # vLLM's build_app builds its middleware stack eagerly: drop it so Starlette
    # rebuilds the stack, with ours, on the first request.
    app.middleware_stack = None
    app.add_exception_handler(HTTPException, http_exception_as_openai)
    # Starlette puts the middleware added last outermost.
    if options.max_ongoing_requests is not None:
        app.add_middleware(
            Admission,
            max_ongoing=options.max_ongoing_requests,
            max_queued=options.max_queued_requests,
            liveness=liveness,
        )
    app.add_middleware(OverloadResponses)
    app.add_middleware(ResponseOwners)
    app.add_middleware(
        KeyLimits,
        max_concurrent=options.key_max_concurrent,
        tokens_per_minute=options.key_tokens_per_minute,
    )
    app.add_middleware(InputCheckMiddleware, max_output_tokens=options.max_output_tokens)
    keys = KeyRing()
    for source in (keys.inference, keys.admin):
        if source.configured() and not source.keys():  # fails closed; say why
            logger.error("%s is configured but holds no key", source.variable)
    app.add_middleware(ServedSchema, keys=keys, features=features)
    app.add_middleware(ApiKeyAuth, keys=keys, features=features)
    app.add_middleware(GatewayMetrics, models=models)
    headers = []
    if replica_id:
        app.add_middleware(ReplicaHeader, replica_id=replica_id)
        headers.append((HEADER, replica_id.encode()))
    app.add_middleware(FailureAnswers, headers=headers)


def start_metrics_server(options: GatewayOptions) -> None:
    port = options.metrics_port or int(os.environ.get(METRICS_PORT_ENV, DEFAULT_METRICS_PORT))
    try:
        start_http_server(port, addr=options.metrics_host, registry=REGISTRY)
    except OSError as exc:  # a second replica on the same node: keep serving, say so
        logger.error("gateway metrics port %s:%s unavailable: %s", options.metrics_host, port, exc)
    publish_served_models(options.thresholds, options.speculation)
