"""Cluster dumps for the doctor's tests, built from what the API server returns.

Nodes carry the labels, capacity/allocatable, conditions, taints and nodeInfo of real
nodes (NVIDIA GPU feature discovery and the AMD node labeller's labels); CRDs are the
vendored files (tests/support/reference/crds) with the status the API server adds; the
release's objects are the chart rendered by the real helm, given the metadata the API
server adds and the statuses KubeRay, the scheduler, the kubelet and the Job controller
set. `test_doctor_fixtures.py` validates the built-in kinds with kubernetes-validate and
the custom ones against the CRDs.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import tempfile
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from serving.chart import derived_files
from serving.doctor import kinds
from serving.doctor.plan import find_helm, render

Obj = dict[str, Any]
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
NAMESPACE = "dsv4"
RELEASE = "dsv4"
OPERATOR_NAMESPACE = "kuberay-system"
SERVICE = "dsv4-dsv4-serve"  # dsv4.fullname for release dsv4
KUBE_VERSION = "v1.30.4"
GiB = 1024**3


def _image_id(image: str) -> str:
    return f"{image.split(':')[0]}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def ts(minutes_ago: float) -> str:
    return (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_ts(minutes_ago: float) -> str:
    return (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def uid(*parts: str) -> str:
    h = hashlib.sha1("/".join(parts).encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _rv(*parts: str) -> str:
    return str(int(hashlib.sha1("/".join(parts).encode()).hexdigest()[:7], 16))


def meta(kind: str, name: str, namespace: str | None = None, age_min: float = 600, **extra) -> Obj:
    out: Obj = {
        "name": name,
        "uid": uid(kind, namespace or "", name),
        "resourceVersion": _rv(kind, name),
        "creationTimestamp": ts(age_min),
    }
    if namespace:
        out["namespace"] = namespace
    out.update({k: v for k, v in extra.items() if v is not None})
    return out


# -- nodes ----------------------------------------------------------------------------
GPU_LABELS = {
    "H200": {
        "nvidia.com/gpu.product": "NVIDIA-H200",
        "nvidia.com/gpu.memory": "143771",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
    },
    "H100": {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
    },
    "GB300": {
        "nvidia.com/gpu.product": "NVIDIA-GB300",
        "nvidia.com/gpu.memory": "284208",
        "nvidia.com/gpu.family": "undefined",
        "nvidia.com/gpu.compute.major": "10",
        "nvidia.com/gpu.compute.minor": "3",
    },
    "MI300X": {
        "amd.com/gpu.product-name": "AMD_Instinct_MI300X",
        "beta.amd.com/gpu.product-name": "AMD_Instinct_MI300X",
        "amd.com/gpu.device-id": "74a1",
        "beta.amd.com/gpu.device-id": "74a1",
        "amd.com/gpu.family": "AI",
        "amd.com/gpu.vram": "192G",
        "amd.com/compute-partitioning-supported": "true",
        "amd.com/memory-partitioning-supported": "true",
    },
}
INSTANCE_TYPES = {"H200": "p5en.48xlarge", "H100": "p5.48xlarge", "GB300": "gb300-nvl72-tray"}


def node(
    name: str,
    gpu: str | None = "H200",
    gpus: int = 8,
    allocatable_gpus: int | None = None,
    arch: str = "amd64",
    memory_gi: int = 2048,
    cpu: int = 192,
    taints: list[Obj] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    extra_labels: dict[str, str] | None = None,
) -> Obj:
    """A Node as `kubectl get node -o yaml` shows it (kubelet + GPU operator labels)."""
    amd = gpu is not None and gpu.startswith("MI")
    labels = {
        "beta.kubernetes.io/arch": arch,
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": arch,
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": INSTANCE_TYPES.get(gpu or "", "m7i.8xlarge"),
        "topology.kubernetes.io/zone": "zone-a",
    }
    capacity = {
        "cpu": str(cpu),
        "ephemeral-storage": "3750874828Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{memory_gi * 1024 * 1024 + 6 * 1024 * 1024}Ki",
        "pods": "110",
    }
    allocatable = {
        "cpu": f"{cpu * 1000 - 300}m",
        "ephemeral-storage": "3456811269398",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{memory_gi * 1024 * 1024}Ki",
        "pods": "110",
    }
    if gpu:
        resource = "amd.com/gpu" if amd else "nvidia.com/gpu"
        capacity[resource] = str(gpus)
        allocatable[resource] = str(gpus if allocatable_gpus is None else allocatable_gpus)
        labels.update(GPU_LABELS[gpu])
        if amd:
            labels["feature.node.kubernetes.io/amd-gpu"] = "true"
        else:
            labels.update(
                {
                    "feature.node.kubernetes.io/pci-10de.present": "true",
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.count": str(gpus),
                    "nvidia.com/gpu.replicas": "1",
                    "nvidia.com/gpu.sharing-strategy": "none",
                    "nvidia.com/mig.capable": "false",
                    "nvidia.com/cuda.driver.major": "570",
                    "nvidia.com/cuda.driver.minor": "148",
                    "nvidia.com/cuda.driver.rev": "08",
                    "nvidia.com/cuda.runtime.major": "12",
                    "nvidia.com/cuda.runtime.minor": "8",
                }
            )
    labels.update(extra_labels or {})
    heartbeat = ts(0.5)
    conditions = [
        (
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        (
            "Ready",
            "True" if ready else "Unknown",
            "KubeletReady" if ready else "NodeStatusUnknown",
            "kubelet is posting ready status" if ready else "Kubelet stopped posting node status.",
        ),
    ]
    spec: Obj = {"podCIDR": "10.244.3.0/24", "podCIDRs": ["10.244.3.0/24"]}
    spec["providerID"] = f"aws:///zone-a/i-{uid(name)[:17].replace('-', '')}"
    all_taints = list(taints or [])
    if unschedulable:
        spec["unschedulable"] = True
        all_taints.append(
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": ts(30)}
        )
    if not ready:
        all_taints.append(
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": ts(20)}
        )
    if all_taints:
        spec["taints"] = all_taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta(
            "Node",
            name,
            age_min=40000,
            labels=labels,
            annotations={
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        ),
        "spec": spec,
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.1.{int(uid(name)[:2], 16) % 250 + 2}"},
                {"type": "Hostname", "address": name},
            ],
            "allocatable": allocatable,
            "capacity": capacity,
            "conditions": [
                {
                    "type": t,
                    "status": s,
                    "reason": r,
                    "message": m,
                    "lastHeartbeatTime": heartbeat,
                    "lastTransitionTime": ts(40000),
                }
                for t, s, r, m in conditions
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": arch,
                "bootID": uid(name, "boot"),
                "containerRuntimeVersion": "containerd://1.7.27",
                "kernelVersion": "6.8.0-1021-aws" if arch == "amd64" else "6.8.0-1021-nvidia-64k",
                "kubeProxyVersion": KUBE_VERSION,
                "kubeletVersion": KUBE_VERSION,
                "machineID": uid(name, "machine").replace("-", ""),
                "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04.5 LTS",
                "systemUUID": uid(name, "system"),
            },
        },
    }


def taint(key: str, value: str | None, effect: str = "NoSchedule") -> Obj:
    out = {"key": key, "effect": effect}
    if value is not None:
        out["value"] = value
    return out


# -- cluster-wide objects ---------------------------------------------------------------
def namespace(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": meta(
            "Namespace", name, age_min=2000, labels={"kubernetes.io/metadata.name": name}
        ),
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def storage_class(name: str, provisioner: str, default: bool = False) -> Obj:
    notes = {"storageclass.kubernetes.io/is-default-class": "true"} if default else None
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": meta("StorageClass", name, age_min=40000, annotations=notes),
        "provisioner": provisioner,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate" if "nfs" in provisioner else "WaitForFirstConsumer",
        "allowVolumeExpansion": True,
    }


def crd(shared_dir: Path, file: str) -> Obj:
    """A CRD from tests/support/reference/crds as the API server returns it (metadata and status).

    Shared between calls (1 MB each): tests must not change it."""
    return _crd(str(shared_dir / "crds" / file))


@cache
def _crd(path: str) -> Obj:
    obj = yaml.load(Path(path).read_text(), Loader=yaml.CSafeLoader)
    name = obj["metadata"]["name"]
    obj["metadata"].update(meta("CustomResourceDefinition", name, age_min=30000))
    names = obj["spec"]["names"]
    obj["status"] = {
        "acceptedNames": {k: v for k, v in names.items()},
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": ts(30000),
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": ts(30000),
            },
        ],
        "storedVersions": [v["name"] for v in obj["spec"]["versions"] if v.get("storage")],
    }
    return obj


RAY_CRDS = ["ray.io_rayservices.yaml", "ray.io_rayclusters.yaml"]
MONITORING_CRDS = [
    "monitoring.coreos.com_podmonitors.yaml",
    "monitoring.coreos.com_servicemonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
]


def kuberay_operator(version: str = "v1.3.2", ready: int = 1, watch: str | None = None) -> Obj:
    """The Deployment the kuberay-operator chart creates (release kuberay-operator)."""
    labels = {
        "app.kubernetes.io/name": "kuberay-operator",
        "app.kubernetes.io/instance": "kuberay-operator",
        "app.kubernetes.io/managed-by": "Helm",
        "app.kubernetes.io/version": version.lstrip("v"),
        "helm.sh/chart": f"kuberay-operator-{version.lstrip('v')}",
    }
    args = ["--feature-gates=RayClusterStatusConditions=true"]
    if watch:
        args += ["--watch-namespace", watch]
    status: Obj = {
        "observedGeneration": 1,
        "replicas": 1,
        "updatedReplicas": 1,
        "conditions": [
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable",
                "message": 'ReplicaSet "kuberay-operator-6d8f9c7b5d" has successfully progressed.',
                "lastTransitionTime": ts(9000),
                "lastUpdateTime": ts(9000),
            },
            {
                "type": "Available",
                "status": "True" if ready else "False",
                "reason": "MinimumReplicasAvailable" if ready else "MinimumReplicasUnavailable",
                "message": "Deployment has minimum availability."
                if ready
                else "Deployment does not have minimum availability.",
                "lastTransitionTime": ts(9000),
                "lastUpdateTime": ts(9000),
            },
        ],
    }
    if ready:
        status.update(readyReplicas=ready, availableReplicas=ready)
    else:
        status["unavailableReplicas"] = 1
    selector = {
        "app.kubernetes.io/name": "kuberay-operator",
        "app.kubernetes.io/instance": "kuberay-operator",
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(
            "Deployment",
            "kuberay-operator",
            OPERATOR_NAMESPACE,
            age_min=9000,
            labels=labels,
            generation=1,
            annotations={
                "deployment.kubernetes.io/revision": "1",
                "meta.helm.sh/release-name": "kuberay-operator",
                "meta.helm.sh/release-namespace": OPERATOR_NAMESPACE,
            },
        ),
        "spec": {
            "replicas": 1,
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {
                    "labels": {**selector, "app.kubernetes.io/component": "kuberay-operator"}
                },
                "spec": {
                    "serviceAccountName": "kuberay-operator",
                    "containers": [
                        {
                            "name": "kuberay-operator",
                            "image": f"quay.io/kuberay/operator:{version}",
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["/manager"],
                            "args": args,
                            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                            "resources": {"limits": {"cpu": "100m", "memory": "512Mi"}},
                        }
                    ],
                },
            },
        },
        "status": status,
    }


def version_doc(git_version: str = KUBE_VERSION) -> Obj:
    """`kubectl version -o yaml` (client and server)."""
    major, minor = git_version.lstrip("v").split(".")[:2]
    return {
        "clientVersion": {
            "buildDate": "2025-05-15T08:27:33Z",
            "compiler": "gc",
            "gitCommit": "9894294ef13a5b32803e3ca2c0d620a088cc84d1",
            "gitTreeState": "clean",
            "gitVersion": "v1.32.5",
            "goVersion": "go1.23.8",
            "major": "1",
            "minor": "32",
            "platform": "linux/amd64",
        },
        "kustomizeVersion": "v5.5.0",
        "serverVersion": {
            "buildDate": "2025-08-12T16:05:18Z",
            "compiler": "gc",
            "gitCommit": "a8db4b1b8e0b7f3c1bd0e4e8d4a6f4a7a5c1d2e3",
            "gitTreeState": "clean",
            "gitVersion": git_version,
            "goVersion": "go1.22.5",
            "major": major,
            "minor": minor,
            "platform": "linux/amd64",
        },
    }


def access_reviews(
    namespace: str = NAMESPACE, denied: set[tuple[str, str]] = frozenset()
) -> list[Obj]:
    """What `kubectl create -o yaml -f ssar.yaml` returns, for every kind/verb preflight asks.

    `denied` holds (verb, plural) pairs the account may not do.
    """
    out = []
    for kind, (group, plural) in sorted(kinds.CHART_KINDS.items()):
        verbs = set(kinds.RBAC_VERBS)
        if kind == "Secret":
            verbs |= set(kinds.HELM_STORAGE_VERBS)
        for verb in sorted(verbs):
            allowed = (verb, plural) not in denied
            status: Obj = {"allowed": allowed}
            if allowed:
                status["reason"] = (
                    f'RBAC: allowed by RoleBinding "dsv4-deployers/{namespace}" of ClusterRole '
                    '"admin" to Group "platform-team"'
                )
            attrs = {"namespace": namespace, "verb": verb, "resource": plural}
            if group:
                attrs["group"] = group
            out.append(
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SelfSubjectAccessReview",
                    "metadata": {"creationTimestamp": None},
                    "spec": {"resourceAttributes": attrs},
                    "status": status,
                }
            )
    return out


def cluster_base(
    shared_dir: Path,
    nodes: list[Obj],
    storage: list[Obj] | None = None,
    operator: Obj | None = "default",  # type: ignore[assignment]
    monitoring: bool = True,
    namespaces: tuple[str, ...] = ("default", "kube-system", OPERATOR_NAMESPACE, NAMESPACE),
) -> list[Obj]:
    objects: list[Obj] = [namespace(n) for n in namespaces]
    objects += nodes
    objects += (
        storage
        if storage is not None
        else [
            storage_class("gp3", "ebs.csi.aws.com", default=True),
            storage_class("efs-models", "efs.csi.aws.com"),
        ]
    )
    objects += [crd(shared_dir, f) for f in RAY_CRDS]
    if monitoring:
        objects += [crd(shared_dir, f) for f in MONITORING_CRDS]
    if operator == "default":
        operator = kuberay_operator()
    if operator is not None:
        objects.append(operator)
    objects += access_reviews()
    return objects


# -- pods that occupy GPUs (another team's training job) --------------------------------
def busy_pod(node_name: str, gpus: int, resource: str = "nvidia.com/gpu") -> Obj:
    name = f"trainer-{node_name[-1]}-0"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta("Pod", name, "research", age_min=3000, labels={"app": "trainer"}),
        "spec": {
            "nodeName": node_name,
            "containers": [
                {
                    "name": "train",
                    "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                    "resources": {
                        "limits": {resource: str(gpus)},
                        "requests": {resource: str(gpus)},
                    },
                }
            ],
            "restartPolicy": "Never",
        },
        "status": {
            "phase": "Running",
            "hostIP": "10.0.1.20",
            "podIP": "10.244.3.17",
            "qosClass": "BestEffort",
            "startTime": ts(2990),
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": ts(2980)},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(3000)},
            ],
        },
    }


# -- the release: the chart rendered by helm, as installed ------------------------------
@cache
def _rendered(preset: str, platform: str, values_json: str) -> tuple[Obj, ...]:
    helm = find_helm(None)
    assert helm, "helm missing: `make deps` installs it into .cache/tools"
    values = json.loads(values_json)
    # As installed: with the operator's namespace the chart requires (where kuberay_operator runs).
    operator = values.setdefault("networkPolicy", {}).setdefault("kuberayOperator", {})
    operator.setdefault("namespace", OPERATOR_NAMESPACE)
    sets = [f"preset={preset}", f"platform={platform}"]
    files = []
    if values:
        digest = hashlib.sha1(values_json.encode()).hexdigest()[:10]
        path = Path(tempfile.gettempdir()) / f"doctor-values-{digest}.yaml"
        path.write_text(yaml.safe_dump(values))
        files.append(str(path))
    objects, _ = render(
        helm,
        derived_files.CHART_DIR,
        RELEASE,
        NAMESPACE,
        files,
        sets,
        KUBE_VERSION,
        [f"monitoring.coreos.com/v1/{k}" for k in ("PodMonitor", "PrometheusRule")],
    )
    return tuple(objects)


def rendered(
    preset: str = "h200-flash-mtp", platform: str = "cuda", values: Obj | None = None
) -> list[Obj]:
    return copy.deepcopy(
        list(_rendered(preset, platform, json.dumps(values or {}, sort_keys=True)))
    )


def installed(objects: list[Obj], age_min: float = 45) -> list[Obj]:
    """The rendered objects after `helm install`: namespace, uid, helm's annotations."""
    out = []
    for obj in objects:
        if dict(obj.get("metadata", {}).get("annotations") or {}).get("helm.sh/hook") == "test":
            continue  # `helm test` pods exist only while a test runs
        obj = copy.deepcopy(obj)
        metadata = obj["metadata"]
        metadata.setdefault("namespace", NAMESPACE)
        notes = metadata.setdefault("annotations", {})
        notes.update(
            {"meta.helm.sh/release-name": RELEASE, "meta.helm.sh/release-namespace": NAMESPACE}
        )
        metadata.update(meta(obj["kind"], metadata["name"], metadata["namespace"], age_min))
        if obj["kind"] in ("RayService", "Job", "PodDisruptionBudget", "NetworkPolicy"):
            metadata["generation"] = 1
        out.append(obj)
    return out


