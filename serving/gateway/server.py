"""The engine replica that is also the ingress: Ray Serve LLM's ``LLMServer`` serving
vLLM's own OpenAI app (direct streaming), with our gateway around that app.

One replica per engine, no separate ingress replica: the HTTP proxy (HAProxy, or Ray's
Python proxy) sends each request straight to the replica that holds the engine, and
vLLM's FastAPI app streams tokens back without Ray Serve LLM's stream batching.
"""

import asyncio
import logging
import os
import time
from typing import Any

from ray.serve.llm import LLMServer

from serving.gateway import guard_metrics
from serving.gateway.admission import EngineLiveness
from serving.gateway.metrics import REGISTRY, publish_engine_status
from serving.gateway.replica_header import this_replica
from serving.gateway.routes import enabled_features
from serving.gateway.stack import GatewayOptions, start_metrics_server, wrap_app

logger = logging.getLogger("ray.serve.dsv4")  # logged with the replica's own lines


EXIT_DELAY_S = 0.05


class Dsv4Server(LLMServer):
    async def __init__(self, llm_config: Any, *, gateway: dict | None = None, **kwargs: Any):
        self._gateway = GatewayOptions.model_validate(gateway or {})
        started = time.monotonic()
        # Before the engine starts: its EngineCore inherits where to write the guard's state.
        guard_metrics.register(REGISTRY, llm_config.model_id)
        await super().__init__(llm_config, **kwargs)
        logger.info("engine started in %.1fs", time.monotonic() - started)
        start_metrics_server(self._gateway)
        # Asked of the engine's workers: they, not this process, run the model.
        await publish_engine_status(self.collective_rpc)

    async def __serve_build_asgi_app__(self) -> Any:
        app = await super().__serve_build_asgi_app__()
        liveness = EngineLiveness(self._engine_alive, on_dead=self._end_replica_soon)
        # Routes that need an engine feature (elastic EP, ...) are off unless it is on.
        features = enabled_features(self._llm_config.engine_kwargs)
        models = [self._llm_config.model_id]
        wrap_app(
            app,
            models=models,
            options=self._gateway,
            liveness=liveness,
            features=features,
            replica_id=this_replica(),
        )
        return app

    async def _engine_alive(self) -> bool:
        try:
            await self.check_health()
        except Exception:
            return False
        return True

    def _end_replica_soon(self) -> None:
        """The engine is gone and will not come back in this process. Serve would stop
        the replica after its next health check (seconds), while HAProxy keeps sending
        it requests; ending the process now makes HAProxy retry the requests it holds
        on a survivor and Serve start a replacement. The short delay lets in-flight
        streams flush the error event vLLM gives them."""
        logger.error("engine died; ending this replica so Serve replaces it")
        asyncio.get_running_loop().call_later(EXIT_DELAY_S, os._exit, 70)
