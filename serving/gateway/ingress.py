"""The earlier layout's ingress (``serving.path: ingress``): Ray Serve LLM's OpenAiIngress
plus the gateway's metrics endpoint. Kept for one release beside the direct path."""

import asyncio
from typing import Any

from ray.serve.handle import DeploymentHandle
from ray.serve.llm.ingress import OpenAiIngress

from serving.gateway.metrics import publish_engine_status
from serving.gateway.stack import GatewayOptions, start_metrics_server


class Dsv4Ingress(OpenAiIngress):
    async def __init__(self, *args: Any, gateway: dict | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        start_metrics_server(GatewayOptions.model_validate(gateway or {}))
        handles: dict[str, DeploymentHandle] = kwargs.get("llm_deployments", {})
        # In the background: the engine replicas may still be loading.
        self._status_tasks = [
            asyncio.create_task(publish_engine_status(handle.collective_rpc.remote))
            for handle in handles.values()
        ]
