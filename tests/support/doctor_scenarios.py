"""Whole clusters for the doctor's tests (objects from tests/support/doctor_cluster.py)."""

from __future__ import annotations

import copy
from pathlib import Path

from tests.support import doctor_cluster as dc

Obj = dict

# What the scheduler says when no node takes an 8-GPU worker (kube-scheduler 1.30 wording).
TAINT_MESSAGE = (
    "0/6 nodes are available: 2 Insufficient nvidia.com/gpu, 4 node(s) had untolerated "
    "taint {dedicated: inference}. preemption: 0/6 nodes are available: 2 No preemption "
    "victims found for incoming pod, 4 Preemption is not helpful for scheduling."
)
PENDING_SERVE_MESSAGE = (
    "Deployment 'LLMServer:deepseek-ai--DeepSeek-V4-Flash' in application 'dsv4' has 1 "
    "replicas that have taken more than 30s to be scheduled. This may be due to waiting for "
    "the cluster to auto-scale or for a runtime environment to be installed. Resources "
    'required for each replica: [{"CPU": 1.0, "GPU": 1.0, "accelerator_type:H200": '
    '0.001}, {"GPU": 1.0}, {"GPU": 1.0}, {"GPU": 1.0}, {"GPU": 1.0}, {"GPU": 1.0}, '
    '{"GPU": 1.0}, {"GPU": 1.0}], total resources available: {"CPU": 8.0, '
    '"memory": 34359738368.0, "object_store_memory": 10307921510.0}. Use `ray status` '
    "for more details."
)
INFERENCE_TAINT = dc.taint("dedicated", "inference")
TOLERATION_VALUES = {
    "scheduling": {
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"}
        ]
    },
    "model": {"download": {"enabled": True}},
}


def h200_nodes(count: int = 4, **kwargs) -> list[Obj]:
    return [dc.node(f"gpu-h200-{chr(97 + i)}", "H200", **kwargs) for i in range(count)]


def cpu_nodes(count: int = 2) -> list[Obj]:
    return [dc.node(f"cpu-{chr(97 + i)}", None, memory_gi=251, cpu=64) for i in range(count)]


SHARED_STORAGE = [
    dc.storage_class("shared-nfs", "nfs.csi.k8s.io", default=True),
    dc.storage_class("local-nvme", "rancher.io/local-path"),
]


def healthy_h200(shared: Path) -> list[Obj]:
    """Four 8x H200 nodes, two CPU nodes, KubeRay 1.3.2, Prometheus Operator, NFS default."""
    return dc.cluster_base(shared, [*h200_nodes(), *cpu_nodes()], storage=SHARED_STORAGE)


def release(
    values: Obj | None = None,
    ready: bool = False,
    worker_node: str | None = None,
    worker_status: Obj | None = None,
    worker_ready: bool | None = None,
    pending_message: str | None = TAINT_MESSAGE,
    download: str | None = "complete",
    preset: str = "h200-flash-mtp",
    app_status: str | None = "DEPLOYING",
    app_message: str = "",
) -> list[Obj]:
    """The chart installed for 45 minutes, with what KubeRay and the scheduler made of it."""
    values = {"model": {"download": {"enabled": download is not None}}, **(values or {})}
    objects = dc.installed(dc.rendered(preset, values=values))
    (service,) = dc.by_kind(objects, "RayService")
    cluster = dc.raycluster(service, ready_workers=1 if ready else 0)
    name = cluster["metadata"]["name"]
    deployments = None
    if app_status == "DEPLOYING":
        deployments = {
            "Dsv4Ingress": {"status": "HEALTHY"},
            "LLMServer:deepseek-ai--DeepSeek-V4-Flash": {
                "status": "UPDATING",
                "message": PENDING_SERVE_MESSAGE,
            },
        }
    app = dc.serve_status(name, app_status, app_message, deployments) if app_status else None
    dc.rayservice_status(service, ready, name, app)
    head = dc.ray_pod(cluster, "head", "q8w4z", "cpu-a")
    if worker_node or ready:
        worker = dc.ray_pod(
            cluster,
            "worker",
            "m2v9c",
            worker_node or "gpu-h200-a",
            ready=ready if worker_ready is None else worker_ready,
            container_status=worker_status,
        )
        extra = []
    else:
        worker = dc.ray_pod(
            cluster, "worker", "m2v9c", None, phase="Pending", unschedulable_message=pending_message
        )
        extra = [dc.scheduling_event(worker, pending_message)] if pending_message else []
    objects += [cluster, head, worker, *extra]
    for pvc in dc.by_kind(objects, "PersistentVolumeClaim"):
        dc.bound(pvc)
    for job in dc.by_kind(objects, "Job"):
        dc.job_status(job, download or "complete")
        if download == "complete":
            objects.append(dc.job_pod(job, "7xk2d", "Succeeded", exit_code=0, age_min=84))
        elif download == "failed":
            objects.append(dc.job_pod(job, "p4r8t", "Failed", exit_code=1, age_min=6))
        else:
            objects.append(dc.job_pod(job, "p4r8t", "Running", age_min=30))
    return objects


def stuck_cluster(shared: Path) -> list[Obj]:
    """The example: GPU nodes tainted for inference, the release installed without the
    toleration, its worker Pending (what `doctor status` explains)."""
    nodes = [*h200_nodes(taints=[INFERENCE_TAINT]), *cpu_nodes()]
    return [*dc.cluster_base(shared, nodes, storage=SHARED_STORAGE), *release()]


EXAMPLE_DIR = Path(__file__).resolve().parent / "doctor" / "example-dump"
EXAMPLE_VALUES = Path(__file__).resolve().parent / "doctor" / "example-values.yaml"
# What `dsv4-serve doctor dump-script` collects (no ConfigMaps, Secrets, Services …).
DUMPED_KINDS = {*dc.COLLECTED, "Namespace", "SelfSubjectAccessReview"}


def _slim_crd(obj: Obj) -> Obj:
    """A CRD without its 1 MB schema, for the committed example (the doctor reads names,
    served versions and conditions)."""
    obj = copy.deepcopy(obj)
    for version in obj["spec"]["versions"]:
        version["schema"] = {
            "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        }
    return obj


def write_example(directory: Path, shared: Path) -> Path:
    objects = [
        _slim_crd(o) if o["kind"] == "CustomResourceDefinition" else o
        for o in stuck_cluster(shared)
        if o["kind"] in DUMPED_KINDS
    ]
    # Another team's job on one GPU node: what `kubectl get pods -A` shows besides ours.
    objects.append(dc.busy_pod("gpu-h200-d", 8))
    dc.write_dump(directory, objects)
    (directory / "README.md").write_text(
        "A dump of an 8x H200 cluster whose GPU nodes are tainted dedicated=inference, with\n"
        "release dsv4 installed without the toleration (written by\n"
        "tests/support/doctor_scenarios.py:write_example; `DSV4_WRITE_DOCTOR_EXAMPLE=1 pytest\n"
        "tests/chart/test_doctor_fixtures.py` rewrites it). The CRDs' schemas are cut short.\n"
    )
    return directory
