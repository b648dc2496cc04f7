"""Our ingress: Ray Serve LLM's OpenAiIngress plus the gateway's metrics endpoint."""

import logging
import os
from typing import Any

from prometheus_client import start_http_server
from ray.serve.llm.ingress import OpenAiIngress

from serving.gateway.metrics import REGISTRY, publish_patch_status, publish_served_models

METRICS_PORT_ENV = "DSV4_GATEWAY_METRICS_PORT"
DEFAULT_METRICS_PORT = 9464
logger = logging.getLogger("dsv4.gateway")


class Dsv4Ingress(OpenAiIngress):
    def __init__(
        self,
        *args: Any,
        metrics_port: int | None = None,
        metrics_host: str = "0.0.0.0",
        thresholds: dict[str, dict[str, float]] | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        port = metrics_port or int(os.environ.get(METRICS_PORT_ENV, DEFAULT_METRICS_PORT))
        try:
            start_http_server(port, addr=metrics_host, registry=REGISTRY)
        except OSError as exc:  # a second replica on the same node: keep serving, say so
            logger.error("gateway metrics port %s:%s unavailable: %s", metrics_host, port, exc)
        publish_patch_status()
        publish_served_models(thresholds or {})
