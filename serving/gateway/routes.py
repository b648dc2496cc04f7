"""The route table: every route the engine replica's app mounts, with its class. One
source of truth for who may call what (``auth``), what the served OpenAPI schema shows
a key (``schema_view``), which routes take the input checks and count against the
per-key limits (every inference route: ``input_middleware``, ``limits``) and the metrics'
route labels.

Classes:
- inference: inference keys and admin keys (anyone while auth is off);
- probe: open, no key (health checks);
- metrics: admin keys only on the API port (Prometheus scrapes the gateway's own
  metrics port and Ray's export port, where the NetworkPolicy limits who scrapes);
- control: admin keys only; off (404) while no admin key is configured. A control
  route whose engine feature the deployment does not enable (``needs``) is off too;
- off: mounted by vLLM but not served by this gateway (404 to every key).

A path that matches no entry is denied (404): a route a new vLLM mounts stays closed
until it is classified here (``tests/serving/gateway/test_gateway_routes.py`` fails when vLLM
mounts one the table lacks). ``python -m serving.gateway.routes`` builds vLLM's app
without an engine and prints what it mounts against this table.

Read in vLLM 0.32 (``vllm/entrypoints/launchers/api_server/routers.py``,
``launchers/app.py``) and Ray 2.60 (``ray/llm/_internal/serve/core/server/llm_server.py``,
``core/ingress/ingress.py``, ``ray/serve/_private/replica.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import Any

from starlette.routing import compile_path


class Kind(StrEnum):
    INFERENCE = "inference"
    PROBE = "probe"
    METRICS = "metrics"
    CONTROL = "control"
    OFF = "off"


@dataclass(frozen=True)
class Route:
    path: str  # as the app mounts it (Starlette path syntax)
    methods: frozenset[str]
    kind: Kind
    mounted: str  # when it is mounted
    source: str  # the file that mounts it
    needs: str | None = None  # engine argument without which the route is off
    prefix: bool = False  # a Mount: the path and everything below it
    why: str = ""  # for off and control routes
    since: str = ""  # the first supported vLLM that mounts it ("": all of them)

    @cached_property
    def regex(self) -> re.Pattern[str]:
        if self.prefix:
            return re.compile("^" + re.escape(self.path) + ".*$")
        return compile_path(self.path)[0]

    @property
    def label(self) -> str:
        """The path template without converters (``/v1/models/{model}``)."""
        return re.sub(r"\{(\w+):\w+\}", r"{\1}", self.path)


def _routes(source: str, mounted: str, *rows: tuple[Any, ...], **common: Any) -> list[Route]:
    """Rows of (path, methods, kind[, extra fields]) mounted by one file under one setting."""
    out = []
    for path, methods, kind, *extra in rows:
        fields = {**common, **(extra[0] if extra else {})}
        out.append(Route(path, frozenset(methods.split()), kind, mounted, source, **fields))
    return out


INF, PRB, MET, CTL, OFF = Kind.INFERENCE, Kind.PROBE, Kind.METRICS, Kind.CONTROL, Kind.OFF
ALWAYS = "always (task generate)"
DEV = "VLLM_SERVER_DEV_MODE=1"
LORA = "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1"
SERVE = "vllm/entrypoints/serve/"
OPENAI = "vllm/entrypoints/openai/"
INGRESS = "ray/llm/_internal/serve/core/ingress/ingress.py"
DOCS = {"why": "browser docs: the served schema is /openapi.json, with a key"}
STATE = {"why": "changes engine state"}
NOT_OURS = {"why": "not part of the API this deployment serves"}
SCALE_OUT = {"why": "scale-out serving (render, tokens in and out) is not fronted here"}

ROUTES: tuple[Route, ...] = (
    *_routes(
        "fastapi (launchers/app.py)",
        "unless disable_fastapi_docs (docs and redoc: unless enable_offline_docs)",
        ("/openapi.json", "GET HEAD", INF),
        ("/docs", "GET HEAD", OFF, DOCS),
        ("/docs/oauth2-redirect", "GET HEAD", OFF, DOCS),
        ("/redoc", "GET HEAD", OFF, DOCS),
    ),
    *_routes(
        SERVE + "instrumentator/offline_docs.py",
        "enable_offline_docs",
        ("/static", "GET HEAD", OFF, {**DOCS, "prefix": True}),
    ),
    *_routes(
        SERVE + "instrumentator/",
        ALWAYS,
        ("/health", "GET", PRB),
        ("/load", "GET", CTL, {"why": "the replica's load, for operators"}),
        ("/version", "GET", CTL, {"why": "the engine's version, for operators"}),
        ("/kv_event_sources", "GET", CTL, {"why": "the engine's KV-event publishers"}),
        ("/metrics", "GET HEAD", MET, {"prefix": True}),
    ),
    *_routes(
        SERVE + "tokenize/api_router.py",
        ALWAYS,
        ("/tokenize", "POST", INF),
        ("/detokenize", "POST", INF),
    ),
    *_routes(
        SERVE + "tokenize/api_router.py",
        "enable_tokenizer_info_endpoint",
        ("/tokenizer_info", "GET", INF),
    ),
    *_routes(OPENAI + "models/api_router.py", ALWAYS, ("/v1/models", "GET", INF)),
    *_routes(
        "ray/llm/_internal/serve/core/server/llm_server.py",
        "Ray Serve LLM (LLMServer; OpenAiIngress on serving.path ingress)",
        ("/v1/models/{model:path}", "GET", INF),
    ),
    *_routes(OPENAI + "completion/api_router.py", ALWAYS, ("/v1/completions", "POST", INF)),
    *_routes(
        OPENAI + "chat_completion/api_router.py",
        ALWAYS,
        ("/v1/chat/completions", "POST", INF),
        (
            "/v1/chat/completions/batch",
            "POST",
            OFF,
            {"why": "many conversations in one request, past the per-request checks"},
        ),
    ),
    *_routes(
        OPENAI + "responses/api_router.py",
        ALWAYS,
        ("/v1/responses", "POST", INF),
        ("/v1/responses/{response_id}", "GET", INF),
        ("/v1/responses/{response_id}/cancel", "POST", INF),
    ),
    *_routes(
        "vllm/entrypoints/anthropic/api_router.py",
        ALWAYS,
        ("/v1/messages", "POST", INF),
        ("/v1/messages/count_tokens", "POST", INF),
    ),
    *_routes(
        "vllm/entrypoints/generate/",
        ALWAYS,
        ("/v1/systemone", "POST", OFF, NOT_OURS),
        ("/generative_scoring", "POST", OFF, NOT_OURS),
    ),
    *_routes(
        "vllm/entrypoints/cohere/api_router.py",
        "VLLM_ENABLE_COHERE_API=1 with the cohere SDK installed",
        ("/cohere/v2/chat", "POST", OFF, NOT_OURS),
    ),
    *_routes(
        SERVE + "sagemaker/api_router.py",
        ALWAYS,
        ("/ping", "GET POST", OFF, {"why": "SageMaker's probe: /health is this one's"}),
        ("/invocations", "POST", OFF, {"why": "sends any body to any handler, past the checks"}),
    ),
    *_routes(
        "model_hosting_container_standards (SageMaker bootstrap)",
        LORA,
        ("/adapters", "POST", CTL, STATE),
        ("/adapters/{adapter_name}", "DELETE", CTL, STATE),
    ),
    *_routes(
        SERVE + "elastic_ep/api_router.py",
        ALWAYS,
        ("/scale_elastic_ep", "POST", CTL, {"why": "rescales the engine"}),
        ("/is_scaling_elastic_ep", "POST", CTL, {"why": "elastic EP state"}),
        needs="enable_elastic_ep",
    ),
    *_routes(
        SERVE + "lora/api_router.py",
        LORA,
        ("/v1/load_lora_adapter", "POST", CTL, STATE),
        ("/v1/unload_lora_adapter", "POST", CTL, STATE),
    ),
    *_routes(
        SERVE + "profile/api_router.py",
        "profiler_config.profiler set",
        ("/start_profile", "POST", CTL, STATE),
        ("/stop_profile", "POST", CTL, STATE),
    ),
    *_routes(
        SERVE + "fault_tolerance/api_router.py",
        "enable_fault_tolerance",
        ("/fault_tolerance/apply", "POST", CTL, STATE),
        ("/fault_tolerance/status", "GET", CTL, {"why": "engine state"}),
    ),
    *_routes(
        SERVE + "fault_tolerance/api_router.py (moved under /v1)",
        "enable_fault_tolerance",
        ("/v1/fault_tolerance/apply", "POST", CTL, STATE),
        ("/v1/fault_tolerance/status", "GET", CTL, {"why": "engine state"}),
        since="0.34.0",
    ),
    *_routes(
        SERVE + "checkpoint/api_router.py",
        "enable_sleep_mode (launchers/api_server/routers.py)",
        ("/checkpoint/prepare", "POST", CTL, STATE),
        ("/checkpoint/restore", "POST", CTL, STATE),
        ("/checkpoint/status", "GET", CTL, {"why": "engine state"}),
        needs="enable_sleep_mode",
        since="0.34.0",
    ),
    *_routes(
        OPENAI + "decisions/api_router.py",
        ALWAYS,
        ("/v1/decisions", "POST", OFF, {"why": "a decisions API DSV4 has no handler for"}),
        since="0.34.0",
    ),
    *_routes(
        SERVE + "dev/",
        DEV,
        ("/reset_prefix_cache", "POST", CTL, STATE),
        ("/reset_mm_cache", "POST", CTL, STATE),
        ("/reset_encoder_cache", "POST", CTL, STATE),
        ("/collective_rpc", "POST", CTL, {"why": "runs any method on the workers"}),
        ("/server_info", "GET", CTL, {"why": "the engine's configuration"}),
        ("/sleep", "POST", CTL, STATE),
        ("/release_kv_cache_memory", "POST", CTL, STATE),
        ("/wake_up", "POST", CTL, STATE),
        ("/is_sleeping", "GET", CTL, STATE),
    ),
    *_routes(
        "vllm/entrypoints/rl/online/api_router.py",
        DEV,
        ("/pause", "POST", CTL),
        ("/resume", "POST", CTL),
        ("/abort_requests", "POST", CTL),
        ("/is_paused", "GET", CTL),
        ("/init_weight_transfer_engine", "POST", CTL),
        ("/shutdown_weight_transfer_engine", "POST", CTL),
        ("/start_weight_update", "POST", CTL),
        ("/start_draft_weight_update", "POST", CTL),
        ("/update_weights", "POST", CTL),
        ("/finish_weight_update", "POST", CTL),
        ("/update_weight_version", "POST", CTL),
        ("/weight_info", "GET", CTL),
        ("/weight_checker", "POST", CTL),
        ("/get_world_size", "GET", CTL),
        why="RL weight updates: changes engine state",
    ),
    *_routes(
        "vllm/entrypoints/scale_out/factories.py",
        ALWAYS + ": 403 stubs unless enable_scale_out",
        ("/v1/chat/completions/render", "POST", OFF, SCALE_OUT),
        ("/v1/messages/render", "POST", OFF, SCALE_OUT),
        ("/v1/completions/render", "POST", OFF, SCALE_OUT),
        ("/v1/responses/render", "POST", OFF, SCALE_OUT),
        ("/v1/chat/completions/derender", "POST", OFF, SCALE_OUT),
        ("/v1/completions/derender", "POST", OFF, SCALE_OUT),
        ("/inference/v1/generate", "POST", OFF, SCALE_OUT),
        (
            "/inference/v1/abort_requests",
            "POST",
            CTL,
            {"needs": "enable_scale_out", "why": "aborts any request by id"},
        ),
    ),
    *_routes(
        INGRESS,
        "serving.path ingress (the earlier layout, Ray Serve LLM's OpenAiIngress)",
        ("/v1/embeddings", "POST", OFF, {"why": "DSV4 is no embedding model"}),
        ("/v1/score", "POST", OFF, {"why": "DSV4 is no scoring model"}),
        ("/v1/audio/transcriptions", "POST", OFF, {"why": "DSV4 takes no audio"}),
    ),
    *_routes(
        "ray/serve/_private/replica.py",
        "Ray Serve: answered by the replica and the proxies before the app",
        ("/-/healthz", "GET", PRB),
        ("/-/routes", "GET", PRB),
    ),
)


class RouteTable:
    def __init__(self, routes: tuple[Route, ...] = ROUTES) -> None:
        paths = [r.path for r in routes]
        dupes = {p for p in paths if paths.count(p) > 1}
        if dupes:
            raise ValueError(f"route table lists {sorted(dupes)} twice")
        # Plain paths first, then templates, then mounts: the most specific match wins.
        order = {False: 0, True: 1}
        self.routes = sorted(routes, key=lambda r: (order[r.prefix], "{" in r.path))
        self._exact = {r.path: r for r in routes if not r.prefix and "{" not in r.path}

    def match(self, path: str) -> Route | None:
        if path in self._exact:
            return self._exact[path]
        return next((r for r in self.routes if r.regex.match(path)), None)

    def unclassified(self, app_routes: list[Any]) -> list[tuple[str, list[str]]]:
        """(path, methods) the app mounts that the table does not classify, or
        classifies with fewer methods."""
        return self.unclassified_paths(mounted(app_routes))

    def unclassified_paths(self, paths: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
        """The same for (path, methods) pairs, as ``mounted`` gives them."""
        missing = []
        for path, methods in paths:
            entry = self._exact.get(path) or next((r for r in self.routes if r.path == path), None)
            if entry is None or not set(methods) <= entry.methods:
                missing.append((path, methods))
        return missing


TABLE = RouteTable()


def mounted(app_routes: list[Any]) -> list[tuple[str, list[str]]]:
    """(path, methods) of each HTTP route or mount of a Starlette app (``app.routes``)."""
    out = []
    for route in app_routes:
        path = getattr(route, "path", None)
        if path is None:  # e.g. a lazily included router: not classifiable, so listed
            out.append((f"<{type(route).__name__} without a path>", []))
            continue
        methods = sorted(getattr(route, "methods", None) or ("GET", "HEAD"))
        if type(route).__name__ in ("WebSocketRoute", "APIWebSocketRoute"):
            methods = ["WEBSOCKET"]
        out.append((path, methods))
    return out


def enabled_features(engine_kwargs: dict[str, Any]) -> frozenset[str]:
    """Engine arguments that are on: what ``Route.needs`` is checked against."""
    return frozenset(name for name, value in engine_kwargs.items() if value)


# -- vLLM's app without an engine (tests, and `python -m serving.gateway.routes`) -------


def build_vllm_app(engine_kwargs: dict[str, Any], profiler: bool = False) -> Any:
    """vLLM's OpenAI app as Ray Serve LLM builds it in the replica
    (``VLLMEngine.build_asgi_app``: frontend and engine arguments flattened into one
    namespace, task ``generate``), without starting an engine. vLLM's environment
    switches (``VLLM_SERVER_DEV_MODE``, ...) are read from this process's environment."""
    import argparse
    import dataclasses

    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.app import build_app

    from serving.compat.vllm_cli_args import cli_args

    FrontendArgs = cli_args().FrontendArgs  # noqa: N806 - vLLM's class

    frontend_names = {f.name for f in dataclasses.fields(FrontendArgs)}
    frontend = FrontendArgs(**{k: v for k, v in engine_kwargs.items() if k in frontend_names})
    engine_kw = {k: v for k, v in engine_kwargs.items() if k not in frontend_names}
    engine = AsyncEngineArgs(**{"model": "unused", **engine_kw})
    args = argparse.Namespace(**(vars(frontend) | vars(engine)))
    if profiler:
        from vllm.config import ProfilerConfig

        args.profiler_config = ProfilerConfig(profiler="torch", torch_profiler_dir="/tmp")
    model = _GenerationModelConfig(bool(engine_kwargs.get("enable_sleep_mode")))
    return build_app(args, supported_tasks=("generate",), model_config=model)


