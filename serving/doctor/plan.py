"""What the chart would install, as the checks need it.

Preferably `helm template` renders the chart with the user's values (and the cluster's
version and monitoring APIs), and the plan is read off the rendered objects: so the doctor
checks what would really be applied. Without helm it reproduces the templates' arithmetic
from the chart's values.yaml, the user's values and the preset table, and says so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from serving.chart import derived_files
from serving.chart.presets_table import PLATFORMS, preset_row
from serving.config.preset import Preset, PresetError, deep_merge, load_preset, parse_set
from serving.doctor.errors import DoctorError
from serving.doctor.k8s import GB, Obj, dig, quantity

REPO_HELM = derived_files.CHART_DIR.parents[1] / ".cache" / "tools" / "helm"
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class PodPlan:
    """One kind of pod the chart creates and what it asks of a node."""

    role: str
    spec: Obj  # the pod spec: nodeSelector, tolerations, affinity
    image: str = ""
    cpu: Decimal | None = None
    memory: Decimal | None = None
    memory_limit: Decimal | None = None
    gpus: int = 0
    gpu_resource: str | None = None
    shm: Decimal | None = None
    hosts: int = 1  # pods per replica (numOfHosts)
    min_replicas: int = 1
    max_replicas: int = 1
    group: str = ""  # the KubeRay worker group's name

    @property
    def noun(self) -> str:
        """How findings name this pod: "worker", or a disaggregated role's "prefill worker"."""
        return "worker" if self.role == "worker" else f"{self.role} worker"

    @property
    def values_key(self) -> str:
        """Where the chart's values size a worker group (its replicas and resources)."""
        return "workers" if self.role == "worker" else f"disaggregation.{self.role}"

    @property
    def min_pods(self) -> int:
        return self.min_replicas * self.hosts

    @property
    def max_pods(self) -> int:
        return self.max_replicas * self.hosts


@dataclass
class StoragePlan:
    claim: str
    create: bool
    access_modes: list[str]
    storage_class: str | None  # None: the cluster's default class
    size: Decimal | None
    size_text: str = ""  # as written in the values ("2Ti")


@dataclass
class Plan:
    release: str
    namespace: str
    preset_name: str
    platform: str
    preset: Preset
    head: PodPlan
    # One group ("worker"), or a disaggregated release's "prefill" and "decode" groups: each
    # with its own replica bounds and resources.
    worker_groups: list[PodPlan]
    storage: StoragePlan
    download: PodPlan | None
    local_cache: bool
    rendered_by: str | None  # "helm v4.1.4", or None for the preset fallback
    fallback_reason: str | None = None
    chart_error: str | None = None
    objects: list[Obj] = field(default_factory=list)
    rayservice: str = ""

    @property
    def workers(self) -> PodPlan:
        """The first worker group, for what every group shares: the pod spec's scheduling,
        image and volumes, the GPU resource and GPUs per pod (the preset's)."""
        return self.worker_groups[0]

    @property
    def model_size(self) -> Decimal | None:
        size = self.preset.model.size_gb
        return None if size is None else Decimal(str(size)) * GB

    @property
    def gpu_type(self) -> str | None:
        return self.preset.accelerator.type


