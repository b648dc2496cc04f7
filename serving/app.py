"""The one builder: ``serving.app:build(args)`` -> the Ray Serve application.

Used as is by ``dsv4-serve up`` (local Ray) and by Ray Serve config files
(``serve run``, KubeRay ``serveConfigV2``), whose ``args`` are ``BuildArgs``.
"""

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from serving.profile import Profile, ProfileError, load_profile, parse_set

INGRESS_NAME = "Dsv4Ingress"


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
    from ray import serve
    from ray.llm._internal.serve.core.configs.openai_api_models import to_model_metadata
    from ray.llm._internal.serve.core.ingress.ingress import init as ray_llm_fastapi_app
    from ray.serve.llm import LLMConfig, build_llm_deployment
    from ray.serve.llm.ingress import make_fastapi_ingress
    from starlette.exceptions import HTTPException

    from serving.gateway.auth import ApiKeyAuth
    from serving.gateway.errors import http_exception_as_openai
    from serving.gateway.ingress import Dsv4Ingress
    from serving.gateway.metrics import GatewayMetrics
    from serving.gateway.overload import OverloadResponses
    from serving.gateway.request_guard import RequestGuard
    from serving.llm_config import llm_config, resolve_model_source

    parsed, profile = resolve(args)
    source = resolve_model_source(profile)
    ensure_golden_model(profile, source)
    config = LLMConfig(**llm_config(profile, source))

    # Ray Serve LLM's FastAPI app (its error handling, request ids, metrics), with the
    # gateway around it, outermost first: metrics (see every request), auth, input
    # checks, overload answers (Retry-After, JSON body).
    app = ray_llm_fastapi_app()
    app.add_exception_handler(HTTPException, http_exception_as_openai)
    app.add_middleware(OverloadResponses)
    app.add_middleware(RequestGuard)
    app.add_middleware(ApiKeyAuth)
    app.add_middleware(GatewayMetrics, models=[config.model_id])
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
            metrics_port=parsed.gateway_metrics_port,
            metrics_host=parsed.gateway_metrics_host,
            thresholds={config.model_id: profile.monitoring.model_dump()},
        )
    )
