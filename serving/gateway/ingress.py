"""The earlier layout's ingress (``serving.path: ingress``): Ray Serve LLM's OpenAiIngress
plus the gateway's metrics endpoint. Kept for one release beside the direct path."""

import asyncio
import logging
from typing import Any

from ray.serve.handle import DeploymentHandle
from ray.serve.llm.ingress import OpenAiIngress

from model_overrides.engine_status import STATUS_METHOD
from serving.gateway.metrics import publish_engine_status
from serving.gateway.stack import GatewayOptions, start_metrics_server

logger = logging.getLogger("ray.serve.dsv4")


class Dsv4Ingress(OpenAiIngress):
    async def __init__(self, *args: Any, gateway: dict | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        start_metrics_server(GatewayOptions.model_validate(gateway or {}))
        handles: dict[str, DeploymentHandle] = kwargs.get("llm_deployments", {})
        # In the background: the engine replicas may still be loading.
        self._status_task = asyncio.create_task(_publish_engine_status(list(handles.values())))


async def _publish_engine_status(handles: list[DeploymentHandle]) -> None:
    for handle in handles:
        try:
            publish_engine_status(await handle.collective_rpc.remote(STATUS_METHOD))
        except Exception as exc:
            logger.error("override status unavailable from the engine's workers: %s", exc)