def find_helm(explicit: str | None) -> str | None:
    for candidate in (explicit, os.environ.get("HELM"), str(REPO_HELM), shutil.which("helm")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _read_values(path: str) -> dict:
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise DoctorError(f"values file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise DoctorError(f"values file {path} is not valid YAML: {exc}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise DoctorError(f"values file {path} must be a mapping")
    return data


def image_arches(chart: Path, user: dict, platform: str) -> tuple[str, ...]:
    """The architectures of the image the chart would run: ``image.<platform>.arches``
    from the chart's values.yaml, as the user's values leave it."""
    defaults = _read_values(str(chart / "values.yaml"))
    merged = deep_merge(defaults, user)
    return tuple(dig(merged, "image", platform, "arches", default=[]) or ())


def user_values(values_files: list[str], sets: list[str]) -> dict:
    merged: dict = {}
    for path in values_files:
        merged = deep_merge(merged, _read_values(path))
    for assignment in sets:
        try:
            merged = deep_merge(merged, parse_set(assignment))
        except PresetError as exc:
            raise DoctorError(str(exc)) from None
    return merged


def _fullname(release: str, values: dict) -> str:
    # dsv4.fullname in _helpers.tpl
    if values.get("fullnameOverride"):
        return str(values["fullnameOverride"])[:40].rstrip("-")
    chart_name = values.get("nameOverride") or "dsv4-serve"
    full = release if chart_name in release else f"{release}-{chart_name}"
    return full[:40].rstrip("-")


def render(
    helm: str,
    chart: Path,
    release: str,
    namespace: str,
    values_files: list[str],
    sets: list[str],
    kube_version: str | None,
    api_versions: list[str],
) -> tuple[list[Obj], str]:
    """`helm template` with the user's values; raises DoctorError with helm's message."""
    version = subprocess.run(
        [helm, "version", "--short"], capture_output=True, text=True, timeout=30
    ).stdout.strip()
    cmd = [helm, "template", release, str(chart), "--namespace", namespace]
    for path in values_files:
        cmd += ["-f", path]
    for assignment in sets:
        cmd += ["--set", assignment]
    if kube_version:
        cmd += ["--kube-version", kube_version]
    for api in api_versions:
        cmd += ["--api-versions", api]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise DoctorError(_helm_error(out.stderr) or f"helm exited with {out.returncode}")
    objects = [d for d in yaml.load_all(out.stdout, Loader=_Loader) if isinstance(d, dict)]
    return objects, version.split("+")[0] or "helm"


def _helm_error(stderr: str) -> str:
    """helm's `Error: ...` paragraph on one line, without the template position."""
    lines = stderr.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("Error:")), None)
    if start is None:
        return " ".join(ln.strip() for ln in lines if ln.strip())[:500]
    kept = []
    for line in lines[start:]:
        if not line.strip() or line.startswith("Use --debug"):
            break
        kept.append(line.strip().removeprefix("- "))
    message = " ".join(kept).removeprefix("Error: ")
    return re.sub(r"^execution error at \([^)]*\): ", "", message)


def _container(spec: Obj) -> Obj:
    return (spec.get("containers") or [{}])[0]


def pod_plan(role: str, spec: Obj, gpu_resource: str | None) -> PodPlan:
    container = _container(spec)
    requests = dig(container, "resources", "requests", default={})
    limits = dig(container, "resources", "limits", default={})
    shm = None
    for volume in spec.get("volumes") or []:
        if volume.get("name") == "dshm":
            shm = quantity(dig(volume, "emptyDir", "sizeLimit"))
    gpus = 0
    if gpu_resource:
        gpus = int(quantity(limits.get(gpu_resource) or requests.get(gpu_resource)) or 0)
    return PodPlan(
        role=role,
        spec=spec,
        image=container.get("image", ""),
        cpu=quantity(requests.get("cpu")),
        memory=quantity(requests.get("memory")),
        memory_limit=quantity(limits.get("memory")),
        gpus=gpus,
        gpu_resource=gpu_resource if gpus else None,
        shm=shm,
    )


def worker_group(group: Obj, gpu_resource: str) -> PodPlan:
    """One rendered worker group; a disaggregated release's pods carry their role's label."""
    template = group.get("template") or {}
    role = dig(template, "metadata", "labels", "dsv4-serve/role") or "worker"
    pod = pod_plan(role, template.get("spec") or {}, gpu_resource)
    pod.group = group.get("groupName", "")
    pod.hosts = int(group.get("numOfHosts") or 1)
    pod.min_replicas = int(group.get("minReplicas", group.get("replicas", 1)))
    pod.max_replicas = int(group.get("maxReplicas", pod.min_replicas))
    return pod


def _claim_name(spec: Obj) -> str | None:
    for volume in spec.get("volumes") or []:
        if volume.get("name") == "model":
            return dig(volume, "persistentVolumeClaim", "claimName")
    return None


