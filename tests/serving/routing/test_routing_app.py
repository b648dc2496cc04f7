"""``serving.routing: prefix`` as Ray builds and reads it, without a cluster: the app our
builder returns goes through Ray Serve's own ``build_app`` (what ``serve run`` and
KubeRay's Serve config do first), and the environment the preset sets is what Ray's
constants read at import."""

import json
import subprocess
import sys

import pytest

from serving.config.preset import load_preset, parse_set
from serving.config.proxy import HAPROXY, environment, prefix_routing_environment
from tests.support.paths import ROOT

BUILD = """
import json, sys
from ray.serve._private.build_app import build_app
from ray.serve.request_router import RequestRouter
from serving.app import build

def one(sets):
    app = build({"preset": "h200-flash-mtp", "set": sets})
    try:
        built = build_app(app, name="dsv4")
    except Exception as exc:
        return {"error": str(exc)}
    router = built.ingress_request_router_deployment
    config = built.deployments[0]._deployment_config.request_router_config
    cls = config.get_request_router_class()
    return {
        "deployments": [d.name for d in built.deployments],
        "router": router and {"name": router.name, "replicas": router.num_replicas,
                              "class": router.func_or_class.__name__},
        "request_router": f"{cls.__module__}.{cls.__name__}",
        "is_request_router": issubclass(cls, RequestRouter),
        "kwargs": config.request_router_kwargs,
    }

print(json.dumps([one(sets) for sets in json.loads(sys.argv[1])]))
"""


def build(env: dict[str, str], *set_lists: list[str]) -> list[dict]:
    """Each list of `--set` assignments built in one process with ``env``."""
    out = subprocess.run(
        [sys.executable, "-c", BUILD, json.dumps(set_lists)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def haproxy_env() -> dict[str, str]:
    preset = load_preset("h200-flash-mtp", [parse_set("serving.routing=prefix")])
    return environment(HAPROXY, preset.serving.prefix_routing())


@pytest.fixture(scope="module")
def with_haproxy(haproxy_env) -> list[dict]:
    return build(haproxy_env, ["serving.routing=prefix", "serving.prefix.router_replicas=3"], [])


def test_prefix_app_builds_with_ray_s_ingress_router_and_our_request_router(with_haproxy):
    built = with_haproxy[0]
    assert built["deployments"] == ["Dsv4Server"]
    assert built["router"] == {"name": "Dsv4Router", "replicas": 3, "class": "LLMRouter"}
    assert built["request_router"] == "serving.routing.router.PrefixAffinityRouter"
    assert built["is_request_router"]
    assert built["kwargs"] == {"key_chars": 1024, "balance_factor": 1.2, "load_ttl_s": 0.05}


def test_default_routing_adds_no_router_hop(with_haproxy):
    built = with_haproxy[1]
    assert built["router"] is None
    assert built["request_router"].endswith("PowerOfTwoChoicesRequestRouter")


def test_ray_refuses_the_router_without_haproxy():
    (built,) = build(environment("python"), ["serving.routing=prefix"])
    assert "requires HAProxy" in built["error"]


def test_ray_reads_the_prefix_environment_at_import():
    prefix = load_preset("cpu-tiny", [parse_set("serving.prefix.body_limit_bytes=262144")])
    env = prefix_routing_environment(prefix.serving.prefix)
    code = (
        "import json; from ray.serve._private import constants as c; print(json.dumps("
        "[c.RAY_SERVE_INGRESS_REQUEST_ROUTER_FORWARD_BODY, "
        "c.RAY_SERVE_HAPROXY_INGRESS_REQUEST_ROUTER_BUFSIZE]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert json.loads(out.stdout) == [True, 262144], out.stderr[-2000:]


@pytest.mark.parametrize(
    "sets,problem",
    [
        (["serving.routing=prefix", "serving.proxy=python"], "needs path 'direct' and the HAProxy"),
        (["serving.routing=prefix", "serving.path=ingress"], "needs path 'direct' and the HAProxy"),
        (["serving.routing=sticky"], "serving.routing"),
        (["serving.prefix.balance_factor=0.5"], "serving.prefix.balance_factor"),
        (["serving.prefix.key_chars=4"], "serving.prefix.key_chars"),
        (["serving.prefix.body_limit_bytes=1000"], "serving.prefix.body_limit_bytes"),
    ],
)
def test_bad_routing_values_name_the_field(sets, problem):
    from serving.config.preset import PresetError

    with pytest.raises(PresetError, match=problem):
        load_preset("cpu-tiny", [parse_set(s) for s in sets])
