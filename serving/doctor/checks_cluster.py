"""Preflight: API server, chart rendering, KubeRay, Prometheus Operator, quota and RBAC."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

from serving.doctor import kinds
from serving.doctor.cluster import Cluster
from serving.doctor.context import PreflightContext, StatusContext
from serving.doctor.errors import Unavailable
from serving.doctor.findings import Check, Finding, fail, ok, warn
from serving.doctor.k8s import (
    Obj,
    dig,
    gib,
    image_tag,
    is_true,
    name,
    namespace,
    quantity,
    semver,
)
from serving.doctor.plan import PodPlan

KUBERAY_MIN = (1, 3, 0)
KUBERAY_INSTALL = (
    "helm repo add kuberay https://ray-project.github.io/kuberay-helm/ && "
    "helm install kuberay-operator kuberay/kuberay-operator --version 1.3.2 "
    "-n kuberay-system --create-namespace"
)
MONITORING_CRDS = {
    "PodMonitor": "podmonitors.monitoring.coreos.com",
    "ServiceMonitor": "servicemonitors.monitoring.coreos.com",
    "PrometheusRule": "prometheusrules.monitoring.coreos.com",
}
# Where operators are found: the KubeRay chart's label, then its kustomize manifests'.
OPERATOR_SELECTORS = (
    "app.kubernetes.io/name=kuberay-operator",
    "app.kubernetes.io/component=kuberay-operator",
)


def check_version(ctx: PreflightContext) -> Finding:
    info = ctx.cluster.version()
    text = info.get("gitVersion") or f"v{info.get('major')}.{info.get('minor')}"
    have, need = semver(text), ctx.min_kube_version
    if have is None:
        return warn(f"cannot read the server version {text!r}")
    need_text = ".".join(map(str, need[:2]))
    if have[:2] < need[:2]:
        return fail(
            f"Kubernetes {text} is older than the chart supports (>= {need_text})",
            "upgrade the cluster; the chart uses APIs of Kubernetes >= " + need_text,
        )
    return ok(f"Kubernetes {text} (the chart needs >= {need_text})")


def check_namespace(ctx: PreflightContext) -> Finding:
    exists = ctx.cluster.namespace_exists(ctx.plan.namespace)
    if exists is None:
        raise Unavailable(
            f"whether namespace {ctx.plan.namespace} exists",
            f"add it to the dump: kubectl get namespace {ctx.plan.namespace} -o yaml",
        )
    return ok(f"namespace {ctx.plan.namespace} exists")


def _shape(group: PodPlan) -> str:
    """A worker group as the chart check names it: "workers 1-4 replica(s) x 1 pod(s) x 8
    nvidia.com/gpu", or per role: "prefill workers 2-4 replica(s) x ..."."""
    bounds = f"{group.min_replicas}" + (
        f"-{group.max_replicas}" if group.max_replicas != group.min_replicas else ""
    )
    return (
        f"{group.noun}s {bounds} replica(s) x {group.hosts} pod(s) x {group.gpus} "
        f"{group.gpu_resource}"
    )


def check_chart(ctx: PreflightContext) -> Iterator[Finding]:
    plan = ctx.plan
    shapes = [_shape(group) for group in plan.worker_groups]
    if plan.chart_error:
        yield fail(
            f"the chart rejects these values: {plan.chart_error}",
            "fix the values (helm template shows the same error); the checks below use the "
            "preset's defaults",
        )
    elif plan.rendered_by:
        yield ok(
            f"chart rendered with helm {plan.rendered_by}: RayService {plan.rayservice}, "
            + ", ".join(shapes)
        )
    else:
        yield warn(
            "checked the preset's defaults and your values, not a rendering of the chart",
            f"{plan.fallback_reason}, to check exactly what helm would install",
            shapes,
        )
    rendered = {o.get("kind") for o in plan.objects} - {"RayService"}  # KubeRay's check
    try:
        missing = [
            f"{kind} ({kinds.CHART_CRDS[kind]})"
            for kind in sorted(rendered & set(kinds.CHART_CRDS))
            if ctx.crd(kinds.CHART_CRDS[kind]) is None
        ]
    except Unavailable:
        missing = []  # a dump without CRDs: the KubeRay check says so
    if missing:
        yield fail(
            f"helm install would fail: the cluster does not serve {', '.join(missing)}",
            "install those CRDs, or turn the objects off (monitoring.*.force=false, "
            "gatewayRoute.enabled=false)",
        )


def _crd_problem(crd: Obj | None, version: str) -> str | None:
    if crd is None:
        return "missing"
    served = [v.get("name") for v in dig(crd, "spec", "versions", default=[]) if v.get("served")]
    if version not in served:
        return f"does not serve {version} (serves {', '.join(served) or 'nothing'})"
    if not is_true(crd, "Established"):
        return "not Established"
    return None