def plan_from_objects(
    objects: list[Obj], release: str, namespace: str, preset: str, platform: str, rendered_by: str
) -> Plan:
    gpu_resource = "amd.com/gpu" if platform == "rocm" else "nvidia.com/gpu"
    (service,) = [o for o in objects if o.get("kind") == "RayService"]
    cluster = dig(service, "spec", "rayClusterConfig", default={})
    head = pod_plan("head", dig(cluster, "headGroupSpec", "template", "spec", default={}), None)
    groups = [
        worker_group(group, gpu_resource) for group in cluster.get("workerGroupSpecs") or [{}]
    ]
    workers = groups[0]
    claim = _claim_name(workers.spec) or ""
    # The weights' claim, not the JIT cache's (jitCache: its own claim and volume).
    pvcs = [
        o
        for o in objects
        if o.get("kind") == "PersistentVolumeClaim" and dig(o, "metadata", "name") == claim
    ]
    if pvcs:
        pvc = pvcs[0]
        storage = StoragePlan(
            claim=dig(pvc, "metadata", "name"),
            create=True,
            access_modes=dig(pvc, "spec", "accessModes", default=[]),
            storage_class=dig(pvc, "spec", "storageClassName"),
            size=quantity(dig(pvc, "spec", "resources", "requests", "storage")),
            size_text=str(dig(pvc, "spec", "resources", "requests", "storage", default="")),
        )
    else:
        storage = StoragePlan(claim, False, [], None, None)
    download = None
    for job in (o for o in objects if o.get("kind") == "Job"):
        if dig(job, "metadata", "labels", "app.kubernetes.io/component") == "model-download":
            download = pod_plan("download", dig(job, "spec", "template", "spec"), None)
    local_cache = any(
        v.get("hostPath") and v.get("name") == "model-cache"
        for v in workers.spec.get("volumes") or []
    )
    return Plan(
        release=release,
        namespace=namespace,
        preset_name=preset,
        platform=platform,
        preset=load_preset(preset),
        head=head,
        worker_groups=groups,
        storage=storage,
        download=download,
        local_cache=local_cache,
        rendered_by=rendered_by,
        objects=objects,
        rayservice=dig(service, "metadata", "name", default=""),
    )


