"""The Helm chart's values, typed: the source of ``values.schema.json``.

Every object rejects unknown keys, so a typo in ``-f values.yaml`` or ``--set`` fails
``helm install`` with the key named instead of being ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from serving.chart.presets_table import gpu_presets
from serving.disagg.section import Disaggregation as Section

# A Kubernetes resource quantity ("16Gi", "500m", "1.5", "2e3"): the API server's grammar
# (k8s.io/apimachinery resource.Quantity), so `helm install` rejects what it would.
QUANTITY_PATTERN = (
    r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
Quantity = Annotated[str, Field(pattern=QUANTITY_PATTERN)] | Annotated[int, Field(ge=0)]
Arch = Literal["amd64", "arm64"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Serve(_Strict):
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="preset overrides as a map merged into the preset (nested as the "
        "preset's YAML), before serve.set",
    )
    set: list[str] = Field(
        default_factory=list,
        description="preset overrides, key.path=value, as `dsv4-serve --set` (after overrides)",
    )
    port: int = Field(8000, ge=1, le=65535, description="Ray Serve HTTP port (the API)")
    routing: Literal["", "default", "prefix"] = Field(
        "",
        description="how requests reach the replicas (the preset's serving.routing when "
        "empty): default, HAProxy's leastconn; prefix, requests sharing a prefix go to one "
        "replica within a load bound (sets HAProxy's body forwarding on every pod)",
    )
    path: Literal["", "direct", "ingress"] = Field(
        "",
        description="the serving layout (the preset's serving.path when empty): direct, the "
        "engine replica is the ingress; ingress, Ray Serve LLM's OpenAI ingress with the "
        "gateway runs on the head in front of the engines (disaggregation needs it)",
    )


class ImageRef(_Strict):
    repository: str = Field(min_length=1)
    tag: str | None = Field(
        "",
        description="empty: the chart's own image, <appVersion>-vllm<vLLM version> "
        "(the tag `make images` gives it)",
    )
    arches: list[Arch] = Field(
        default_factory=lambda: ["amd64"],
        min_length=1,
        description="CPU architectures the image's manifest list holds (`make images`)",
    )


class Images(_Strict):
    cuda: ImageRef
    rocm: ImageRef
    pullPolicy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    pullSecrets: list[str] = Field(default_factory=list, description="Secret names")


class Resources(_Strict):
    cpu: Quantity
    memory: Quantity


class WorkerResources(_Strict):
    cpu: Quantity
    memory: Quantity | None = Field(
        None, description="default: the preset's node (GB300 trays 768Gi, 8-GPU hosts 1500Gi)"
    )


class Head(_Strict):
    resources: Resources
    arch: Arch | Literal[""] = Field(
        "", description="pin the head's CPU architecture; default: any the image holds"
    )


class ApiService(_Strict):
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    port: int = Field(8000, ge=1, le=65535)


class Workers(_Strict):
    gpusPerPod: int | None = Field(
        None, ge=1, description="defaults to the preset's; must equal it when set"
    )
    resources: WorkerResources
    shmSize: Quantity = Field("64Gi", description="size of /dev/shm")
    minReplicas: int | None = Field(
        None, ge=0, description="engine replicas (0: start from zero); preset default"
    )
    maxReplicas: int | None = Field(None, ge=1, description="engine replicas; preset default")
    targetOngoingRequests: int | None = Field(
        None, ge=1, description="Serve autoscaling target per replica; preset default"
    )
    arch: Arch | Literal[""] = Field(
        "", description="CPU architecture of the GPU nodes; default: the preset's (GB300 arm64)"
    )


def _section_choices(field: str) -> Any:
    """A field's choices as the preset's disaggregation section declares them."""
    return Section.model_fields[field].annotation


class RoleResources(_Strict):
    cpu: Quantity | None = Field(None, description="default: workers.resources.cpu")
    memory: Quantity | None = Field(None, description="default: workers.resources.memory")


class RoleGroup(_Strict):
    """One role's worker group and Serve deployment, sized from one set of values."""

    minReplicas: int = Field(
        1, ge=1, description="engine replicas of this role (a role never scales to zero)"
    )
    maxReplicas: int | None = Field(
        None, ge=1, description="default: minReplicas; above it, Serve and KubeRay autoscale"
    )
    targetOngoingRequests: int | None = Field(
        None, ge=1, description="Serve's autoscaling target per replica; default: the preset's"
    )
    resources: RoleResources = RoleResources()


class Disaggregation(_Strict):
    """Prefill and decode engines on their own worker groups (serving/disagg)."""

    enabled: bool = Field(False, description="serve the preset disaggregated (needs path ingress)")
    connector: _section_choices("connector") = Field(  # type: ignore[valid-type]
        "nixl", description="vLLM's KV connector (the preset section's connector)"
    )
    mtpOn: _section_choices("mtp_on") = Field(  # type: ignore[valid-type]
        "both", description="where the MTP drafter runs (the preset section's mtp_on)"
    )
    onTransferFailure: _section_choices("on_transfer_failure") = Field(  # type: ignore[valid-type]
        "recompute", description="the preset section's on_transfer_failure"
    )
    kvBufferDevice: _section_choices("kv_buffer_device") = Field(  # type: ignore[valid-type]
        "auto", description="the preset section's kv_buffer_device"
    )
    prefill: RoleGroup = RoleGroup()
    decode: RoleGroup = RoleGroup()


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
    revision: str = Field("", description="hub revision (branch, tag or commit); default main")
    endpoint: str = Field("", description="hub mirror URL (HF_ENDPOINT); default huggingface.co")
    s3Uri: str = Field("", pattern=r"^(s3://.+)?$")
    tokenSecret: SecretKeyRef = SecretKeyRef()
    image: str = Field(
        "", description="default: the serving image (its own hf CLI and pyarrow; no installs)"
    )
    backoffLimit: int = Field(3, ge=0)


