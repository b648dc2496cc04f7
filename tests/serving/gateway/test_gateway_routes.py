"""The route table against the routes vLLM's own code mounts: vLLM's OpenAI app built
by its ``build_app`` from our preset's engine arguments (as Ray Serve LLM builds it in
the replica, no engine), with the defaults and with every setting that mounts more
routes turned on. A route vLLM mounts that the table does not classify fails here, so
a vLLM upgrade cannot open one silently (the gateway denies it meanwhile)."""

import pytest
from packaging.version import Version

from model_overrides.compat import vllm_matrix
from serving.gateway.routes import ROUTES, TABLE, Kind, mounted
from tests.support.route_builds import default_and_every_switch
from tests.support.server_process import PYTHON

# Entries no vLLM build here can mount: the cohere SDK is not installed (vLLM skips the
# route without it); Ray's own routes are checked below (the earlier layout's ingress)
# and on the running app (tests/serving/test_serving_app.py).
NOT_BUILT_HERE = {"/cohere/v2/chat"}
RAY_OWNED = {r.path for r in ROUTES if r.source.startswith("ray/")}
# Routes a later vLLM than the project's mounts: the version matrix builds those.
PROJECT_VLLM = next(v.vllm for v in vllm_matrix.SUPPORTED.values() if not v.side)
LATER = {r.path for r in ROUTES if r.since and Version(r.since) > Version(PROJECT_VLLM)}


@pytest.fixture(scope="module")
def builds() -> dict[str, list[tuple[str, list[str]]]]:
    return default_and_every_switch(PYTHON)


@pytest.mark.parametrize("build", ["default", "every-switch"])
def test_every_route_vllm_mounts_is_classified(builds, build: str):
    routes = builds[build]
    assert len(routes) > 30, routes
    unclassified = TABLE.unclassified_paths(routes)
    assert unclassified == [], f"classify these in serving/gateway/routes.py: {unclassified}"


def test_every_table_entry_is_mounted_by_some_build(builds):
    seen = {path for routes in builds.values() for path, _ in routes}
    stale = {r.path for r in ROUTES} - seen - NOT_BUILT_HERE - RAY_OWNED - LATER
    assert stale == set(), f"the table lists routes vLLM no longer mounts: {stale}"


def test_the_earlier_layouts_ingress_routes_are_classified():
    """serving.path ingress: Ray Serve LLM's OpenAiIngress app, with its routes as
    make_fastapi_ingress adds them (no Ray started)."""
    from ray.serve.llm.ingress import make_fastapi_ingress

    from serving.compat.ray_private import openai_ingress_app
    from serving.gateway.ingress import Dsv4Ingress

    app = openai_ingress_app()
    make_fastapi_ingress(Dsv4Ingress, app=app)
    paths = {path for path, _ in mounted(app.routes)}
    assert {"/v1/completions", "/v1/models/{model:path}", "/v1/embeddings"} <= paths
    assert TABLE.unclassified(app.routes) == []


def test_the_replica_serves_what_the_issue_found_as_control(builds):
    default = dict(builds["default"])
    for path in ("/scale_elastic_ep", "/is_scaling_elastic_ep", "/kv_event_sources", "/load"):
        assert path in default and TABLE.match(path).kind is Kind.CONTROL
    assert TABLE.match("/scale_elastic_ep").needs == "enable_elastic_ep"
    # Development routes appear only with VLLM_SERVER_DEV_MODE, all control.
    dev = dict(builds["every-switch"]).keys() - default.keys()
    assert {"/collective_rpc", "/sleep", "/reset_prefix_cache", "/update_weights"} <= dev
    assert {TABLE.match(p).kind for p in dev} <= {Kind.CONTROL, Kind.INFERENCE, Kind.OFF}


@pytest.mark.parametrize(
    "path,kind",
    [
        ("/v1/completions", Kind.INFERENCE),
        ("/v1/models/dsv4-golden", Kind.INFERENCE),
        ("/v1/models/org/model", Kind.INFERENCE),
        ("/v1/responses/resp_1/cancel", Kind.INFERENCE),
        ("/health", Kind.PROBE),
        ("/-/healthz", Kind.PROBE),
        ("/metrics", Kind.METRICS),
        ("/metrics/", Kind.METRICS),
        ("/static/swagger-ui.css", Kind.OFF),
        ("/v1/chat/completions/batch", Kind.OFF),
        ("/adapters/my-lora", Kind.CONTROL),
    ],
)
def test_paths_match_their_entry(path: str, kind: Kind):
    assert TABLE.match(path).kind is kind


@pytest.mark.parametrize("path", ["/v1/new_route", "/v2/completions", "/admin", "/v1/models"])
def test_unlisted_paths_match_nothing_or_only_themselves(path: str):
    route = TABLE.match(path)
    assert route is None or route.path == path


def test_mounted_routes_without_a_path_are_listed_not_skipped():
    class LazyRouter:  # what FastAPI >= 0.137 keeps in app.routes for included routers
        pass

    assert TABLE.unclassified([LazyRouter()]) == [("<LazyRouter without a path>", [])]


def test_every_inference_post_route_has_an_input_rule():
    """One input policy for every inference route that takes a body: the checks and the
    per-key limits apply to each (serving/gateway/input_policy.py)."""
    from serving.gateway.input_policy import RULES

    posts = {r.path for r in ROUTES if r.kind is Kind.INFERENCE and "POST" in r.methods}
    assert posts == set(RULES)
    generating = {path for path, rule in RULES.items() if rule.generates}
    assert generating == {
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/messages",
    }


def test_mounted_reads_methods_of_routes_and_mounts():
    from starlette.routing import Mount, Route

    async def endpoint(request):  # pragma: no cover - never called
        raise AssertionError

    routes = [Route("/x", endpoint, methods=["POST"]), Mount("/m", routes=[])]
    assert mounted(routes) == [("/x", ["POST"]), ("/m", ["GET", "HEAD"])]