def plan_from_values(
    values: dict, release: str, namespace: str, preset: str, platform: str, reason: str
) -> Plan:
    """The templates' arithmetic without helm (rayservice.yaml, _pod.tpl, pvc.yaml)."""
    row = preset_row(preset)
    gpu_resource = "amd.com/gpu" if platform == "rocm" else "nvidia.com/gpu"
    scheduling = values.get("scheduling") or {}
    spec = {
        k: v
        for k, v in {
            "nodeSelector": scheduling.get("nodeSelector"),
            "tolerations": scheduling.get("tolerations"),
            "affinity": scheduling.get("affinity"),
        }.items()
        if v
    }
    image_ref = dig(values, "image", platform, default={})
    image = f"{image_ref.get('repository', '?')}:{image_ref.get('tag', '?')}" if image_ref else ""
    head_res = dig(values, "head", "resources", default={})
    worker_res = dig(values, "workers", "resources", default={})
    workers_values = values.get("workers") or {}
    head = PodPlan(
        "head",
        spec,
        image,
        cpu=quantity(head_res.get("cpu")),
        memory=quantity(head_res.get("memory")),
        memory_limit=quantity(head_res.get("memory")),
    )

    def group(role: str, res: dict, minimum: int, maximum: int) -> PodPlan:
        # An unset memory is the preset's node default (rayservice.yaml).
        memory = quantity(res.get("memory") or worker_res.get("memory") or row["workerMemory"])
        suffix = "workers" if role == "worker" else role
        return PodPlan(
            role,
            spec,
            image,
            cpu=quantity(res.get("cpu") or worker_res.get("cpu")),
            memory=memory,
            memory_limit=memory,
            gpus=int(row["gpusPerPod"]),
            gpu_resource=gpu_resource,
            shm=quantity(workers_values.get("shmSize")),
            hosts=int(row["nodesPerReplica"]),
            min_replicas=minimum,
            max_replicas=maximum,
            group=f"{str(row['gpuType']).lower()}-{suffix}",
        )

    disaggregation = values.get("disaggregation") or {}
    if disaggregation.get("enabled"):
        groups = []
        for role in ("prefill", "decode"):
            role_values = disaggregation.get(role) or {}
            low = int(dig(role_values, "minReplicas", default=1))
            high = role_values.get("maxReplicas")
            groups.append(
                group(
                    role,
                    role_values.get("resources") or {},
                    low,
                    low if high is None else int(high),
                )
            )
    else:
        minimum = workers_values.get("minReplicas")
        maximum = workers_values.get("maxReplicas")
        groups = [
            group(
                "worker",
                {},
                int(row["minReplicas"] if minimum is None else minimum),
                int(row["maxReplicas"] if maximum is None else maximum),
            )
        ]
    pvc = dig(values, "model", "pvc", default={})
    existing = pvc.get("existingClaim") or ""
    fullname = _fullname(release, values)
    storage = StoragePlan(
        claim=existing or f"{fullname}-model",
        create=not existing and pvc.get("create", True),
        access_modes=pvc.get("accessModes") or ["ReadWriteMany"],
        storage_class=pvc.get("storageClassName") or None,
        size=quantity(pvc.get("size")),
        size_text=str(pvc.get("size") or ""),
    )
    download = None
    if dig(values, "model", "download", "enabled"):
        download = PodPlan("download", spec, dig(values, "model", "download", "image", default=""))
    return Plan(
        release=release,
        namespace=namespace,
        preset_name=preset,
        platform=platform,
        preset=load_preset(preset),
        head=head,
        worker_groups=groups,
        storage=storage,
        download=download,
        local_cache=bool(dig(values, "model", "localCache", "enabled")),
        rendered_by=None,
        fallback_reason=reason,
        rayservice=fullname,
    )


def platform_of(preset: str) -> str:
    try:
        return PLATFORMS[load_preset(preset).accelerator.kind]
    except KeyError:
        raise DoctorError(
            f"preset {preset!r} runs on the CPU; the chart and the doctor are for GPU presets"
        ) from None


def make_plan(
    preset: str,
    platform: str | None,
    release: str,
    namespace: str,
    values_files: list[str],
    sets: list[str],
    helm: str | None,
    chart: Path,
    kube_version: str | None,
    api_versions: list[str],
) -> Plan:
    try:
        load_preset(preset)
    except PresetError as exc:
        raise DoctorError(str(exc).splitlines()[0]) from None
    platform = platform or platform_of(preset)
    merged_user = user_values(values_files, sets)  # validates the files before helm sees them
    forced = [f"preset={preset}", f"platform={platform}"]
    chart_ok = (chart / "Chart.yaml").is_file()
    chart_error = None
    if helm and chart_ok:
        try:
            objects, version = render(
                helm,
                chart,
                release,
                namespace,
                values_files,
                [*sets, *forced],
                kube_version,
                api_versions,
            )
            return plan_from_objects(objects, release, namespace, preset, platform, version)
        except DoctorError as exc:
            chart_error = str(exc)
        except (OSError, subprocess.SubprocessError) as exc:
            chart_error = f"helm could not run: {exc}"
    if not chart_ok:
        reason = f"the chart is not at {chart} (pass --chart DIR)"
    elif chart_error:
        reason = "helm rejected the values"
    else:
        reason = "helm was not found (install it, set HELM, or pass --helm PATH)"
    base = _read_values(str(chart / "values.yaml")) if chart_ok else {}
    values = deep_merge(base, merged_user)
    values.update(preset=preset, platform=platform)
    plan = plan_from_values(values, release, namespace, preset, platform, reason)
    plan.chart_error = chart_error
    return plan
