"""The scrape targets the chart's PodMonitor and ServiceMonitor give Prometheus (test
helper), as the Prometheus Operator writes the scrape configs and Prometheus' Kubernetes
service discovery fills them in:

- PodMonitor (prometheus-operator promcfg.go, generatePodMonitorConfig): role `pod` in the
  monitor's own namespace (no namespaceSelector); drop pods in phase Failed or Succeeded;
  keep pods matching spec.selector; `port: NAME` keeps the targets whose
  __meta_kubernetes_pod_container_port_name is NAME (Prometheus makes one target per
  declared container port); then the endpoint's relabelings.
- ServiceMonitor (generateServiceMonitorConfig): role `endpoints` (or endpointslice) in its
  namespace; keep Services matching spec.selector; `port: NAME` keeps the Service port of
  that name. A Service port lists every pod its selector matches that declares the port's
  targetPort (a pod without that named port is left out: the EndpointSlice controller's
  getEndpointPorts), Ready or not (not-ready addresses are discovered too); targets backed
  by a pod carry the pod's meta labels (phase, ready, labels).
- Relabelings: keep/drop on the source labels joined by `;` against the anchored regex;
  the others only rename labels and do not change the target set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tests.support.chart_layout import Pod
from tests.support.chart_render import by_kind
from tests.support.netpol_eval import selector_matches


@dataclass(frozen=True)
class Target:
    monitor: str  # kind/name
    pod: str
    port: int
    path: str


def _meta(pod: Pod, namespace: str) -> dict[str, str]:
    labels = {
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_pod_name": pod.name,
        "__meta_kubernetes_pod_phase": pod.phase,
        "__meta_kubernetes_pod_ready": "true" if pod.ready else "false",
    }
    for key, value in pod.labels.items():
        labels["__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)] = value
    return labels


def kept(relabelings: list[dict[str, Any]] | None, labels: dict[str, str]) -> bool:
    """Does a target survive these relabelings (keep/drop only change the set)?"""
    for rule in relabelings or []:
        action = rule.get("action", "replace")
        if action not in ("keep", "drop"):
            continue
        value = rule.get("separator", ";").join(labels.get(s, "") for s in rule["sourceLabels"])
        match = re.fullmatch(rule.get("regex", "(.*)"), value) is not None
        if (action == "keep") != match:
            return False
    return True


def pod_monitor_targets(monitor: dict, pods: list[Pod], namespace: str) -> list[Target]:
    spec = monitor["spec"]
    assert "namespaceSelector" not in spec, "modelled: the monitor's own namespace only"
    out = []
    for pod in pods:
        if pod.phase in ("Failed", "Succeeded"):
            continue
        if not selector_matches(spec["selector"], pod.labels):
            continue
        for ep in spec["podMetricsEndpoints"]:
            assert set(ep) <= {"port", "path", "interval", "relabelings"}, ep
            if ep["port"] not in pod.ports:
                continue
            meta = _meta(pod, namespace)
            meta["__meta_kubernetes_pod_container_port_name"] = ep["port"]
            if kept(ep.get("relabelings"), meta):
                out.append(
                    Target(
                        f"PodMonitor/{monitor['metadata']['name']}",
                        pod.name,
                        pod.ports[ep["port"]],
                        ep.get("path", "/metrics"),
                    )
                )
    return out


def service_monitor_targets(
    monitor: dict, objects: list[dict], pods: list[Pod], namespace: str
) -> list[Target]:
    spec = monitor["spec"]
    assert "namespaceSelector" not in spec, "modelled: the monitor's own namespace only"
    services = [
        s
        for s in by_kind(objects, "Service")
        if selector_matches(spec["selector"], s["metadata"].get("labels") or {})
    ]
    out = []
    for service in services:
        for ep in spec["endpoints"]:
            assert set(ep) <= {"port", "path", "interval", "relabelings"}, ep
            ports = [p for p in service["spec"]["ports"] if p.get("name") == ep["port"]]
            for sp in ports:
                for pod in pods:
                    if pod.phase in ("Failed", "Succeeded"):
                        continue
                    selector = service["spec"].get("selector") or {}
                    if not all(pod.labels.get(k) == v for k, v in selector.items()):
                        continue
                    number = pod.port(sp.get("targetPort", sp["port"]))
                    if number is None:
                        continue  # the pod does not declare the named port
                    if kept(ep.get("relabelings"), _meta(pod, namespace)):
                        out.append(
                            Target(
                                f"ServiceMonitor/{monitor['metadata']['name']}",
                                pod.name,
                                number,
                                ep.get("path", "/metrics"),
                            )
                        )
    return out


def all_targets(objects: list[dict], pods: list[Pod]) -> list[Target]:
    """Every target of every PodMonitor and ServiceMonitor the chart rendered."""
    out = []
    for monitor in by_kind(objects, "PodMonitor"):
        out += pod_monitor_targets(monitor, pods, monitor["metadata"]["namespace"])
    for monitor in by_kind(objects, "ServiceMonitor"):
        namespace = monitor["metadata"]["namespace"]
        out += service_monitor_targets(monitor, objects, pods, namespace)
    return out