def check_kuberay_crds(ctx: PreflightContext | StatusContext) -> Finding:
    problems = {
        crd: _crd_problem(ctx.crd(crd), "v1")
        for crd in ("rayservices.ray.io", "rayclusters.ray.io")
    }
    bad = {k: v for k, v in problems.items() if v}
    if bad:
        return fail(
            "KubeRay CRDs: " + ", ".join(f"{k} {v}" for k, v in bad.items()),
            f"install the KubeRay operator >= 1.3 (its chart brings the CRDs): {KUBERAY_INSTALL}",
        )
    return ok("KubeRay CRDs rayservices.ray.io and rayclusters.ray.io serve ray.io/v1")


def find_operators(cluster: Cluster) -> list[Obj]:
    """KubeRay operator Deployments in any namespace."""
    found: dict[tuple, Obj] = {}
    for selector in OPERATOR_SELECTORS:
        for deploy in cluster.list(kinds.DEPLOYMENT, label_selector=selector):
            found[(namespace(deploy), name(deploy))] = deploy
    return list(found.values())


def _watched_namespaces(deploy: Obj) -> list[str] | None:
    container = (dig(deploy, "spec", "template", "spec", "containers", default=[]) or [{}])[0]
    args = [*(container.get("command") or []), *(container.get("args") or [])]
    for i, arg in enumerate(args):
        if arg.startswith("--watch-namespace"):
            value = (
                arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
            )
            return [n for n in value.split(",") if n]
    for env in container.get("env") or []:
        if env.get("name") == "WATCH_NAMESPACE" and env.get("value"):
            return [n for n in env["value"].split(",") if n]
    return None


def operator_version(deploy: Obj) -> str | None:
    containers = dig(deploy, "spec", "template", "spec", "containers", default=[]) or [{}]
    tag = image_tag(containers[0].get("image", ""))
    if semver(tag):
        return tag
    label = dig(deploy, "metadata", "labels", "app.kubernetes.io/version")
    return label if semver(label) else None


def check_kuberay_operator(ctx: PreflightContext | StatusContext) -> Finding:
    operators = find_operators(ctx.cluster)
    if not operators:
        return fail(
            "no KubeRay operator Deployment found (label app.kubernetes.io/name=kuberay-operator)",
            f"install it: {KUBERAY_INSTALL}",
        )
    deploy = operators[0]
    where = f"{namespace(deploy)}/{name(deploy)}"
    version = operator_version(deploy)
    ready = int(dig(deploy, "status", "readyReplicas", default=0) or 0)
    wanted = int(dig(deploy, "spec", "replicas", default=1) or 0)
    image = (dig(deploy, "spec", "template", "spec", "containers", default=[{}]) or [{}])[0].get(
        "image", "?"
    )
    if ready < 1:
        return fail(
            f"KubeRay operator {where} has no ready replica ({ready}/{wanted})",
            f"kubectl -n {namespace(deploy)} describe deployment {name(deploy)} "
            f"and its pods' logs; nothing reconciles the RayService until it runs",
        )
    if version is None:
        return warn(
            f"KubeRay operator {where}: {ready}/{wanted} ready, version unknown (image {image})",
            "use a released KubeRay >= 1.3 (the image tag tells the version)",
        )
    if semver(version) < KUBERAY_MIN:  # type: ignore[operator]
        return fail(
            f"KubeRay operator {version} in {where} is older than 1.3",
            "upgrade it to >= 1.3, the chart's prerequisite (RayService conditions and status "
            f"as 1.3 sets them): helm -n {namespace(deploy)} upgrade kuberay-operator "
            "kuberay/kuberay-operator --version 1.3.2",
        )
    watched = _watched_namespaces(deploy)
    if watched is not None and ctx.namespace not in watched:
        return fail(
            f"KubeRay operator {version} in {where} watches only {', '.join(watched)}",
            f"add {ctx.namespace} to the operator's watchNamespace, or install there",
        )
    return ok(f"KubeRay operator {version} in {where}: {ready}/{wanted} ready")


def check_monitoring_crds(ctx: PreflightContext) -> Finding:
    missing = [crd for crd in MONITORING_CRDS.values() if ctx.crd(crd) is None]
    if missing:
        return warn(
            "Prometheus Operator CRDs missing: " + ", ".join(missing),
            "optional: without them the chart skips its PodMonitor and PrometheusRule, so "
            "nothing scrapes the engines and no DSV4 alert fires; install kube-prometheus-stack",
        )
    return ok("Prometheus Operator CRDs present (PodMonitor, ServiceMonitor, PrometheusRule)")


