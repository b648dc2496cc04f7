"""The one builder: ``serving.app:build(args)`` -> the Ray Serve application.

Used as is by ``dsv4-serve up`` (local Ray) and by Ray Serve config files
(``serve run``, KubeRay ``serveConfigV2``), whose ``args`` are ``BuildArgs``.
"""

from pathlib import Path
from typing import Any

from serving.config.build_args import resolve
from serving.config.preset import Preset

INGRESS_NAME = "Dsv4Ingress"  # the separate ingress deployment (serving.path: ingress)
DIRECT_NAME = "Dsv4Server"  # the engine-and-ingress deployment (serving.path: direct)


def ensure_model(preset: Preset, model_source: str) -> None:
    """Write the golden or bench checkpoint the preset asks for, or check the one there
    is it; a model of real weights is left to vLLM."""
    if preset.model.bench:
        from serving.bench_model.writer import ensure_bench_model

        bench = preset.model.bench
        ensure_bench_model(model_source, bench.shape, bench.layers, bench.experts)
        return
    if not preset.model.golden:
        return
    from serving.golden import GoldenDesign, write_golden_model
    from serving.golden.writer import read_design

    wanted = preset.model.golden_drafts
    if not (Path(model_source) / "config.json").exists():
        write_golden_model(model_source, GoldenDesign(draft_pattern=wanted))
        return
    found = read_design(model_source).draft_pattern
    if found != wanted:
        raise ValueError(
            f"golden model at {model_source} has drafts {found!r} but the preset's "
            f"model.golden_drafts is {wanted!r}: point model.source at another directory"
        )


def build(args: dict[str, Any]) -> Any:
    """Ray Serve application builder (import path ``serving.app:build``)."""
    from ray.serve.llm import LLMConfig

    from serving.config.llm_config import llm_config, resolve_model_source
    from serving.gateway.stack import GatewayOptions

    parsed, preset = resolve(args)
    source = resolve_model_source(preset)
    ensure_model(preset, source)
    config = LLMConfig(**llm_config(preset, source))
    gateway = GatewayOptions(
        metrics_port=parsed.gateway_metrics_port,
        metrics_host=parsed.gateway_metrics_host,
        thresholds={config.model_id: preset.monitoring.model_dump()},
        speculation={config.model_id: preset.speculation.info_labels()},
        key_max_concurrent=preset.deployment.per_key.max_concurrent,
        key_tokens_per_minute=preset.deployment.per_key.tokens_per_minute,
        # Every layout's gateway refuses an output budget past the context.
        max_output_tokens=config.engine_kwargs.get("max_model_len"),
    )
    if preset.disaggregation:
        from serving.disagg.app import build_pd_engines

        decode, decode_config = build_pd_engines(preset, source)
        return _with_ingress(decode_config, gateway, preset, decode)
    if preset.serving.path == "direct":
        return _direct(config, gateway, preset)
    return _with_ingress(config, gateway, preset)


def _direct(config: Any, gateway: Any, preset: Preset) -> Any:
    """One deployment: the engine replica is the ingress and serves vLLM's app."""
    from ray import serve
    from ray.serve.llm import build_llm_deployment

    from serving.gateway.admission import ray_limits
    from serving.gateway.server import Dsv4Server

    limits = preset.deployment
    gateway = gateway.model_copy(
        update={
            "max_ongoing_requests": limits.max_ongoing_requests,
            "max_queued_requests": limits.max_queued_requests,
        }
    )
    app = build_llm_deployment(
        config,
        name_prefix="",
        deployment_cls=serve.ingress()(Dsv4Server),
        bind_kwargs={"gateway": gateway.model_dump()},
        override_serve_options={
            "name": DIRECT_NAME,
            **ray_limits(limits.max_ongoing_requests, limits.max_queued_requests),
        },
    )
    if preset.serving.routing == "prefix":
        from serving.compat.ray_private import ingress_request_router

        app = app._with_ingress_request_router(
            ingress_request_router(app, preset.serving.prefix.router_replicas)
        )
    return app


def _with_ingress(config: Any, gateway: Any, preset: Preset, engine: Any = None) -> Any:
    """Ray Serve LLM's OpenAI ingress replica, in our gateway, in front of the engine
    deployment: one LLMServer (the earlier layout), or the decode side of P/D."""
    from ray import serve
    from ray.serve.llm import build_llm_deployment
    from ray.serve.llm.ingress import make_fastapi_ingress

    from serving.compat.ray_private import openai_ingress_app, to_model_metadata
    from serving.gateway.ingress import Dsv4Ingress
    from serving.gateway.stack import wrap_app

    app = openai_ingress_app()
    wrap_app(app, models=[config.model_id], options=gateway)
    ingress_cls = make_fastapi_ingress(Dsv4Ingress, app=app)
    options = Dsv4Ingress.get_deployment_options(llm_configs=[config])
    options["name"] = INGRESS_NAME
    options["max_replicas_per_node"] = 1  # one gateway metrics port per node
    if preset.serving.ingress_resource:
        from serving.disagg.placement import INGRESS_RESOURCE

        # Only the nodes that advertise it (the Helm chart's head) take the ingress.
        actor = options.setdefault("ray_actor_options", {})
        actor["resources"] = {**actor.get("resources", {}), INGRESS_RESOURCE: 1}
    return (
        serve.deployment(ingress_cls)
        .options(**options)
        .bind(
            llm_deployments={config.model_id: engine or build_llm_deployment(config)},
            model_cards={config.model_id: to_model_metadata(config.model_id, config)},
            gateway=gateway.model_dump(),
        )
    )
