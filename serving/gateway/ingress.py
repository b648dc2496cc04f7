"""The earlier layout's ingress (``serving.path: ingress``): Ray Serve LLM's OpenAiIngress
plus the gateway's metrics endpoint. Kept for one release beside the direct path."""

from typing import Any

from ray.serve.llm.ingress import OpenAiIngress

from serving.gateway.stack import GatewayOptions, start_metrics_server


class Dsv4Ingress(OpenAiIngress):
    def __init__(self, *args: Any, gateway: dict | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        options = GatewayOptions.model_validate(gateway or {})
        start_metrics_server(options, models=list(options.thresholds))
