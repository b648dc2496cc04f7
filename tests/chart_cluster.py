"""What a cluster does with the rendered pods (test helper): which pods get Ready, which the
API Service routes to, and what the PodDisruptionBudget lets a drain evict.

The node-side facts come from Ray 2.60's sources: every Ray node's dashboard agent answers
/api/local_raylet_healthz (ray/dashboard/modules/reporter/healthz_agent.py); Serve runs a
proxy on the head (its controller's node) and on nodes holding a replica actor
(ray/serve/_private/controller.py _update_proxy_nodes, proxy_location EveryNode), and a
replica actor lives in its placement group's first bundle, which PACK puts on the first
host of the replica. The PDB arithmetic is Kubernetes' disruption controller
(pkg/controller/disruption/disruption.go: getExpectedPodCount, getExpectedScale,
countHealthyPods, updatePdbStatus).
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.netpol_eval import selector_matches

RAYLET_HEALTH = ("/api/local_raylet_healthz", 52365)


@dataclass
class RayPod:
    name: str
    labels: dict[str, str]
    probe: dict | None  # the container's readinessProbe (None: KubeRay's default)
    serves: set[tuple[str, int]]  # (path, port) answering 200

    @property
    def ready(self) -> bool:
        if self.probe is None:
            return True  # KubeRay's injected default checks the raylet (and GCS on the head)
        get = self.probe["httpGet"]
        return (get["path"], get["port"]) in self.serves


def running_pods(objects: list[dict], serve_port: int) -> list[RayPod]:
    """The head and every worker pod of a healthy cluster at the group's replica count."""
    from tests.chart_render import ray_cluster

    cluster = ray_cluster(objects)
    head_tpl = cluster["headGroupSpec"]["template"]
    proxy = ("/-/healthz", serve_port)
    pods = [
        RayPod(
            "head",
            head_tpl["metadata"]["labels"],
            head_tpl["spec"]["containers"][0].get("readinessProbe"),
            {RAYLET_HEALTH, proxy},
        )
    ]
    for group in cluster["workerGroupSpecs"]:
        tpl = group["template"]
        for replica in range(group["replicas"]):
            for host in range(group.get("numOfHosts", 1)):
                serves = {RAYLET_HEALTH} | ({proxy} if host == 0 else set())
                pods.append(
                    RayPod(
                        f"{group['groupName']}-{replica}-{host}",
                        tpl["metadata"]["labels"],
                        tpl["spec"]["containers"][0].get("readinessProbe"),
                        serves,
                    )
                )
    return pods


def disruptions_allowed(pdb: dict, pods: list[RayPod], controller_has_scale: bool) -> int:
    """status.disruptionsAllowed as Kubernetes' disruption controller computes it."""
    spec = pdb["spec"]
    matching = [p for p in pods if selector_matches(spec["selector"], p.labels)]
    if "maxUnavailable" in spec or isinstance(spec.get("minAvailable"), str):
        if not controller_has_scale:
            return 0  # getExpectedScale fails ("found no controllers for pod"): failSafe
        raise NotImplementedError("only pods of scale-less controllers are modelled")
    desired = int(spec["minAvailable"])
    expected = len(matching)
    healthy = sum(p.ready for p in matching)
    allowed = healthy - desired
    return 0 if expected <= 0 or allowed <= 0 else allowed