def by_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind]


def cond(kind: str, status: str, reason: str, message: str, minutes_ago: float, **extra) -> Obj:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": ts(minutes_ago),
        **extra,
    }


def raycluster(
    service: Obj,
    suffix: str = "x7k2p",
    ready_workers: int = 0,
    head_ready: bool = True,
    age_min: float = 44,
) -> Obj:
    """The RayCluster KubeRay creates for a RayService, with the status it sets."""
    spec = copy.deepcopy(service["spec"]["rayClusterConfig"])
    name = f"{service['metadata']['name']}-{suffix}"
    group = spec["workerGroupSpecs"][0]
    hosts = group.get("numOfHosts", 1)
    desired = group["replicas"] * hosts
    container = group["template"]["spec"]["containers"][0]
    gpus = sum(int(v) for k, v in container["resources"]["limits"].items() if k.endswith("/gpu"))
    status: Obj = {
        "desiredCPU": str(8 + int(container["resources"]["requests"]["cpu"]) * desired),
        "desiredGPU": str(gpus * desired),
        "desiredMemory": "1532Gi",
        "desiredTPU": "0",
        "desiredWorkerReplicas": desired,
        "minWorkerReplicas": group["minReplicas"] * hosts,
        "maxWorkerReplicas": group["maxReplicas"] * hosts,
        "endpoints": {
            "client": "10001",
            "dashboard": "8265",
            "gcs-server": "6379",
            "metrics": "8080",
            "serve": "8000",
        },
        "head": {
            "podIP": "10.244.1.23",
            "podName": f"{name}-head-q8w4z",
            "serviceIP": "10.244.1.23",
            "serviceName": f"{name}-head-svc",
        },
        "lastUpdateTime": ts(1),
        "observedGeneration": 1,
        "conditions": [
            cond(
                "HeadPodReady",
                "True" if head_ready else "False",
                "HeadPodRunningAndReady" if head_ready else "HeadPodNotFound",
                "" if head_ready else "RayCluster head Pod is not found",
                age_min - 3,
            ),
            cond(
                "RayClusterProvisioned",
                "True" if ready_workers >= desired else "False",
                "AllPodRunningAndReadyFirstTime"
                if ready_workers >= desired
                else "RayClusterPodsProvisioning",
                "All Ray Pods are ready for the first time"
                if ready_workers >= desired
                else "RayCluster Pods are being provisioned for first time",
                age_min - 3 if ready_workers < desired else 5,
            ),
        ],
    }
    if ready_workers:
        status.update(readyWorkerReplicas=ready_workers, availableWorkerReplicas=ready_workers)
    if ready_workers >= desired:
        status["state"] = "ready"
        status["stateTransitionTimes"] = {"ready": ts(5)}
    svc_meta = service["metadata"]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": meta(
            "RayCluster",
            name,
            svc_meta["namespace"],
            age_min,
            generation=1,
            labels={
                "ray.io/originated-from-cr-name": svc_meta["name"],
                "ray.io/originated-from-crd": "RayService",
            },
            annotations={"ray.io/enable-serve-service": "true"},
            ownerReferences=[
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayService",
                    "name": svc_meta["name"],
                    "uid": svc_meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        ),
        "spec": spec,
        "status": status,
    }


