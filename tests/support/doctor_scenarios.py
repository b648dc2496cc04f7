"""Whole clusters for the doctor's tests (objects from tests/support/doctor_cluster.py)."""

from __future__ import annotations

import copy
from pathlib import Path

from model_overrides.jit_pool import manifest as cache_manifest
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


# The JIT warm Job's termination messages (templates/warm-job.yaml): the fit line of a
# cache warmed on an H200 node (model_overrides/jit_pool/manifest.py fit_line, on a
# manifest of vLLM 0.34's versions), or the log's tail of a warm whose engine failed.
WARM_CACHE = "/var/cache/dsv4"
WARM_MANIFEST = cache_manifest.Manifest(
    key="3f9c2a7be1d04c55",
    created="2026-11-30T11:07:00+00:00",
    preset="h200-flash-mtp",
    versions=cache_manifest.Versions(
        vllm="0.34.0",
        torch="2.14.0+cu130",
        cuda="13.0",
        driver="580.159.04",
        deep_gemm="2.8.1",
        tilelang="0.1.12",
        triton="3.8.0",
    ),
    gpu=cache_manifest.Gpu(name="NVIDIA H200", arch="sm_90", count=8),
    shapes={},
    kernels={"triton": 391, "deep_gemm": 150, "tilelang": 80, "cuda": 3},
    warm=cache_manifest.WarmRecord(jobs=96, seconds=471.2),
)
WARM_FIT = cache_manifest.fit_line(
    WARM_MANIFEST, WARM_MANIFEST.versions, WARM_MANIFEST.gpu, WARM_CACHE
)
WARM_FAILED_LOG = "\n".join(
    [
        "[warm    0.0s] preset h200-flash-mtp: warm model flash 5 layers (fp4 experts) at "
        "/var/cache/dsv4/warm-model/flash-5-fp4, target vllm-k1, cache /var/cache/dsv4, 96 "
        "compile processes",
        "[warm  212.4s] engine failed to start: exited with code 1",
        "ERROR 11-30 11:31:02 [core.py:700] EngineCore failed to start.",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a "
        "total capacity of 139.81 GiB of which 6.12 GiB is free.",
        cache_manifest.fit_line(None, WARM_MANIFEST.versions, WARM_MANIFEST.gpu, WARM_CACHE),
    ]
)


def warm_objects(job: Obj, outcome: str, pending_message: str | None) -> list[Obj]:
    """The warm Job's status and pods for an outcome: complete, failed (its two attempts),
    running, or pending (its pod not scheduled, as the workers')."""
    if outcome == "complete":
        dc.job_status(job, "complete", minutes=8)
        return [
            dc.job_pod(job, "w8k3n", "Succeeded", 0, 52, WARM_FIT + "\n", node_name="gpu-h200-b")
        ]
    if outcome == "failed":
        dc.job_status(job, "failed", minutes=30, failed_pods=2)
        return [
            dc.job_pod(job, suffix, "Failed", 1, age, WARM_FAILED_LOG, node_name="gpu-h200-b")
            for suffix, age in (("w8k3n", 30), ("r5t2q", 14))
        ]
    if outcome == "running":
        dc.job_status(job, "running", minutes=6)
        return [dc.job_pod(job, "w8k3n", "Running", age_min=6, node_name="gpu-h200-b")]
    assert outcome == "pending", outcome
    dc.job_status(job, "pending", minutes=44)
    pod = dc.job_pod(
        job, "w8k3n", "Pending", age_min=44, unschedulable_message=pending_message or ""
    )
    return [pod, dc.scheduling_event(pod, pending_message)] if pending_message else [pod]


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
    warm: str | None = "complete",
) -> list[Obj]:
    """The chart installed for 45 minutes, with what KubeRay and the scheduler made of it.
    warm: the JIT warm Job's outcome (warm_objects), "missing" (deleted), or None (off)."""
    values = {"model": {"download": {"enabled": download is not None}}, **(values or {})}
    if warm is None:
        jit = values.get("jitCache", {})
        values["jitCache"] = {**jit, "warm": {**jit.get("warm", {}), "enabled": False}}
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
        if job["metadata"]["labels"]["app.kubernetes.io/component"] == "jit-warm":
            if warm == "missing":
                objects.remove(job)
            else:
                objects += warm_objects(job, warm, pending_message)
            continue
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
    toleration, its worker and its JIT warm Job's pod Pending (what `doctor status`
    explains)."""
    nodes = [*h200_nodes(taints=[INFERENCE_TAINT]), *cpu_nodes()]
    return [*dc.cluster_base(shared, nodes, storage=SHARED_STORAGE), *release(warm="pending")]


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
        "tests/serving/doctor/test_doctor_fixtures.py` rewrites it). The CRDs' schemas are cut\n"
        "short.\n"
    )
    return directory
