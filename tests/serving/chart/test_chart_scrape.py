"""Finding 6: no permanently down scrape targets (kube-prometheus-stack's TargetDown).

Every preset is rendered with the PodMonitor and with the ServiceMonitor; the pods of a
cluster in several states (all replicas serving, one still loading, none up yet, workers
waiting in their init containers, a pod whose replica Serve scaled away) are built from the
rendered templates with what each one serves in the direct layout (tests/support/chart_layout.py,
from Ray's sources); every target the monitors produce (tests/support/chart_scrape.py, the
Prometheus Operator's semantics) must be a (pod, port) that serves /metrics then. In every
layout (direct, ingress, disaggregated) the NOTES' "Scraped:" line names the ports and pods
the rendered monitors select.
"""

import re
from pathlib import Path

import pytest

from serving.chart.presets_table import presets_table
from tests.support.chart_layout import (
    IDLE,
    LOADING,
    METRICS,
    PENDING,
    SERVING,
    Pod,
    cluster_pods,
    truth,
)
from tests.support.chart_render import MONITORING_APIS, by_kind, notes, pod_templates, render
from tests.support.chart_scrape import all_targets

PRESETS = presets_table()
WITH_BOTH = {"monitoring": {"serviceMonitor": {"enabled": True}}}
SCENARIOS = {
    "steady": [SERVING, SERVING],
    "scale-up": [SERVING, LOADING],
    "first start": [LOADING, LOADING],
    "weights download": [PENDING, PENDING],
    "scaled down": [SERVING, IDLE],
}


def _render(tmp_path: Path, preset: str, extra: dict | None = None) -> list[dict]:
    row = PRESETS[preset]
    values = {
        "preset": preset,
        "platform": row["platform"],
        "workers": {"minReplicas": 2, "maxReplicas": 2},
        **WITH_BOTH,
        **(extra or {}),
    }
    return render(tmp_path, values)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, list[dict]]:
    return {p: _render(tmp_path_factory.mktemp(p), p) for p in sorted(PRESETS)}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_scrape_target_serves_its_port(preset: str, scenario: str, rendered):
    objects = rendered[preset]
    assert {"PodMonitor", "ServiceMonitor"} <= {o["kind"] for o in objects}
    hosts = PRESETS[preset]["nodesPerReplica"]
    # Which host of a multi-host replica gets the replica actor is Ray's choice: try each.
    for actor_host in range(hosts):
        pods = cluster_pods(objects, SCENARIOS[scenario], actor_host)
        targets = all_targets(objects, pods)
        serves = {p.name: p.serves for p in pods}
        down = [t for t in targets if (t.path, t.port) not in serves[t.pod]]
        assert not down, f"{scenario}: targets that do not answer: {down}"


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_steady_state_scrapes_every_metrics_port_once_per_monitor(preset: str, rendered):
    objects = rendered[preset]
    t = truth(objects)
    pods = cluster_pods(objects, [SERVING, SERVING])
    targets = all_targets(objects, pods)
    multi_host = PRESETS[preset]["nodesPerReplica"] > 1
    for kind in ("PodMonitor", "ServiceMonitor"):
        (monitor,) = by_kind(objects, kind)
        name = f"{kind}/{monitor['metadata']['name']}"
        per_monitor = [x for x in targets if x.monitor == name]
        mine = {(x.pod, x.port) for x in per_monitor}
        assert len(per_monitor) == len(mine), f"{kind}: a target twice"
        ray_ports = {(p.name, t.ray_metrics[p.labels["app.kubernetes.io/component"]]) for p in pods}
        gateways = {(p.name, t.gateway) for p in pods if (METRICS, t.gateway) in p.serves}
        assert ray_ports <= mine, f"{kind}: Ray's metrics port missed on {ray_ports - mine}"
        assert len(gateways) == 2, "each replica serves its gateway port"
        if multi_host:
            # Which host serves it is Ray's choice: not scraped (the NOTES say so).
            assert not gateways & mine
        else:
            assert gateways <= mine, f"{kind}: gateway port missed on {gateways - mine}"
        assert mine <= ray_ports | gateways


def test_both_monitors_scrape_the_same_targets(rendered):
    objects = rendered["h200-flash-mtp"]
    pods = cluster_pods(objects, [SERVING, LOADING, IDLE])
    targets = all_targets(objects, pods)
    by_monitor: dict[str, set] = {}
    for kind in ("PodMonitor", "ServiceMonitor"):
        (monitor,) = by_kind(objects, kind)
        name = f"{kind}/{monitor['metadata']['name']}"
        by_monitor[kind] = {(x.pod, x.port) for x in targets if x.monitor == name}
    assert by_monitor["PodMonitor"] == by_monitor["ServiceMonitor"]
    gateway = truth(objects).gateway
    assert {pod for pod, port in by_monitor["PodMonitor"] if port == gateway} == {
        "h200-workers-0-0"
    }, "only the worker whose replica serves"