def _needs(ctx: PreflightContext) -> dict[str, Decimal]:
    """What the release asks of a ResourceQuota at its minimum size: every worker group's
    (a disaggregated release's prefill and decode) minimum pods, the head, the download."""
    plan = ctx.plan
    pods = [(group, group.min_pods) for group in plan.worker_groups] + [(plan.head, 1)]
    if plan.download:
        pods.append((plan.download, 1))
    need: dict[str, Decimal] = {"pods": Decimal(sum(n for _, n in pods))}
    for pod, count in pods:
        for key, value in (
            ("requests.cpu", pod.cpu),
            ("requests.memory", pod.memory),
            ("limits.memory", pod.memory_limit),
        ):
            if value is not None:
                need[key] = need.get(key, Decimal(0)) + value * count
        if pod.gpu_resource:
            key = f"requests.{pod.gpu_resource}"
            need[key] = need.get(key, Decimal(0)) + pod.gpus * count
    if plan.storage.create:
        need["persistentvolumeclaims"] = Decimal(1)
        if plan.storage.size is not None:
            need["requests.storage"] = plan.storage.size
    return need


def check_quota(ctx: PreflightContext) -> Finding:
    quotas = ctx.cluster.list(kinds.RESOURCE_QUOTA, ctx.plan.namespace)
    if not quotas:
        return ok(f"no ResourceQuota limits namespace {ctx.plan.namespace}")
    short = []
    for need_key, need in _needs(ctx).items():
        for quota in quotas:
            hard = quantity(dig(quota, "status", "hard", need_key)) or quantity(
                dig(quota, "spec", "hard", need_key)
            )
            if hard is None:
                continue
            used = quantity(dig(quota, "status", "used", need_key)) or Decimal(0)
            if hard - used < need:
                show = gib if "memory" in need_key or "storage" in need_key else str
                short.append(
                    f"{name(quota)}: {need_key} has {show(hard - used)} left, "
                    f"the release needs {show(need)}"
                )
    if short:
        return fail(
            f"ResourceQuota in {ctx.plan.namespace} is too small for the release",
            "raise the quota (kubectl edit resourcequota) or install elsewhere",
            short,
        )
    return ok(f"ResourceQuota in {ctx.plan.namespace} leaves room for the release")


def _default_kinds(ctx: PreflightContext) -> list[str]:
    """Without a rendering: what the chart creates with default values."""
    plan = ctx.plan
    out = ["RayService", "Service", "Secret", "ServiceAccount", "NetworkPolicy"]
    out += ["PodDisruptionBudget", "ConfigMap", "Pod"]
    out += ["PersistentVolumeClaim"] if plan.storage.create else []
    out += ["Job"] if plan.download else []
    for kind in ("PodMonitor", "PrometheusRule"):
        try:
            if ctx.crd(MONITORING_CRDS[kind]) is not None:
                out.append(kind)
        except Unavailable:
            pass
    return out


def check_rbac(ctx: PreflightContext) -> Finding:
    plan = ctx.plan
    wanted: dict[tuple[str, str, str], set[str]] = {}
    objects = plan.objects or [{"kind": kind} for kind in _default_kinds(ctx)]
    for obj in objects:
        kind = obj.get("kind")
        if kind not in kinds.CHART_KINDS:
            continue
        group, plural = kinds.CHART_KINDS[kind]
        target = namespace(obj) or plan.namespace
        wanted.setdefault((group, plural, target), set()).update(kinds.RBAC_VERBS)
    # helm keeps each release revision in a Secret of the release's namespace.
    wanted.setdefault(("", "secrets", plan.namespace), set()).update(kinds.HELM_STORAGE_VERBS)
    denied = []
    for (group, plural, target), verbs in sorted(wanted.items()):
        refused = [v for v in sorted(verbs) if not ctx.cluster.can_i(v, group, plural, target)]
        if refused:
            resource = f"{plural}.{group}" if group else plural
            denied.append(f"{'/'.join(refused)} {resource} in {target}")
    if denied:
        return fail(
            f"your account may not manage {len(denied)} kind(s) the chart installs",
            "ask for a Role/RoleBinding with these verbs (or install with an account that has "
            "them)",
            denied,
        )
    return ok(
        f"RBAC allows creating, updating and deleting all {len(wanted)} kinds the release uses"
    )


CHECKS = [
    Check("cluster.version", "Cluster", check_version),
    Check("cluster.namespace", "Cluster", check_namespace),
    Check("chart.render", "Chart", check_chart),
    Check("kuberay.crds", "KubeRay", check_kuberay_crds),
    Check("kuberay.operator", "KubeRay", check_kuberay_operator),
    Check("monitoring.crds", "Monitoring", check_monitoring_crds),
]
LATE_CHECKS = [
    Check("namespace.quota", "Namespace", check_quota),
    Check("rbac.chart", "RBAC", check_rbac),
]
