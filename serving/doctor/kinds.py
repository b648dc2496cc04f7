"""The API kinds the doctor reads, with the names both sources need."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """`plural.group`, as kubectl and RBAC error messages spell it."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


NODE = Kind("Node", "", "v1", "nodes", False)
NAMESPACE = Kind("Namespace", "", "v1", "namespaces", False)
POD = Kind("Pod", "", "v1", "pods", True)
EVENT = Kind("Event", "", "v1", "events", True)
PVC = Kind("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims", True)
RESOURCE_QUOTA = Kind("ResourceQuota", "", "v1", "resourcequotas", True)
STORAGE_CLASS = Kind("StorageClass", "storage.k8s.io", "v1", "storageclasses", False)
CRD = Kind(
    "CustomResourceDefinition", "apiextensions.k8s.io", "v1", "customresourcedefinitions", False
)
DEPLOYMENT = Kind("Deployment", "apps", "v1", "deployments", True)
JOB = Kind("Job", "batch", "v1", "jobs", True)
RAY_SERVICE = Kind("RayService", "ray.io", "v1", "rayservices", True)
RAY_CLUSTER = Kind("RayCluster", "ray.io", "v1", "rayclusters", True)
ACCESS_REVIEW = Kind(
    "SelfSubjectAccessReview", "authorization.k8s.io", "v1", "selfsubjectaccessreviews", False
)

READABLE = [
    NODE,
    NAMESPACE,
    POD,
    EVENT,
    PVC,
    RESOURCE_QUOTA,
    STORAGE_CLASS,
    CRD,
    DEPLOYMENT,
    JOB,
    RAY_SERVICE,
    RAY_CLUSTER,
    ACCESS_REVIEW,
]
BY_KIND = {k.kind: k for k in READABLE}

# What the chart can create (kind -> API group, plural): the RBAC check asks about these.
CHART_KINDS: dict[str, tuple[str, str]] = {
    "ServiceAccount": ("", "serviceaccounts"),
    "Secret": ("", "secrets"),
    "ConfigMap": ("", "configmaps"),
    "Service": ("", "services"),
    "PersistentVolumeClaim": ("", "persistentvolumeclaims"),
    "Pod": ("", "pods"),
    "Job": ("batch", "jobs"),
    "PodDisruptionBudget": ("policy", "poddisruptionbudgets"),
    "NetworkPolicy": ("networking.k8s.io", "networkpolicies"),
    "Ingress": ("networking.k8s.io", "ingresses"),
    "HTTPRoute": ("gateway.networking.k8s.io", "httproutes"),
    "RayService": ("ray.io", "rayservices"),
    "PodMonitor": ("monitoring.coreos.com", "podmonitors"),
    "ServiceMonitor": ("monitoring.coreos.com", "servicemonitors"),
    "PrometheusRule": ("monitoring.coreos.com", "prometheusrules"),
}
# What installing, upgrading (helm reads, then patches) and uninstalling each kind takes.
RBAC_VERBS = ("get", "create", "patch", "delete")
# helm stores every release revision as a Secret in the release's namespace.
HELM_STORAGE_VERBS = ("get", "list", "create", "update", "delete")

# Custom kinds the chart renders and the CRD that must serve each.
CHART_CRDS = {
    "RayService": "rayservices.ray.io",
    "PodMonitor": "podmonitors.monitoring.coreos.com",
    "ServiceMonitor": "servicemonitors.monitoring.coreos.com",
    "PrometheusRule": "prometheusrules.monitoring.coreos.com",
    "HTTPRoute": "httproutes.gateway.networking.k8s.io",
}
