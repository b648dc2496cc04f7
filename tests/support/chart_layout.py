"""What each Ray pod of the rendered chart serves in the direct layout (test helper): the
engine replica is the ingress, HAProxy fronts the replicas.

The table below is Ray 2.60's behaviour, read from its sources (ray/serve/_private/ in
.venv), and our gateway's:
- Serve runs a proxy on the head (its controller's node) and on every node holding a
  replica that is STARTING, UPDATING, RECOVERING, RUNNING or PENDING_MIGRATION
  (controller.py _update_proxy_nodes, deployment_state.py get_active_node_ids). With
  RAY_SERVE_ENABLE_HA_PROXY=1 that proxy is HAProxy (haproxy.py HAProxyManager) on
  http_options.port; it also binds its exporter and stats page on all interfaces
  (haproxy_templates.py `frontend prometheus`, `listen stats`; constants.py
  RAY_SERVE_HAPROXY_METRICS_PORT, RAY_SERVE_HAPROXY_STATS_PORT), and the head also runs
  Serve's fallback proxy (proxy_state.py _start_fallback_proxy_if_needed,
  RAY_SERVE_FALLBACK_PROXY_HTTP_PORT), the backup server of every HAProxy backend.
- HAProxy's /-/healthz (haproxy_templates.py HAPROXY_HEALTHZ_RULES_TEMPLATE, haproxy.py
  build_health_route_info): 503 until routes arrived; on a worker, 503 until it has seen a
  replica (has_received_servers); then 200 while the app backend has a usable server: any
  RUNNING replica in the cluster (the backend lists them all) or, with none up, the head's
  fallback proxy (HAProxy's nbsrv counts backup servers when no active one is up). The
  head (is_head) answers 200 with no replica.
  tests/serving/chart/test_chart_haproxy_health.py runs the config Ray renders in the real
  HAProxy binary and checks these answers.
- An ingress replica binds one HTTP port from range(RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT,
  ..._MAX_HTTP_PORT) once its constructor returned (replica.py _on_initialized ->
  _maybe_start_direct_ingress_servers; node_port_manager.py PortAllocator).
- Dsv4Server (serving/gateway/server.py) opens the gateway metrics port, the one
  DSV4_GATEWAY_METRICS_PORT names (serving/gateway/stack.py), after its engine started.
- Every Ray node: the metrics export port (rayStartParams metrics-export-port) and the
  dashboard agent's /api/local_raylet_healthz on 52365; the head: /api/gcs_healthz on 8265.
- A replica actor joins its placement group's first bundle; PACK over several hosts puts
  that bundle on one of them, which one is Ray's choice (`actor_host` below).
KubeRay's probe defaults (ray-operator/controllers/ray/common/pod.go
initLivenessAndReadinessProbe): the head checks raylet and GCS health; a RayService worker
without its own readinessProbe also checks /-/healthz on its serve port.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ray.serve._private import constants as serve

from tests.support.chart_render import by_kind, ray_cluster, serve_config

RAYLET_HEALTH = ("/api/local_raylet_healthz", 52365)
GCS_HEALTH = ("/api/gcs_healthz", 8265)
HEALTHZ = "/-/healthz"
METRICS = "/metrics"
HAPROXY_STATS = serve.RAY_SERVE_HAPROXY_STATS_PORT
HAPROXY_METRICS = serve.RAY_SERVE_HAPROXY_METRICS_PORT
FALLBACK_PROXY = serve.RAY_SERVE_FALLBACK_PROXY_HTTP_PORT
DIRECT_INGRESS = range(
    serve.RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT, serve.RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT
)

# What a worker pod holds: an engine replica that is loading or serving, none ("idle":
# Serve scaled its replica away, the autoscaler has not removed the pod yet), or nothing
# runs yet ("pending": init containers, e.g. waiting for the weights download).
SERVING, LOADING, IDLE, PENDING = "serving", "loading", "idle", "pending"


@dataclass(frozen=True)
class Truth:
    """The ports the processes really bind, from what configures them (not the pod spec)."""

    serve: int  # serveConfigV2 http_options.port: HAProxy's frontend
    ray_metrics: dict[str, int]  # per role: rayStartParams metrics-export-port
    gateway: int  # DSV4_GATEWAY_METRICS_PORT in the worker container: Dsv4Server's port


@dataclass
class Pod:
    name: str
    labels: dict[str, str]
    ports: dict[str, int]  # declared container ports by name
    probe: dict[str, Any] | None  # the container's readinessProbe (None: KubeRay's default)
    phase: str = "Running"
    replica: str | None = None  # the engine replica actor on this pod: LOADING / SERVING
    proxy: bool = False  # a Serve proxy (HAProxy) runs here
    serves: set[tuple[str, int]] = field(default_factory=set)  # (path, port) answering 200
    ready: bool = False  # its readiness probe passes

    @property
    def is_head(self) -> bool:
        return self.labels.get("app.kubernetes.io/component") == "ray-head"

    def port(self, ref: int | str) -> int | None:
        return self.ports.get(ref) if isinstance(ref, str) else ref

    def readiness_checks(self, serve_port: int) -> list[tuple[str, int | None]]:
        if self.probe is None:
            return [RAYLET_HEALTH, GCS_HEALTH if self.is_head else (HEALTHZ, serve_port)]
        get = self.probe["httpGet"]
        return [(get["path"], self.port(get["port"]))]


def truth(objects: list[dict]) -> Truth:
    cluster = ray_cluster(objects)
    (group,) = cluster["workerGroupSpecs"]
    (worker,) = group["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in worker.get("env") or []}
    return Truth(
        serve=int(serve_config(objects)["http_options"]["port"]),
        ray_metrics={
            "ray-head": int(cluster["headGroupSpec"]["rayStartParams"]["metrics-export-port"]),
            "ray-worker": int(group["rayStartParams"]["metrics-export-port"]),
        },
        gateway=int(env["DSV4_GATEWAY_METRICS_PORT"]),
    )


@dataclass(frozen=True)
class Listener:
    what: str
    path: str
    port: int | str  # a number, or a field of Truth
    where: str  # a key of WHERE: which pods run it


# Which Running pods answer what (the docstring gives the Ray source of each row).
LISTENERS = [
    Listener("dashboard agent: raylet health", *RAYLET_HEALTH, "ray pod"),
    Listener("Ray's metrics export (engine, Serve)", METRICS, "ray_metrics", "ray pod"),
    Listener("dashboard: GCS health", *GCS_HEALTH, "head"),
    Listener("Serve's fallback proxy", HEALTHZ, FALLBACK_PROXY, "head"),
    Listener("HAProxy: the API, /-/healthz 200", HEALTHZ, "serve", "proxy, healthy"),
    Listener("HAProxy exporter", METRICS, HAPROXY_METRICS, "proxy"),
    Listener("HAProxy stats page", "/stats", HAPROXY_STATS, "proxy"),
    Listener("Dsv4Server: gateway metrics", METRICS, "gateway", "serving replica"),
    Listener(
        "replica's direct ingress (first port)",
        "/v1/models",
        DIRECT_INGRESS.start,
        "serving replica",
    ),
]
WHERE = {
    "ray pod": lambda pod, any_serving: True,
    "head": lambda pod, any_serving: pod.is_head,
    "proxy": lambda pod, any_serving: pod.proxy,
    # The fallback proxy is up in every state modelled here (the head runs).
    "proxy, healthy": lambda pod, any_serving: pod.proxy and (pod.is_head or any_serving),
    "serving replica": lambda pod, any_serving: pod.replica == SERVING,
}


def _serves(pod: Pod, t: Truth, any_serving: bool) -> set[tuple[str, int]]:
    if pod.phase != "Running":
        return set()  # init containers: an IP, but no Ray yet
    out = set()
    for row in LISTENERS:
        if WHERE[row.where](pod, any_serving):
            port = row.port
            if port == "ray_metrics":
                port = t.ray_metrics[pod.labels["app.kubernetes.io/component"]]
            elif isinstance(port, str):
                port = getattr(t, port)
            out.add((row.path, port))
    return out


def _template_pod(name: str, template: dict, **state: Any) -> Pod:
    (container,) = template["spec"]["containers"]
    return Pod(
        name,
        dict(template["metadata"]["labels"]),
        {p["name"]: p["containerPort"] for p in container.get("ports") or [] if p.get("name")},
        container.get("readinessProbe"),
        **state,
    )


def cluster_pods(objects: list[dict], workers: list[str], actor_host: int = 0) -> list[Pod]:
    """The head and the worker pods for one state per engine replica (SERVING, LOADING,
    IDLE, PENDING); a replica spanning hosts has its actor and proxy on `actor_host`."""
    cluster = ray_cluster(objects)
    (group,) = cluster["workerGroupSpecs"]
    hosts = group.get("numOfHosts", 1)
    pods = [_template_pod("head", cluster["headGroupSpec"]["template"], proxy=True)]
    for r, state in enumerate(workers):
        for host in range(hosts):
            on_actor = host == actor_host % hosts and state in (SERVING, LOADING)
            pods.append(
                _template_pod(
                    f"{group['groupName']}-{r}-{host}",
                    group["template"],
                    phase="Pending" if state == PENDING else "Running",
                    replica=state if on_actor else None,
                    proxy=on_actor,
                )
            )
    t = truth(objects)
    any_serving = SERVING in workers
    for pod in pods:
        pod.serves = _serves(pod, t, any_serving)
        checks = pod.readiness_checks(t.serve)
        pod.ready = pod.phase == "Running" and all(c in pod.serves for c in checks)
    return pods


def api_endpoints(objects: list[dict], pods: list[Pod]) -> list[Pod]:
    """The Ready pods the API Service selects (its Endpoints' addresses)."""
    (api,) = [s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-api")]
    selector = api["spec"]["selector"]
    return [p for p in pods if p.ready and all(p.labels.get(k) == v for k, v in selector.items())]