def ray_pod(
    cluster: Obj,
    node_type: str,
    suffix: str,
    node_name: str | None,
    phase: str = "Running",
    ready: bool = True,
    age_min: float = 44,
    container_status: Obj | None = None,
    init_statuses: list[Obj] | None = None,
    unschedulable_message: str | None = None,
) -> Obj:
    """A head or worker pod as KubeRay creates it from the group's template."""
    spec = cluster["spec"]
    if node_type == "head":
        template, group = spec["headGroupSpec"]["template"], "headgroup"
        name = f"{cluster['metadata']['name']}-head-{suffix}"
    else:
        worker = spec["workerGroupSpecs"][0]
        template, group = worker["template"], worker["groupName"]
        name = f"{cluster['metadata']['name']}-{group}-worker-{suffix}"
    pod_spec = copy.deepcopy(template["spec"])
    container = pod_spec["containers"][0]
    container["command"] = ["/bin/bash", "-c", "--"]
    address = (
        ""
        if node_type == "head"
        else f" --address={cluster['metadata']['name']}-head-svc.{NAMESPACE}.svc.cluster.local:6379"
    )
    head = " --head" if node_type == "head" else ""
    container["args"] = [
        f"ulimit -n 65536; ray start{head} --block --dashboard-agent-listen-port=52365{address}"
    ]
    container.setdefault("env", []).append(
        {"name": "RAY_CLUSTER_NAME", "value": cluster["metadata"]["name"]}
    )
    pod_spec.update(
        restartPolicy="Always", dnsPolicy="ClusterFirst", schedulerName="default-scheduler"
    )
    if node_name:
        pod_spec["nodeName"] = node_name
    labels = {
        **template["metadata"]["labels"],
        "ray.io/cluster": cluster["metadata"]["name"],
        "ray.io/group": group,
        "ray.io/identifier": f"{cluster['metadata']['name']}-{node_type}",
        "ray.io/is-ray-node": "yes",
        "ray.io/node-type": node_type,
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    conditions = []
    status: Obj = {"phase": phase, "qosClass": "Burstable"}
    if node_name:
        status.update(hostIP="10.0.1.11", podIP="10.244.3.41", startTime=ts(age_min - 0.2))
        status["podIPs"] = [{"ip": "10.244.3.41"}]
        conditions += [
            {
                "type": "PodReadyToStartContainers",
                "status": "True",
                "lastTransitionTime": ts(age_min - 1),
            },
            {"type": "Initialized", "status": "True", "lastTransitionTime": ts(age_min - 1)},
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "lastTransitionTime": ts(age_min - 2),
                **(
                    {}
                    if ready
                    else {
                        "reason": "ContainersNotReady",
                        "message": f"containers with unready status: [{container['name']}]",
                    }
                ),
            },
            {
                "type": "ContainersReady",
                "status": "True" if ready else "False",
                "lastTransitionTime": ts(age_min - 2),
                **(
                    {}
                    if ready
                    else {
                        "reason": "ContainersNotReady",
                        "message": f"containers with unready status: [{container['name']}]",
                    }
                ),
            },
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(age_min)},
        ]
        base_status = {
            "name": container["name"],
            "image": container["image"],
            "imageID": _image_id(container["image"]),
            "containerID": f"containerd://{hashlib.sha256(name.encode()).hexdigest()}",
            "ready": ready,
            "restartCount": 0,
            "started": True,
            "state": {"running": {"startedAt": ts(age_min - 1)}},
            "lastState": {},
        }
        base_status.update(container_status or {})
        status["containerStatuses"] = [base_status]
        if init_statuses:
            status["initContainerStatuses"] = init_statuses
    else:
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": unschedulable_message or "",
                "lastProbeTime": None,
                "lastTransitionTime": ts(age_min),
            }
        )
    status["conditions"] = conditions
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta(
            "Pod",
            name,
            NAMESPACE,
            age_min,
            generateName=name[: -len(suffix)],
            labels=labels,
            annotations={"ray.io/ft-enabled": "false"},
            ownerReferences=[
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayCluster",
                    "name": cluster["metadata"]["name"],
                    "uid": cluster["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        ),
        "spec": pod_spec,
        "status": status,
    }


def scheduling_event(pod: Obj, message: str, count: int = 9, minutes_ago: float = 1) -> Obj:
    """A FailedScheduling event as `kubectl get events -o yaml` shows it (events.k8s.io via v1)."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": meta(
            "Event",
            f"{pod['metadata']['name']}.18{uid(pod['metadata']['name'])[:14].replace('-', '')}",
            NAMESPACE,
            minutes_ago + 40,
        ),
        "action": "Scheduling",
        "eventTime": micro_ts(minutes_ago + 40),
        "series": {"count": count, "lastObservedTime": micro_ts(minutes_ago)},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod["metadata"]["name"],
            "namespace": NAMESPACE,
            "resourceVersion": pod["metadata"]["resourceVersion"],
            "uid": pod["metadata"]["uid"],
        },
        "message": message,
        "reason": "FailedScheduling",
        "reportingComponent": "default-scheduler",
        "reportingInstance": "default-scheduler-ip-10-0-0-5",
        "source": {},
        "type": "Warning",
    }


def serve_status(
    cluster_name: str, app_status: str, message: str = "", deployments: dict | None = None
) -> Obj:
    return {
        "rayClusterName": cluster_name,
        "applicationStatuses": {
            "dsv4": {
                "status": app_status,
                **({"message": message} if message else {}),
                "serveDeploymentStatuses": deployments
                or {
                    "Dsv4Ingress": {"status": "HEALTHY"},
                    "LLMServer:deepseek-ai--DeepSeek-V4-Flash": {"status": "HEALTHY"},
                },
            }
        },
    }


def rayservice_status(
    service: Obj, ready: bool, cluster_name: str, app: Obj | None, age_min: float = 45
) -> Obj:
    """Set the status KubeRay writes: Initializing with a pending cluster, or Ready."""
    if ready:
        conditions = [
            cond(
                "Ready",
                "True",
                "NonZeroServeEndpoints",
                "Number of serve endpoints is greater than 0",
                5,
                observedGeneration=1,
            ),
            cond(
                "UpgradeInProgress",
                "False",
                "NoPendingCluster",
                "Active Ray cluster exists and no pending Ray cluster",
                5,
                observedGeneration=1,
            ),
        ]
        status = {
            "activeServiceStatus": app or {"rayClusterName": cluster_name},
            "pendingServiceStatus": {},
            "numServeEndpoints": 2,
            "serviceStatus": "Running",
        }
    else:
        conditions = [
            cond(
                "Ready",
                "False",
                "Initializing",
                "RayService is initializing",
                age_min,
                observedGeneration=1,
            ),
            cond(
                "UpgradeInProgress",
                "False",
                "Initializing",
                "RayService is initializing",
                age_min,
                observedGeneration=1,
            ),
        ]
        status = {
            "activeServiceStatus": {},
            "pendingServiceStatus": app or {"rayClusterName": cluster_name},
        }
    status.update(conditions=conditions, lastUpdateTime=ts(0.5), observedGeneration=1)
    service["status"] = status
    return service


def job_status(job: Obj, outcome: str, minutes: float = 40, failed_pods: int = 4) -> Obj:
    """The Job controller's status: complete, failed (backoff limit, after failed_pods
    attempts), running or pending (its pod not scheduled)."""
    if outcome == "complete":
        job["status"] = {
            "startTime": ts(minutes + 44),
            "completionTime": ts(44),
            "succeeded": 1,
            "ready": 0,
            "terminating": 0,
            "uncountedTerminatedPods": {},
            "conditions": [
                {
                    "type": "SuccessCriteriaMet",
                    "status": "True",
                    "reason": "CompletionsReached",
                    "message": "Reached expected number of succeeded pods",
                    "lastProbeTime": ts(44),
                    "lastTransitionTime": ts(44),
                },
                {
                    "type": "Complete",
                    "status": "True",
                    "reason": "CompletionsReached",
                    "message": "Reached expected number of succeeded pods",
                    "lastProbeTime": ts(44),
                    "lastTransitionTime": ts(44),
                },
            ],
        }
    elif outcome == "failed":
        job["status"] = {
            "startTime": ts(minutes),
            "failed": failed_pods,
            "ready": 0,
            "terminating": 0,
            "uncountedTerminatedPods": {},
            "conditions": [
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastProbeTime": ts(2),
                    "lastTransitionTime": ts(2),
                },
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastProbeTime": ts(2),
                    "lastTransitionTime": ts(2),
                },
            ],
        }
    else:  # running, or its pod not scheduled yet ("pending")
        job["status"] = {
            "startTime": ts(minutes),
            "active": 1,
            "ready": 0 if outcome == "pending" else 1,
            "terminating": 0,
            "uncountedTerminatedPods": {},
        }
    return job


def job_pod(
    job: Obj,
    suffix: str,
    phase: str,
    exit_code: int | None = None,
    age_min: float = 10,
    message: str | None = None,
    node_name: str = "cpu-a",
    unschedulable_message: str = "",
) -> Obj:
    """A Job's pod: Running, Succeeded or Failed (with the container's termination message,
    as its terminationMessagePolicy leaves it), or Pending and not scheduled."""
    template = job["spec"]["template"]
    name = f"{job['metadata']['name']}-{suffix}"
    container = template["spec"]["containers"][0]
    labels = {
        **template["metadata"]["labels"],
        "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
        "batch.kubernetes.io/job-name": job["metadata"]["name"],
        "controller-uid": job["metadata"]["uid"],
        "job-name": job["metadata"]["name"],
    }
    metadata = meta(
        "Pod", name, NAMESPACE, age_min, generateName=name[: -len(suffix)], labels=labels
    )
    qos = "Burstable" if container.get("resources") else "BestEffort"
    if phase == "Pending":
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": copy.deepcopy(template["spec"]),
            "status": {
                "phase": "Pending",
                "qosClass": qos,
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": unschedulable_message,
                        "lastProbeTime": None,
                        "lastTransitionTime": ts(age_min),
                    }
                ],
            },
        }
    state: Obj
    if exit_code is None:
        state = {"running": {"startedAt": ts(age_min - 0.5)}}
    else:
        state = {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Error" if exit_code else "Completed",
                **({"message": message} if message else {}),
                "startedAt": ts(age_min - 0.5),
                "finishedAt": ts(age_min - 2),
                "containerID": f"containerd://{hashlib.sha256(name.encode()).hexdigest()}",
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {**copy.deepcopy(template["spec"]), "nodeName": node_name},
        "status": {
            "phase": phase,
            "hostIP": "10.0.1.5",
            "podIP": "10.244.1.9",
            "qosClass": qos,
            "startTime": ts(age_min),
            "conditions": [
                # No probes: the kubelet calls a running container ready.
                *(
                    {"type": kind, "status": "True", "lastTransitionTime": ts(age_min - 0.5)}
                    for kind in ("Initialized", "Ready", "ContainersReady")
                    if exit_code is None or kind == "Initialized"
                ),
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(age_min)},
            ],
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": _image_id("docker.io/library/python:3.11-slim"),
                    "ready": exit_code is None,
                    "restartCount": 0,
                    "started": exit_code is None,
                    "state": state,
                    "lastState": {},
                }
            ],
        },
    }


def bound(pvc: Obj, capacity: str | None = None) -> Obj:
    pvc["spec"].setdefault("storageClassName", "efs-models")
    pvc["spec"]["volumeName"] = f"pvc-{pvc['metadata']['uid']}"
    pvc["spec"]["volumeMode"] = "Filesystem"
    pvc["status"] = {
        "phase": "Bound",
        "accessModes": pvc["spec"]["accessModes"],
        "capacity": {"storage": capacity or pvc["spec"]["resources"]["requests"]["storage"]},
    }
    return pvc


# -- writing dumps ------------------------------------------------------------------------
def _plural(kind: str) -> str:
    lower = kind.lower()
    return lower[:-1] + "ies" if lower.endswith("y") else lower + "s"


# What `dsv4-serve doctor dump-script` collects: an empty List when there are none.
COLLECTED = [
    "Node",
    "StorageClass",
    "CustomResourceDefinition",
    "Deployment",
    "Pod",
    "RayService",
    "RayCluster",
    "Job",
    "PersistentVolumeClaim",
    "ResourceQuota",
    "Event",
]


def _yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=yaml.CSafeDumper, sort_keys=False)


def write_dump(
    directory: Path,
    objects: list[Obj],
    version: str | None = KUBE_VERSION,
    logs: dict[str, str] | None = None,
    omit: tuple[str, ...] = (),
) -> Path:
    """Lay objects out as `kubectl get -o yaml` would: a `kind: List` file per resource
    (CRDs as `-o json`, access reviews as multi-document YAML), plus version and logs.
    Kinds the dump script collects get an empty List when there are none, unless omitted."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    objects = [o for o in objects if o["kind"] not in omit]
    present = {o["kind"] for o in objects}
    for kind in COLLECTED:
        if kind not in present and kind not in omit:
            empty = {
                "apiVersion": "v1",
                "kind": "List",
                "metadata": {"resourceVersion": ""},
                "items": [],
            }
            (directory / f"{kinds.BY_KIND[kind].plural}.yaml").write_text(_yaml(empty))
    (directory / "dumped-at").write_text(NOW.strftime("%Y-%m-%dT%H:%M:%SZ") + "\n")
    if version:
        (directory / "version.yaml").write_text(_yaml(version_doc(version)))
    groups: dict[str, list[Obj]] = {}
    for obj in objects:
        groups.setdefault(obj["kind"], []).append(obj)
    for kind, items in groups.items():
        plural = kinds.BY_KIND[kind].plural if kind in kinds.BY_KIND else _plural(kind)
        as_list = {
            "apiVersion": "v1",
            "kind": "List",
            "metadata": {"resourceVersion": ""},
            "items": items,
        }
        if kind == "CustomResourceDefinition":
            (directory / f"{plural}.json").write_text(json.dumps(as_list))
        elif kind == "SelfSubjectAccessReview":
            (directory / "access-reviews.yaml").write_text(
                "".join("---\n" + _yaml(o) for o in items)
            )
        else:
            (directory / f"{plural}.yaml").write_text(_yaml(as_list))
    for path, text in (logs or {}).items():
        target = directory / "logs" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return directory