@dataclass(frozen=True)
class _GenerationModelConfig:
    """What ``build_app`` reads of the engine's model config, which Ray Serve LLM passes
    (``engines/vllm/vllm_engine.py``): ``enable_sleep_mode`` (vLLM 0.34 mounts
    ``/checkpoint/*`` with it) and the pooling task (a generation model has none)."""

    enable_sleep_mode: bool

    def get_pooling_task(self, supported_tasks: Any) -> None:
        return None


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    from serving.config.preset import load_preset

    parser = argparse.ArgumentParser(
        prog="python -m serving.gateway.routes",
        description="vLLM's app for a preset (no engine) against the route table",
    )
    parser.add_argument("preset", nargs="?", default="cpu-tiny")
    parser.add_argument("--set", action="append", default=[], metavar="ENGINE_ARG=VALUE")
    parser.add_argument("--profiler", action="store_true", help="with a torch profiler config")
    parser.add_argument("--json", action="store_true", help="print the mounted routes as JSON")
    args = parser.parse_args(argv)
    kwargs = load_preset(args.preset).engine_kwargs()
    for item in args.set:
        name, _, value = item.partition("=")
        kwargs[name] = json.loads(value)
    app = build_vllm_app(kwargs, profiler=args.profiler)
    routes = mounted(app.routes)
    if args.json:
        print(json.dumps(routes))
        return 0
    missing = TABLE.unclassified(app.routes)
    for path, methods in routes:
        entry = TABLE.match(path)
        kind = entry.kind.value if entry and (path, methods) not in missing else "UNCLASSIFIED"
        print(f"{kind:13} {' '.join(methods):10} {path}")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
