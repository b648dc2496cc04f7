"""What a cluster does with the rendered pods (test helper): which pods get Ready, which the
API Service routes to, and what the PodDisruptionBudget lets a drain evict.

What each pod serves, and so which probes pass, is tests/support/chart_layout.py's table of the
direct layout (from Ray 2.60's sources). The PDB arithmetic is Kubernetes' disruption
controller (pkg/controller/disruption/disruption.go: getExpectedPodCount,
getExpectedScale, countHealthyPods, updatePdbStatus).
"""

from __future__ import annotations

from tests.support.chart_layout import SERVING, Pod, cluster_pods
from tests.support.netpol_eval import selector_matches


def running_pods(objects: list[dict]) -> list[Pod]:
    """The head and every worker pod of a healthy cluster at the group's replica count."""
    from tests.support.chart_render import worker_group

    return cluster_pods(objects, [SERVING] * worker_group(objects)["replicas"])


def disruptions_allowed(pdb: dict, pods: list[Pod], controller_has_scale: bool) -> int:
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