class LocalCache(_Strict):
    enabled: bool = False
    hostPath: str = Field("/mnt/dsv4-model-cache", pattern=r"^/")
    prepare: Literal["chown", "none"] = Field(
        "chown",
        description="chown: a root init container (CAP_CHOWN only) hands the hostPath to "
        "securityContext.runAsUser; none: the directory exists on every node, owned by it",
    )


class JitCachePvc(_Strict):
    existingClaim: str = Field("", description='a claim of your own; "": the chart creates one')
    size: Quantity = "100Gi"
    storageClassName: str = ""
    accessModes: list[Literal["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"]] = Field(
        default_factory=lambda: ["ReadWriteMany"], min_length=1
    )


class JitWarm(_Strict):
    """The Job that fills the shared JIT cache ahead of the engines (`dsv4-serve warm`)."""

    enabled: bool | None = Field(
        None,
        description="null: on when jitCache.type is pvc (one claim every pod shares) and a "
        "replica fits one pod; true elsewhere fails the install",
    )
    waitSeconds: int = Field(
        1800,
        ge=0,
        description="how long each GPU worker waits for a cache that fits before its engine "
        "starts anyway (and compiles what the cache lacks)",
    )
    activeDeadlineSeconds: int = Field(
        7200, ge=60, description="the Job's limit, all attempts together"
    )
    backoffLimit: int = Field(1, ge=0, description="failed warm pods the Job retries")
    resources: RoleResources = Field(
        RoleResources(),
        description="the warm pod's CPU (its compile processes, whole cores) and memory; "
        "default workers.resources. Its GPUs: one replica's, from the preset",
    )


class JitCache(_Strict):
    type: Literal["pvc", "hostPath", "emptyDir"] = Field(
        "pvc",
        description="pvc: one claim every worker shares, kept across releases; hostPath: per "
        "node (needs a namespace that allows hostPath); emptyDir: per pod, lost with it",
    )
    mountPath: str = Field("/var/cache/dsv4", pattern=r"^/")
    hostPath: str = Field("/mnt/dsv4-jit-cache", pattern=r"^/")
    prepare: Literal["chown", "none"] = Field(
        "chown",
        description="hostPath only. chown: a root init container (CAP_CHOWN only) hands the "
        "directory to securityContext.runAsUser; none: it exists on every node, owned by it",
    )
    pvc: JitCachePvc = JitCachePvc()
    warm: JitWarm = JitWarm()


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
    secretKey: str = Field(
        "api-keys", min_length=1, description="entry of the Secret holding the inference keys"
    )
    adminSecretKey: str = Field(
        "admin-keys",
        description="entry of the Secret holding the admin keys (control and metrics routes);"
        " empty: no admin key, the control routes are off",
    )
    generate: bool = Field(True, description="create a Secret with random keys when none")


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


class KubeRayOperator(_Strict):
    namespace: str = Field(
        "",
        max_length=63,
        pattern=r"^(|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$",
        description="the operator's namespace, required with networkPolicy.enabled "
        "unless anyNamespace",
    )
    anyNamespace: bool = Field(
        False,
        description="admit pods with podLabels from every namespace to the Ray dashboard "
        "(which runs Ray jobs): not on a shared cluster",
    )
    podLabels: dict[str, str] = Field(
        default_factory=lambda: {"app.kubernetes.io/name": "kuberay-operator"},
        min_length=1,
        description="labels of the operator's pods (the kuberay-operator chart's defaults)",
    )


class ApiServer(_Strict):
    cidrs: list[str] = Field(
        default_factory=list, description="the Kubernetes API server's addresses (CIDR)"
    )
    ports: list[int] = Field(default_factory=lambda: [443, 6443], min_length=1)


class Egress(_Strict):
    restrict: bool = Field(
        False, description="deny egress except DNS, the release's pods and the listed peers"
    )
    apiServer: ApiServer = ApiServer()
    downloadCidrs: list[str] = Field(
        default_factory=lambda: ["0.0.0.0/0"],
        description="where the download Job may connect on 443 (hub or S3)",
    )


class NetworkPolicy(_Strict):
    enabled: bool = True
    apiFrom: list[dict[str, Any]] = Field(
        default_factory=list, description="peers allowed to the API port; empty: everyone"
    )
    monitoringNamespace: str = Field("monitoring", min_length=1)
    kuberayOperator: KubeRayOperator = KubeRayOperator()
    egress: Egress = Egress()


class Pdb(_Strict):
    enabled: bool = True
    maxUnavailable: int = Field(
        1,
        ge=0,
        description="worker pods a drain may take below the minimum (rendered as minAvailable)",
    )


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


class Alerts(_Strict):
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="labels every alert carries (routing in Alertmanager), replacing the rules' "
        "own except severity",
    )
    runbookBaseUrl: str = Field(
        "",
        pattern=r"^(https?://\S+)?$",
        description='where the runbooks live (each alert keeps its #anchor); "": this '
        "project's docs/monitoring.md",
    )


class Monitoring(_Strict):
    alerts: Alerts = Alerts()
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
        description="a GPU preset (serving/presets)",
        json_schema_extra={"enum": gpu_presets()},
    )
    platform: Literal["cuda", "rocm"] = "cuda"
    rayVersion: str = "2.60.0"
    serve: Serve = Serve()
    image: Images
    head: Head
    workers: Workers
    disaggregation: Disaggregation = Disaggregation()
    rdma: Rdma = Rdma()
    hostIPC: bool = False
    scheduling: Scheduling = Scheduling()
    model: Model = Model()
    jitCache: JitCache = JitCache()
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
