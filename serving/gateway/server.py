"""The engine replica that is also the ingress: Ray Serve LLM's ``LLMServer`` serving
vLLM's own OpenAI app (direct streaming), with our gateway around that app.

One replica per engine, no separate ingress replica: the HTTP proxy (HAProxy, or Ray's
Python proxy) sends each request straight to the replica that holds the engine, and
vLLM's FastAPI app streams tokens back without Ray Serve LLM's stream batching.
"""

import logging
import time
from typing import Any

from ray.serve.llm import LLMServer

from serving.gateway.stack import GatewayOptions, start_metrics_server, wrap_app

logger = logging.getLogger("ray.serve.dsv4")  # logged with the replica's own lines


class Dsv4Server(LLMServer):
    async def __init__(self, llm_config: Any, *, gateway: dict | None = None, **kwargs: Any):
        self._gateway = GatewayOptions.model_validate(gateway or {})
        started = time.monotonic()
        await super().__init__(llm_config, **kwargs)
        logger.info("engine started in %.1fs", time.monotonic() - started)
        # After the engine started: the patch status then describes this process's vLLM.
        start_metrics_server(self._gateway, models=[llm_config.model_id])

    async def __serve_build_asgi_app__(self) -> Any:
        app = await super().__serve_build_asgi_app__()
        wrap_app(app, models=[self._llm_config.model_id], options=self._gateway)
        return app
