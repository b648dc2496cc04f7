"""Every private Ray import of the project, in one place, behind a version check.

The public API (``ray.serve.llm``) is not enough for four things, so each is taken
from Ray Serve LLM's internals, for the Ray release below only:
- ``CallbackBase``: ``LLMConfig.callback_config`` accepts a callback class, but the
  base class a callback must extend (it owns the context that says whether to run the
  node-initialisation task) is not exported.
- the OpenAI ingress's FastAPI app and ``to_model_metadata``: needed only by the
  earlier layout (``serving.path: ingress``), which wraps that app in our gateway.
- ``PDServingArgs``: Ray Serve LLM's checks and defaults for prefill/decode configs
  (both roles one model, a KV connector each, decode's NIXL port base), which only its
  ``build_pd_openai_app`` applies; that builder cannot put our gateway in front.
- ``LLMRouter`` and ``Application._with_ingress_request_router``: the ingress router
  HAProxy asks for each request's replica (``serving.routing: prefix``). Ray Serve LLM
  attaches it only inside ``build_openai_app`` (core/ingress/builder.py
  ``_build_openai_ingress_request_router``), which cannot take our server class.
"""

from typing import Any

import ray

SUPPORTED_RAY = "2.60."  # the internals below were read in this release


def check_ray_version() -> None:
    if not ray.__version__.startswith(SUPPORTED_RAY):
        raise RuntimeError(
            f"dsv4-serve uses Ray Serve LLM internals read in Ray {SUPPORTED_RAY}x, "
            f"found Ray {ray.__version__}: pin ray[serve]=={SUPPORTED_RAY}0 or re-check "
            "serving/compat/ray_private.py"
        )


check_ray_version()

from ray.llm._internal.common.callbacks.base import CallbackBase  # noqa: E402
from ray.llm._internal.serve.core.configs.openai_api_models import (  # noqa: E402
    to_model_metadata,
)
from ray.llm._internal.serve.core.ingress.ingress import init as openai_ingress_app  # noqa: E402
from ray.llm._internal.serve.core.ingress.router import LLMRouter  # noqa: E402
from ray.llm._internal.serve.serving_patterns.prefill_decode.builder import (  # noqa: E402
    PDServingArgs,
)


def ingress_request_router(server: Any, replicas: int) -> Any:
    """Ray's ingress router in front of ``server`` (an Application), deployed as Ray
    Serve LLM deploys it (builder.py: no CPU, so it fits beside the proxy on any node;
    max_ongoing_requests 1000, since it sits on every request's path)."""
    from ray import serve

    deployment = serve.deployment(
        LLMRouter,
        name="Dsv4Router",
        num_replicas=replicas,
        max_ongoing_requests=1000,
        ray_actor_options={"num_cpus": 0},
    )
    return deployment.bind(server=server)


class SkipNodeInit(CallbackBase):
    """Ray Serve LLM runs a node-initialisation task before the engine starts; it only
    downloads the model (importing torch and transformers), so for a local or PVC path
    it is skipped."""

    async def on_before_node_init(self) -> None:
        self.ctx.run_init_node = False


__all__: list[Any] = [
    "PDServingArgs",
    "SkipNodeInit",
    "ingress_request_router",
    "openai_ingress_app",
    "to_model_metadata",
]