def test_head_serves_no_gateway_port_and_declares_none(rendered):
    objects = rendered["h200-flash-mtp"]
    (head, *_) = cluster_pods(objects, [SERVING])
    assert head.is_head and "gw-metrics" not in head.ports
    assert (METRICS, truth(objects).gateway) not in head.serves


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_notes_say_what_is_scraped(preset: str, tmp_path: Path):
    row = PRESETS[preset]
    values = {"preset": preset, "platform": row["platform"]}
    text = notes(tmp_path, values, MONITORING_APIS)
    if row["nodesPerReplica"] > 1:
        assert "The gateway port 9464 is NOT scraped" in text
    else:
        assert "the gateway port 9464 on Ready worker pods" in text
    assert "Scraped:" not in notes(tmp_path, values, apis=[])


# --- NOTES' "Scraped:" line against the rendered monitors, in every layout ---------------

RAY_PORT_SAID = re.compile(r"Scraped: Ray's metrics port (\d+) on every Ray pod")
GATEWAY_SAID = re.compile(r"the gateway port (\d+) on (?:the )?Ready (head pod|worker pods)\b")
GATEWAY_UNSCRAPED = re.compile(r"The gateway port (\d+) is NOT scraped")
PD = {"disaggregation": {"enabled": True}}
INGRESS = {"serve": {"path": "ingress"}}
# case: (preset, values, monitoring ports, the pods whose gateway port is scraped). The
# ingress layout's one gateway replica (Dsv4Ingress) runs on the head, whatever the preset.
SCRAPED_NOTES_CASES = {
    "direct": ("h200-flash-mtp", {}, {}, {"worker"}),
    "direct, multi-host": ("mi300x-pro-mtp", {}, {}, set()),
    "ingress": ("h200-flash-mtp", INGRESS, {}, {"head"}),
    "ingress, multi-host": ("mi300x-pro-mtp", INGRESS, {}, {"head"}),
    "disaggregated": ("h200-flash-mtp", PD, {}, {"head"}),
    "disaggregated, multi-host": ("mi300x-pro-mtp", PD, {}, {"head"}),
    "disaggregated, mooncake, own ports": (
        "h200-flash-mtp",
        {"disaggregation": {"enabled": True, "connector": "mooncake"}},
        {"rayMetricsPort": 9100, "gatewayMetricsPort": 9999},
        {"head"},
    ),
}


def _running_pods(objects: list[dict], ready: bool) -> list[Pod]:
    """One Running pod per pod template the release renders, every one Ready or none."""
    pods = []
    for role, template in pod_templates(objects).items():
        ports = {
            p["name"]: p["containerPort"]
            for c in template["spec"]["containers"]
            for p in c.get("ports") or []
            if p.get("name")
        }
        pods.append(Pod(role, dict(template["metadata"]["labels"]), ports, None, ready=ready))
    return pods


@pytest.mark.parametrize("case", sorted(SCRAPED_NOTES_CASES))
def test_notes_name_the_ports_and_pods_the_monitors_scrape(case: str, tmp_path: Path):
    preset, extra, ports, expected = SCRAPED_NOTES_CASES[case]
    monitoring = {"serviceMonitor": {"enabled": True}, **ports}
    values = {"preset": preset, "platform": PRESETS[preset]["platform"], **extra}
    values["monitoring"] = monitoring
    objects = render(tmp_path, values)
    text = notes(tmp_path, values)
    templates = pod_templates(objects)
    ray_roles = {
        role
        for role, t in templates.items()
        if t["metadata"]["labels"].get("app.kubernetes.io/component") in ("ray-head", "ray-worker")
    }
    assert "head" in ray_roles and len(ray_roles) >= 2
    # What the NOTES say: Ray's port on every Ray pod, the gateway port on the head, on the
    # worker pods or nowhere, and only while the pod is Ready.
    (ray_port,) = [int(p) for p in RAY_PORT_SAID.findall(text)]
    said, unscraped = GATEWAY_SAID.findall(text), GATEWAY_UNSCRAPED.findall(text)
    assert len(said) + len(unscraped) == 1, text
    if said:
        ((port, where),) = said
        gateway_roles = {"head"} if where == "head pod" else ray_roles - {"head"}
    else:
        (port,) = unscraped
        gateway_roles = set()
    gateway_port = int(port)
    assert gateway_roles == expected, text
    ray_targets = {(role, ray_port) for role in ray_roles}
    # What each monitor selects, pod by pod.
    for kind in ("PodMonitor", "ServiceMonitor"):
        (monitor,) = by_kind(objects, kind)
        name = f"{kind}/{monitor['metadata']['name']}"
        for ready in (True, False):
            targets = all_targets(objects, _running_pods(objects, ready))
            selected = {(t.pod, t.port) for t in targets if t.monitor == name}
            gateway_targets = {(role, gateway_port) for role in gateway_roles} if ready else set()
            assert selected == ray_targets | gateway_targets, f"{kind}, Ready={ready}"
    # The port scraped there is the one the gateway binds there.
    for role in gateway_roles:
        (container,) = templates[role]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert int(env["DSV4_GATEWAY_METRICS_PORT"]) == gateway_port, role
