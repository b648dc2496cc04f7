"""Finding 6: no permanently down scrape targets (kube-prometheus-stack's TargetDown).

Every preset is rendered with the PodMonitor and with the ServiceMonitor; the pods of a
cluster in several states (all replicas serving, one still loading, none up yet, workers
waiting in their init containers, a pod whose replica Serve scaled away) are built from the
rendered templates with what each one serves in the direct layout (tests/support/chart_layout.py,
from Ray's sources); every target the monitors produce (tests/support/chart_scrape.py, the
Prometheus Operator's semantics) must be a (pod, port) that serves /metrics then.
"""

from pathlib import Path

import pytest

from serving.chart.presets_table import presets_table
from tests.support.chart_layout import (
    IDLE,
    LOADING,
    METRICS,
    PENDING,
    SERVING,
    cluster_pods,
    truth,
)
from tests.support.chart_render import MONITORING_APIS, by_kind, notes, render
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
