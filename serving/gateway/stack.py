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
from serving.gateway.metrics import (
    REGISTRY,
    GatewayMetrics,
    publish_served_models,
)
from serving.gateway.overload import OverloadResponses
from serving.gateway.request_guard import RequestGuard

METRICS_PORT_ENV = "DSV4_GATEWAY_METRICS_PORT"
DEFAULT_METRICS_PORT = 9464
logger = logging.getLogger("dsv4.gateway")


class GatewayOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metrics_port: int | None = Field(None, ge=1, le=65535)
    metrics_host: str = "0.0.0.0"
    thresholds: dict[str, dict[str, float]] = Field(default_factory=dict)
    # Admission limits enforced by the gateway (direct path); None: Ray's own apply.
    max_ongoing_requests: int | None = Field(None, ge=1)
    max_queued_requests: int = Field(-1, ge=-1)


def wrap_app(
    app: Any,
    models: list[str],
    options: GatewayOptions,
    liveness: EngineLiveness | None = None,
) -> None:
    """Put the gateway around a FastAPI app, outermost first: metrics (see every
    request), auth, input checks, overload answers (Retry-After, JSON body), errors
    after acceptance, and the admission limits where the gateway enforces them."""
    # vLLM's build_app builds its middleware stack eagerly: drop it so Starlette
    # rebuilds the stack, with ours, on the first request.
    app.middleware_stack = None
    app.add_exception_handler(HTTPException, http_exception_as_openai)
    if options.max_ongoing_requests is not None:
        app.add_middleware(
            Admission,
            max_ongoing=options.max_ongoing_requests,
            max_queued=options.max_queued_requests,
            liveness=liveness,
        )
    app.add_middleware(FailureAnswers)
    app.add_middleware(OverloadResponses)
    app.add_middleware(RequestGuard)
    app.add_middleware(ApiKeyAuth)
    app.add_middleware(GatewayMetrics, models=models)


def start_metrics_server(options: GatewayOptions) -> None:
    port = options.metrics_port or int(os.environ.get(METRICS_PORT_ENV, DEFAULT_METRICS_PORT))
    try:
        start_http_server(port, addr=options.metrics_host, registry=REGISTRY)
    except OSError as exc:  # a second replica on the same node: keep serving, say so
        logger.error("gateway metrics port %s:%s unavailable: %s", options.metrics_host, port, exc)
    publish_served_models(options.thresholds)
