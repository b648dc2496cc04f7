"""The engines of a disaggregated deployment on Ray Serve LLM's P/D servers: decode
replicas (``PDDecodeServer``) that ask prefill replicas (``PDPrefillServer``) for each
prompt's KV, then decode locally. Our ingress and gateway go in front of decode
(serving/app.py), as in front of one engine."""

from __future__ import annotations

from typing import Any

from serving.config.preset import Preset
from serving.disagg.configs import connector_problem, pd_llm_configs


def pd_serving_args(preset: Preset, source: str) -> Any:
    """Ray Serve LLM's own P/D arguments (``PDServingArgs``: its checks that both roles
    serve one model with a KV connector, and its defaults, such as decode's NIXL port
    base moved off prefill's)."""
    from serving.compat.ray_private import PDServingArgs

    return PDServingArgs.model_validate(pd_llm_configs(preset, source))


def build_pd_engines(preset: Preset, source: str) -> tuple[Any, Any]:
    """(the decode deployment, bound to the prefill one; decode's LLMConfig)."""
    import vllm
    from ray.serve.llm import build_llm_deployment
    from ray.serve.llm.deployment import PDDecodeServer, PDPrefillServer

    if problem := connector_problem(preset, vllm.__version__):
        raise ValueError(problem)
    args = pd_serving_args(preset, source)
    prefill = build_llm_deployment(
        args.prefill_config, name_prefix="Prefill:", deployment_cls=PDPrefillServer
    )
    decode = build_llm_deployment(
        args.decode_config,
        name_prefix="Decode:",
        deployment_cls=PDDecodeServer,
        bind_kwargs={"prefill_server": prefill},
    )
    return decode, args.decode_config
