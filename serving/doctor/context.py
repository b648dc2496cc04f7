"""What the checks share: the cluster, the plan, and reads cached across checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from serving.doctor import kinds
from serving.doctor.cluster import Cluster
from serving.doctor.errors import Unavailable
from serving.doctor.k8s import Obj, dig, labels, quantity
from serving.doctor.plan import Plan


@dataclass
class PreflightContext:
    cluster: Cluster
    plan: Plan
    image_arches: tuple[str, ...]
    image_arch_given: bool
    min_kube_version: tuple[int, int, int] = (1, 28, 0)
    # The KubeRay operator's namespace, where the doctor rendered the chart with it because
    # the user's values left that required value out.
    filled_operator_namespace: str | None = None
    _cache: dict[str, Any] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        return self.plan.namespace

    def crd(self, crd_name: str) -> Obj | None:
        key = f"crd:{crd_name}"
        if key not in self._cache:
            self._cache[key] = self.cluster.get(kinds.CRD, crd_name)
        return self._cache[key]

    def nodes(self) -> list[Obj]:
        if "nodes" not in self._cache:
            self._cache["nodes"] = self.cluster.list(kinds.NODE)
        return self._cache["nodes"]

    def gpus_in_use(self) -> dict[str, int] | None:
        """GPUs requested by running pods, per node; None when pods cannot be read.

        The release's own pods do not count: preflight after an install must not find
        the cluster full of itself.
        """
        if "in_use" not in self._cache:
            try:
                pods = self.cluster.list(kinds.POD, field_selector=LIVE_PODS)
            except Unavailable as exc:
                self._cache["in_use_reason"] = exc.reason
                self._cache["in_use"] = None
            else:
                mine = (self.plan.namespace, self.plan.release)
                resource = self.plan.workers.gpu_resource or ""
                self._cache["in_use"] = gpus_in_use(pods, resource, mine)
        return self._cache["in_use"]

    def in_use_unknown_reason(self) -> str | None:
        return self._cache.get("in_use_reason")


LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


def gpus_in_use(
    pods: list[Obj], resource: str, exclude_release: tuple[str, str] | None = None
) -> dict[str, int]:
    """GPUs of `resource` that scheduled pods hold, per node name."""
    used: dict[str, int] = {}
    for pod in pods:
        node = dig(pod, "spec", "nodeName")
        if not node or dig(pod, "status", "phase") in ("Succeeded", "Failed"):
            continue
        if (
            exclude_release
            and (
                dig(pod, "metadata", "namespace"),
                labels(pod).get("app.kubernetes.io/instance"),
            )
            == exclude_release
        ):
            continue
        count = 0
        for container in dig(pod, "spec", "containers", default=[]) or []:
            res = container.get("resources") or {}
            value = quantity((res.get("limits") or {}).get(resource)) or quantity(
                (res.get("requests") or {}).get(resource)
            )
            count += int(value or Decimal(0))
        if count:
            used[node] = used.get(node, 0) + count
    return used


@dataclass
class StatusContext:
    cluster: Cluster
    namespace: str
    release: str
    log_lines: int = 20
    prometheus: str | None = None
    _cache: dict[str, Any] = field(default_factory=dict)

    @property
    def selector(self) -> str:
        return f"app.kubernetes.io/instance={self.release}"

    def rayservices(self) -> list[Obj]:
        if "rs" not in self._cache:
            self._cache["rs"] = self.cluster.list(
                kinds.RAY_SERVICE, self.namespace, label_selector=self.selector
            )
        return self._cache["rs"]

    def pods(self) -> list[Obj]:
        if "pods" not in self._cache:
            self._cache["pods"] = self.cluster.list(
                kinds.POD, self.namespace, label_selector=self.selector
            )
        return self._cache["pods"]

    def events(self) -> list[Obj]:
        if "events" not in self._cache:
            self._cache["events"] = self.cluster.list(kinds.EVENT, self.namespace)
        return self._cache["events"]

    def crd(self, crd_name: str) -> Obj | None:
        key = f"crd:{crd_name}"
        if key not in self._cache:
            self._cache[key] = self.cluster.get(kinds.CRD, crd_name)
        return self._cache[key]
