"""The Helm chart's values, typed: the source of ``values.schema.json``.

Every object rejects unknown keys, so a typo in ``-f values.yaml`` or ``--set`` fails
``helm install`` with the key named instead of being ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from serving.chart.presets_table import gpu_presets

Quantity = str  # a Kubernetes quantity ("16Gi", "500m")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Serve(_Strict):
    set: list[str] = Field(
        default_factory=list,
        description="profile overrides, key.path=value, as `dsv4-serve --set`",
    )
    port: int = Field(8000, ge=1, le=65535, description="Ray Serve HTTP port (the API)")


class ImageRef(_Strict):
    repository: str = Field(min_length=1)
    tag: str = Field(min_length=1)


class Images(_Strict):
    cuda: ImageRef
    rocm: ImageRef
    pullPolicy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    pullSecrets: list[str] = Field(default_factory=list, description="Secret names")


class Resources(_Strict):
    cpu: Quantity = Field(min_length=1)
    memory: Quantity = Field(min_length=1)


class Head(_Strict):
    resources: Resources


class ApiService(_Strict):
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    port: int = Field(8000, ge=1, le=65535)


class Workers(_Strict):
    gpusPerPod: int | None = Field(
        None, ge=1, description="defaults to the preset's; must equal it when set"
    )
    resources: Resources
    shmSize: Quantity = Field("64Gi", min_length=1, description="size of /dev/shm")
    minReplicas: int | None = Field(None, ge=0, description="engine replicas; preset default")
    maxReplicas: int | None = Field(None, ge=1, description="engine replicas; preset default")


class Rdma(_Strict):
    enabled: bool = False
    resourceName: str = Field("rdma/hca", min_length=1)
    count: int = Field(1, ge=1)


class Scheduling(_Strict):
    nodeSelector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    affinity: dict[str, Any] = Field(default_factory=dict)


class Pvc(_Strict):
    create: bool = True
    existingClaim: str = ""
    size: Quantity = "2Ti"
    storageClassName: str = ""
    accessModes: list[Literal["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"]] = Field(
        default_factory=lambda: ["ReadWriteMany"], min_length=1
    )


class SecretKeyRef(_Strict):
    name: str = ""
    key: str = Field("token", min_length=1)


class Download(_Strict):
    enabled: bool = False
    source: Literal["huggingface", "s3"] = "huggingface"
    repo: str = Field("", description="hub repo id; default: the preset's model source")
    s3Uri: str = ""
    tokenSecret: SecretKeyRef = SecretKeyRef()
    image: str = Field("python:3.11-slim", min_length=1)
    backoffLimit: int = Field(3, ge=0)


class LocalCache(_Strict):
    enabled: bool = False
    hostPath: str = Field("/mnt/dsv4-model-cache", min_length=1)


class Model(_Strict):
    mountPath: str = Field("/models", pattern=r"^/")
    path: str = Field("", description="weights directory; default mountPath/<model source>")
    pvc: Pvc = Pvc()
    download: Download = Download()
    localCache: LocalCache = LocalCache()


class Probes(_Strict):
    startupSeconds: int = Field(
        5400, ge=60, description="how long a worker may take to start (DSV4 loads for minutes)"
    )
    readinessPeriodSeconds: int = Field(10, ge=1)


class ApiKey(_Strict):
    existingSecret: str = ""
    secretKey: str = Field("api-keys", min_length=1, description="key inside the Secret")
    generate: bool = Field(True, description="create a Secret with a random key when none")


class Ingress(_Strict):
    enabled: bool = False
    className: str = ""
    host: str = ""
    tlsSecret: str = ""
    annotations: dict[str, str] = Field(default_factory=dict)


class GatewayRoute(_Strict):
    enabled: bool = False
    parentRefs: list[dict[str, Any]] = Field(default_factory=list)
    hostnames: list[str] = Field(default_factory=list)


class NetworkPolicy(_Strict):
    enabled: bool = True
    apiFrom: list[dict[str, Any]] = Field(
        default_factory=list, description="peers allowed to the API port; empty: everyone"
    )
    monitoringNamespace: str = Field("monitoring", min_length=1)


class Pdb(_Strict):
    enabled: bool = True
    maxUnavailable: int = Field(1, ge=0)


class ServiceAccount(_Strict):
    create: bool = True
    name: str = ""
    annotations: dict[str, str] = Field(default_factory=dict)


class SecurityContext(_Strict):
    runAsNonRoot: bool = True
    runAsUser: int = Field(1000, ge=0)
    runAsGroup: int = Field(1000, ge=0)
    fsGroup: int = Field(1000, ge=0)


class Switch(_Strict):
    enabled: bool = True
    force: bool = Field(False, description="render even when the API is not installed")
    labels: dict[str, str] = Field(default_factory=dict)


class Dashboard(_Strict):
    enabled: bool = True
    labels: dict[str, str] = Field(default_factory=lambda: {"grafana_dashboard": "1"})
    namespace: str = Field("", description="where the Grafana sidecar looks; default: release")


class Monitoring(_Strict):
    podMonitor: Switch = Switch()
    serviceMonitor: Switch = Switch(enabled=False)
    prometheusRule: Switch = Switch()
    dashboard: Dashboard = Dashboard()
    rayMetricsPort: int = Field(8080, ge=1, le=65535)
    gatewayMetricsPort: int = Field(9464, ge=1, le=65535)
    interval: str = Field("30s", pattern=r"^[0-9]+[smh]$")


class Bench(_Strict):
    enabled: bool = False
    concurrency: list[int] = Field(default_factory=lambda: [1, 8, 32], min_length=1)
    requests: int = Field(64, ge=1)
    maxTokens: int = Field(256, ge=1)


class ChartValues(_Strict):
    preset: str = Field(
        "h200-flash-mtp",
        description="a GPU preset (serving/profiles)",
        json_schema_extra={"enum": gpu_presets()},
    )
    platform: Literal["cuda", "rocm"] = "cuda"
    rayVersion: str = "2.60.0"
    serve: Serve = Serve()
    image: Images
    head: Head
    workers: Workers
    rdma: Rdma = Rdma()
    hostIPC: bool = False
    scheduling: Scheduling = Scheduling()
    model: Model = Model()
    probes: Probes = Probes()
    terminationGracePeriodSeconds: int = Field(120, ge=0)
    service: ApiService = ApiService()
    apiKey: ApiKey = ApiKey()
    ingress: Ingress = Ingress()
    gatewayRoute: GatewayRoute = GatewayRoute()
    networkPolicy: NetworkPolicy = NetworkPolicy()
    podDisruptionBudget: Pdb = Pdb()
    serviceAccount: ServiceAccount = ServiceAccount()
    securityContext: SecurityContext = SecurityContext()
    monitoring: Monitoring = Monitoring()
    bench: Bench = Bench()
    nameOverride: str = ""
    fullnameOverride: str = ""


def values_schema() -> dict[str, Any]:
    schema = ChartValues.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "dsv4-serve chart values"
    return schema
