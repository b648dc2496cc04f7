"""The one builder: ``serving.app:build(args)`` -> the Ray Serve application.

Used as is by ``dsv4-serve up`` (local Ray) and by Ray Serve config files
(``serve run``, KubeRay ``serveConfigV2``), whose ``args`` are ``BuildArgs``.
"""

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from serving.profile import Profile, ProfileError, load_profile, parse_set

INGRESS_NAME = "Dsv4Ingress"  # the separate ingress deployment (serving.path: ingress)
DIRECT_NAME = "Dsv4Server"  # the engine-and-ingress deployment (serving.path: direct)


class BuildArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    preset: str = "cpu-tiny"
    set: list[str] = Field(default_factory=list, description="key.path=value overrides")
    override_files: list[str] = Field(default_factory=list)
    gateway_metrics_port: int | None = Field(None, ge=1, le=65535)
    gateway_metrics_host: str = Field("0.0.0.0", description="interface of the metrics port")


def resolve(args: dict[str, Any] | BuildArgs) -> tuple[BuildArgs, Profile]:
    try:
        parsed = args if isinstance(args, BuildArgs) else BuildArgs.model_validate(args or {})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ProfileError(f"application args are invalid: {problems}") from None
    overrides = [parse_set(item) for item in parsed.set]
    return parsed, load_profile(parsed.preset, overrides, parsed.override_files)


def ensure_golden_model(profile: Profile, model_source: str) -> None:
    if profile.model.golden and not (Path(model_source) / "config.json").exists():
        from serving.golden import write_golden_model

        write_golden_model(model_source)


def build(args: dict[str, Any]) -> Any:
    """Ray Serve application builder (import path ``serving.app:build``)."""
    from ray.serve.llm import LLMConfig

    from serving.gateway.stack import GatewayOptions
    from serving.llm_config import llm_config, resolve_model_source

    parsed, profile = resolve(args)
    source = resolve_model_source(profile)
    ensure_golden_model(profile, source)
    config = LLMConfig(**llm_config(profile, source))
    gateway = GatewayOptions(
        metrics_port=parsed.gateway_metrics_port,
        metrics_host=parsed.gateway_metrics_host,
        thresholds={config.model_id: profile.monitoring.model_dump()},
    )
    if profile.serving.path == "direct":
        return _direct(config, gateway, profile)
    return _with_ingress(config, gateway)


def _direct(config: Any, gateway: Any, profile: Profile) -> Any:
    """One deployment: the engine replica is the ingress and serves vLLM's app."""
    from ray import serve
    from ray.serve.llm import build_llm_deployment

    from serving.gateway.admission import ray_limits
    from serving.gateway.server import Dsv4Server

    limits = profile.deployment
    gateway = gateway.model_copy(
        update={
            "max_ongoing_requests": limits.max_ongoing_requests,
            "max_queued_requests": limits.max_queued_requests,
        }
    )
    return build_llm_deployment(
        config,
        name_prefix="",
        deployment_cls=serve.ingress()(Dsv4Server),
        bind_kwargs={"gateway": gateway.model_dump()},
        override_serve_options={
            "name": DIRECT_NAME,
            **ray_limits(limits.max_ongoing_requests, limits.max_queued_requests),
        },
    )


def _with_ingress(config: Any, gateway: Any) -> Any:
    """The earlier layout: Ray Serve LLM's OpenAI ingress replica in front of LLMServer."""
    from ray import serve
    from ray.serve.llm import build_llm_deployment
    from ray.serve.llm.ingress import make_fastapi_ingress

    from serving.gateway.ingress import Dsv4Ingress
    from serving.gateway.stack import wrap_app
    from serving.ray_private import openai_ingress_app, to_model_metadata

    app = openai_ingress_app()
    wrap_app(app, models=[config.model_id], options=gateway)
    ingress_cls = make_fastapi_ingress(Dsv4Ingress, app=app)
    options = Dsv4Ingress.get_deployment_options(llm_configs=[config])
    options["name"] = INGRESS_NAME
    options["max_replicas_per_node"] = 1  # one gateway metrics port per node
    return (
        serve.deployment(ingress_cls)
        .options(**options)
        .bind(
            llm_deployments={config.model_id: build_llm_deployment(config)},
            model_cards={config.model_id: to_model_metadata(config.model_id, config)},
            gateway=gateway.model_dump(),
        )
    )
