"""The flows a RayService needs, and the cluster they run in (test helper).

The table is what the chart's NetworkPolicies must allow (and a sample of what they must
not), each flow with the component source that makes it. The cluster is built from the
rendered chart (pod labels and container ports as the templates write them) plus the
pods other charts create: the KubeRay operator (labels of the kuberay-operator chart,
helm-chart/kuberay-operator/templates/deployment.yaml with its values.yaml defaults),
Prometheus, cluster DNS, and pods that must stay out.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.chart_layout import (
    DIRECT_INGRESS,
    FALLBACK_PROXY,
    HAPROXY_METRICS,
    HAPROXY_STATS,
)
from tests.support.chart_render import NAMESPACE, pod_templates
from tests.support.netpol_eval import Cluster, Endpoint, Port

OPERATOR_LABELS = {
    "app.kubernetes.io/name": "kuberay-operator",
    "app.kubernetes.io/instance": "kuberay-operator",
    "app.kubernetes.io/component": "kuberay-operator",
}
API_SERVER_IP = "192.168.10.5"
# Worker pod roles (tests/support/chart_render.py pod_templates): two pods of each.
WORKER_ROLES = ("worker", "prefill", "decode")
HUB_IP = "18.160.10.20"


@dataclass(frozen=True)
class Flow:
    source: str
    dest: str
    port: int
    why: str
    protocol: str = "TCP"


# KubeRay: ray-operator/controllers/ray/rayservice_controller.go, utils/util.go.
NEEDED = [
    Flow(
        "operator",
        "head",
        8265,
        "RayService controller pushes/polls the Serve config: "
        "FetchHeadServiceURL(..., DashboardPortName), dashboard HTTP client",
    ),
    Flow(
        "operator",
        "head",
        8000,
        "updateHeadPodServeLabel: CheckProxyActorHealth GETs /-/healthz on the head's serve port",
    ),
    Flow("tenant", "head", 8000, "clients -> the API (networkPolicy.apiFrom empty: anyone)"),
    Flow("tenant", "worker-0", 8000, "clients -> the API on a worker's Serve proxy"),
    Flow("helm-test", "head", 8000, "`helm test` sends an OpenAI request"),
    Flow("prometheus", "head", 8080, "Prometheus -> Ray metrics export port"),
    Flow("prometheus", "worker-1", 8080, "Prometheus -> Ray metrics export port"),
    Flow("prometheus", "worker-0", 9464, "Prometheus -> an engine replica's gateway port"),
    # Ray Serve with HAProxy (ray/serve/_private: haproxy.py, node_port_manager.py,
    # proxy_state.py): HAProxy on every proxy node forwards to (and health-checks) each
    # replica's own HTTP port, allocated from range(RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT,
    # ..._MAX_HTTP_PORT); a replica on HAProxy's own node is reached over localhost.
    *[
        Flow(src, dst, port, "HAProxy -> a replica's direct-ingress port")
        for src, dst in [("head", "worker-0"), ("worker-0", "worker-1"), ("worker-1", "worker-0")]
        for port in (DIRECT_INGRESS.start, DIRECT_INGRESS.stop - 1)
    ],
    Flow(
        "worker-0",
        "head",
        FALLBACK_PROXY,
        "HAProxy's backup server: Serve's fallback proxy on the head (no replica up)",
    ),
    Flow("worker-0", "head", 6379, "raylet -> GCS"),
    Flow("worker-0", "head", 8265, "workers' agents -> the dashboard head"),
    Flow("head", "worker-1", 10005, "object manager / worker ports (10002-19999)"),
    Flow("worker-0", "worker-1", 29500, "NCCL between hosts of a replica"),
    Flow("worker-1", "worker-0", 52365, "dashboard agents"),
    Flow("head", "kube-dns", 53, "DNS (UDP)", "UDP"),
    Flow("worker-0", "kube-dns", 53, "DNS (TCP fallback)", "TCP"),
]
DENIED = [
    Flow("tenant", "head", 8265, "the dashboard runs Ray jobs: only the operator"),
    Flow("same-ns-app", "head", 8265, "another app in the namespace is not the operator"),
    Flow("spoofed-operator", "head", 8265, "the operator's labels in another namespace: no"),
    Flow("same-ns-app", "head", 6379, "GCS only from the release's Ray pods"),
    Flow("tenant", "worker-0", 10005, "Ray's worker ports only from the release's Ray pods"),
    Flow("tenant", "head", 8080, "metrics only from the monitoring namespace"),
    Flow("prometheus", "head", 8265, "Prometheus gets the metrics ports, nothing else"),
    Flow("operator", "head", 6379, "the operator needs the dashboard and the Serve port only"),
    Flow("model-download", "head", 8265, "the download Job is not a Ray pod"),
    Flow("tenant", "worker-0", DIRECT_INGRESS.start, "replicas' own ports: only from HAProxy"),
    Flow("same-ns-app", "head", FALLBACK_PROXY, "the fallback proxy: only from HAProxy"),
    Flow("tenant", "head", HAPROXY_STATS, "HAProxy's stats page is not public"),
    Flow("prometheus", "worker-0", HAPROXY_STATS, "HAProxy's stats page is not scraped"),
    Flow("prometheus", "worker-0", HAPROXY_METRICS, "HAProxy's exporter is not scraped"),
]
# With networkPolicy.egress.restrict=true (and the API server's CIDR given).
NEEDED_EGRESS = [
    Flow("head", "kube-dns", 53, "DNS (UDP)", "UDP"),
    Flow("worker-1", "kube-dns", 53, "DNS (TCP)"),
    Flow("model-download", "kube-dns", 53, "DNS (UDP)", "UDP"),
    Flow("head", "api-server", 443, "KubeRay's autoscaler sidecar patches the RayCluster"),
    Flow("worker-0", "head", 6379, "raylet -> GCS"),
    Flow("head", "worker-0", 10005, "object manager / worker ports"),
    Flow("model-download", "hub", 443, "`hf download` from the hub (or S3)"),
    Flow("helm-test", "head", 8000, "`helm test` sends an OpenAI request"),
]
DENIED_EGRESS = [
    Flow("head", "hub", 443, "Ray pods do not reach the internet"),
    Flow("worker-0", "hub", 80, "Ray pods do not reach the internet"),
    Flow("model-download", "head", 8265, "the download Job reaches DNS and the hub only"),
    Flow("helm-test", "hub", 443, "the test pod reaches the API only"),
]


def _ports(template: dict) -> list[Port]:
    out = []
    for container in template["spec"].get("containers", []):
        for p in container.get("ports") or []:
            out.append(Port(p["containerPort"], p.get("protocol", "TCP"), p.get("name", "")))
    return out


def cluster_endpoints(
    objects: list[dict], operator_namespace: str = "kuberay-operator"
) -> tuple[Cluster, dict[str, Endpoint]]:
    """The rendered release plus the rest of a cluster, and its NetworkPolicies."""
    endpoints: dict[str, Endpoint] = {}
    templates = pod_templates(objects)
    for role, template in templates.items():
        names = [f"{role}-0", f"{role}-1"] if role in WORKER_ROLES else [role]
        for i, name in enumerate(names):
            endpoints[name] = Endpoint(
                name,
                NAMESPACE,
                dict(template["metadata"]["labels"]),
                f"10.1.0.{10 + i}",
                _ports(template),
            )
    others = [
        Endpoint("operator", operator_namespace, OPERATOR_LABELS, "10.2.0.5"),
        Endpoint("prometheus", "monitoring", {"app.kubernetes.io/name": "prometheus"}, "10.3.0.5"),
        Endpoint(
            "kube-dns",
            "kube-system",
            {"k8s-app": "kube-dns"},
            "10.4.0.10",
            [Port(53, "UDP", "dns"), Port(53, "TCP", "dns-tcp")],
        ),
        Endpoint("same-ns-app", NAMESPACE, {"app.kubernetes.io/name": "other"}, "10.1.9.9"),
        Endpoint("tenant", "tenant", {"app": "client"}, "10.5.0.5"),
        Endpoint("ml-client", "ml", {"app": "client"}, "10.6.0.5"),
        # A pod that copies the operator's labels in someone else's namespace.
        Endpoint("spoofed-operator", "tenant", OPERATOR_LABELS, "10.5.0.6"),
        Endpoint("api-server", None, ip=API_SERVER_IP),
        Endpoint("hub", None, ip=HUB_IP),
    ]
    endpoints.update({e.name: e for e in others})
    namespaces = {
        NAMESPACE: {},
        operator_namespace: {},
        "monitoring": {},
        "kube-system": {},
        "tenant": {},
        "ml": {"team": "ml"},
    }
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    return Cluster(namespaces, policies), endpoints


def check(cluster: Cluster, endpoints: dict[str, Endpoint], flow: Flow) -> bool:
    return cluster.allows(
        endpoints[flow.source], endpoints[flow.dest], Port(flow.port, flow.protocol)
    )
