"""`dsv4-serve doctor preflight` on cluster dumps: every check, healthy and broken clusters.

The dumps hold what the API server returns (tests/support/doctor_cluster.py); the chart is rendered
by the real helm with the test's values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serving.cli import main
from serving.doctor.checks_storage import COLD_START
from tests.support import doctor_cluster as dc
from tests.support import doctor_scenarios as sc


def doctor(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["doctor", *argv, "-o", "json"])
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["exit_code"] == code
    return code, report


def preflight(capsys, tmp_path: Path, objects: list, preset="h200-flash-mtp", *extra: str):
    dump = dc.write_dump(tmp_path / "dump", objects)
    return doctor(
        capsys,
        "preflight",
        preset,
        "-n",
        dc.NAMESPACE,
        "--from-dump",
        str(dump),
        "--set",
        "model.download.enabled=true",
        "--set",
        f"networkPolicy.kuberayOperator.namespace={dc.OPERATOR_NAMESPACE}",
        *extra,
    )


def by_check(report: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for finding in report["findings"]:
        out.setdefault(finding["check"], []).append(finding)
    return out


def statuses(report: dict, check: str) -> list[str]:
    return [f["status"] for f in by_check(report)[check]]


def only(report: dict, check: str) -> dict:
    (finding,) = by_check(report)[check]
    return finding


def failed(report: dict) -> set[str]:
    return {f["check"] for f in report["findings"] if f["status"] == "fail"}


def test_healthy_h200_cluster_passes_every_check(capsys, tmp_path, shared_dir):
    code, report = preflight(capsys, tmp_path, sc.healthy_h200(shared_dir))
    assert code == 0, [f for f in report["findings"] if f["status"] != "pass"]
    assert report["summary"] == {"pass": 19, "warn": 0, "fail": 0}
    checks = by_check(report)
    assert "helm v4" in checks["chart.render"][0]["title"]
    assert "v1.3.2" in checks["kuberay.operator"][0]["title"]
    assert "NVIDIA-H200" in checks["gpu.product"][0]["title"]
    assert "room for 4 worker pod(s), 1 needed" in checks["gpu.placement"][0]["title"]
    assert "shared-nfs" in checks["storage.volume"][0]["title"]
    assert "holds deepseek-ai/DeepSeek-V4-Flash (160 GB)" in checks["storage.capacity"][0]["title"]
    assert report["verdict"] == "the install can work"


def test_text_report_has_symbols_fixes_and_exit_code(capsys, tmp_path, shared_dir):
    nodes = [dc.node("gpu-h200-a", allocatable_gpus=7), *sc.cpu_nodes()]
    dump = dc.write_dump(tmp_path / "d", dc.cluster_base(shared_dir, nodes, sc.SHARED_STORAGE))
    code = main(["doctor", "preflight", "h200-flash-mtp", "-n", "dsv4", "--from-dump", str(dump)])
    out, err = capsys.readouterr()
    assert code == 1 and err == ""
    assert "✔ Kubernetes v1.30.4 (the chart needs >= 1.28)" in out
    assert "✘ no node has 8 allocatable nvidia.com/gpu" in out
    assert "⚠ nothing fills the new model volume" in out
    assert "    fix: --set model.download.enabled=true" in out
    assert out.rstrip().endswith(
        "the install cannot work as configured: fix the failures (✘) above (exit 1)"
    )


def test_one_gpu_short(capsys, tmp_path, shared_dir):
    """A node whose device plugin marked one of its 8 GPUs unhealthy: 7 allocatable."""
    nodes = [dc.node("gpu-h200-a", allocatable_gpus=7), *sc.cpu_nodes()]
    code, report = preflight(
        capsys, tmp_path, dc.cluster_base(shared_dir, nodes, sc.SHARED_STORAGE)
    )
    assert code == 1
    finding = only(report, "gpu.nodes")
    assert finding["status"] == "fail"
    assert "no node has 8 allocatable nvidia.com/gpu" in finding["title"]
    assert "the largest has 7" in finding["title"]


def test_gpus_held_by_other_pods_leave_no_room(capsys, tmp_path, shared_dir):
    nodes = [*sc.h200_nodes(2), *sc.cpu_nodes()]
    busy = [dc.busy_pod("gpu-h200-a", 4), dc.busy_pod("gpu-h200-b", 1)]
    objects = [*dc.cluster_base(shared_dir, nodes, sc.SHARED_STORAGE), *busy]
    code, report = preflight(capsys, tmp_path, objects)
    assert code == 1 and failed(report) == {"gpu.placement"}
    finding = only(report, "gpu.placement")
    assert finding["title"].startswith("room for 0 worker pod(s), 1 needed")
    assert "gpu-h200-a: 4 of 8 nvidia.com/gpu free" in finding["details"]
    assert "gpu-h200-b: 7 of 8 nvidia.com/gpu free" in finding["details"]


def test_autoscaling_beyond_the_cluster_warns(capsys, tmp_path, shared_dir):
    nodes = [*sc.h200_nodes(2), *sc.cpu_nodes()]
    code, report = preflight(
        capsys, tmp_path, dc.cluster_base(shared_dir, nodes, sc.SHARED_STORAGE)
    )
    assert code == 0
    finding = only(report, "gpu.placement")
    assert finding["status"] == "warn"
    assert "autoscaling to 4 replica(s) needs 4" in finding["title"]
    assert "--set workers.maxReplicas=2" in finding["fix"]


def test_multi_node_preset_needs_two_hosts(capsys, tmp_path, shared_dir):
    one = [dc.node("mi300x-a", "MI300X", memory_gi=2048), *sc.cpu_nodes()]
    code, report = preflight(
        capsys, tmp_path, dc.cluster_base(shared_dir, one, sc.SHARED_STORAGE), "mi300x-pro-mtp"
    )
    assert code == 1
    assert only(report, "gpu.placement")["title"].startswith(
        "room for 1 worker pod(s), 2 needed (1 replica(s) x 2 pod(s) of 8 GPUs)"
    )
    assert "(865 GB)" in only(report, "storage.capacity")["title"]


def test_mismatched_gpu_product(capsys, tmp_path, shared_dir):
    nodes = [dc.node(f"gpu-h100-{i}", "H100") for i in "ab"]
    code, report = preflight(
        capsys, tmp_path, dc.cluster_base(shared_dir, nodes, sc.SHARED_STORAGE)
    )
    assert code == 1
    finding = only(report, "gpu.product")
    assert finding["status"] == "fail"
    assert "needs H200; the GPU nodes have NVIDIA-H100-80GB-HBM3" in finding["title"]
    assert "gpu.placement" in failed(report)


def test_mixed_gpu_products_without_a_selector_warn(capsys, tmp_path, shared_dir):
    nodes = [dc.node("gpu-h200-a"), dc.node("gpu-h100-a", "H100")]
    code, report = preflight(
        capsys, tmp_path, dc.cluster_base(shared_dir, nodes, sc.SHARED_STORAGE)
    )
    finding = only(report, "gpu.product")
    assert finding["status"] == "warn"
    assert r"--set scheduling.nodeSelector.nvidia\.com/gpu\.product=NVIDIA-H200" in finding["fix"]
    pinned = "scheduling.nodeSelector.nvidia\\.com/gpu\\.product=NVIDIA-H200"
    code, report = preflight(
        capsys,
        tmp_path,
        dc.cluster_base(shared_dir, nodes, sc.SHARED_STORAGE),
        "h200-flash-mtp",
        "--set",
        pinned,
    )
    assert only(report, "gpu.product")["status"] == "pass"
    assert "gpu-h100-a: label nvidia.com/gpu.product=NVIDIA-H200 missing" not in str(report)


def test_arm64_gpu_nodes_meet_an_amd64_image(capsys, tmp_path, shared_dir):
    """GB300 trays are Grace (arm64): an amd64-only image cannot run there; the chart's
    default CUDA image (amd64 + arm64, what `make images` builds) can."""
    nodes = [dc.node(f"gb300-{i}", "GB300", gpus=4, arch="arm64", memory_gi=1800) for i in "ab"]
    objects = dc.cluster_base(shared_dir, [*nodes, *sc.cpu_nodes()], sc.SHARED_STORAGE)
    amd64_only = ["--set", "image.cuda.arches=[amd64]"]
    code, report = preflight(capsys, tmp_path, objects, "gb300-pro-mtp", *amd64_only)
    assert code == 1
    finding = only(report, "gpu.arch")
    assert finding["status"] == "fail"
    assert "the GPU nodes are arm64 but the image" in finding["title"]
    assert "linux/arm64" in finding["fix"]
    assert only(report, "gpu.product")["status"] == "pass"
    code, report = preflight(capsys, tmp_path, objects, "gb300-pro-mtp")
    assert code == 0, failed(report)
    code, report = preflight(capsys, tmp_path, objects, "gb300-pro-mtp", "--image-arch", "arm64")
    assert code == 0, failed(report)


def test_operator_namespace_named_filled_in_or_wrong(capsys, tmp_path, shared_dir):
    objects = sc.healthy_h200(shared_dir)

    def with_sets(*sets: str) -> tuple[int, dict]:
        args = [arg for item in sets for arg in ("--set", item)]
        return preflight(capsys, tmp_path, objects, "h200-flash-mtp", *args)

    code, report = preflight(capsys, tmp_path, objects)
    assert only(report, "network.operator")["status"] == "pass"
    assert dc.OPERATOR_NAMESPACE in only(report, "network.operator")["title"]
    # Left out: helm would refuse the install; the doctor names the value and the namespace
    # the operator runs in, and checks the rest as if it were set.
    dump = dc.write_dump(tmp_path / "dump", objects)
    code, report = doctor(
        capsys, "preflight", "h200-flash-mtp", "-n", dc.NAMESPACE, "--from-dump", str(dump)
    )
    finding = only(report, "network.operator")
    assert finding["status"] == "warn" and "helm install fails without it" in finding["title"]
    assert (
        finding["fix"]
        == f"add --set networkPolicy.kuberayOperator.namespace={dc.OPERATOR_NAMESPACE}"
    )
    assert only(report, "chart.render")["status"] == "pass"
    # Another namespace than the operator's: KubeRay could never configure the RayService.
    code, report = with_sets("networkPolicy.kuberayOperator.namespace=ray")
    assert code == 1 and failed(report) == {"network.operator"}
    assert (
        "from namespace ray, but it runs in kuberay-system"
        in only(report, "network.operator")["title"]
    )
    # Any namespace, chosen explicitly: admitted, with the risk named.
    code, report = with_sets(
        "networkPolicy.kuberayOperator.namespace=",
        "networkPolicy.kuberayOperator.anyNamespace=true",
    )
    assert code == 0 and only(report, "network.operator")["status"] == "warn"
    assert "from any namespace" in only(report, "network.operator")["title"]
    # No NetworkPolicy: nothing to check.
    code, report = with_sets("networkPolicy.enabled=false")
    assert code == 0 and "network.operator" not in by_check(report)


def test_missing_kuberay_operator(capsys, tmp_path, shared_dir):
    objects = dc.cluster_base(
        shared_dir, [*sc.h200_nodes(), *sc.cpu_nodes()], sc.SHARED_STORAGE, operator=None
    )
    code, report = preflight(capsys, tmp_path, objects)
    assert code == 1 and failed(report) == {"kuberay.operator"}
    finding = only(report, "kuberay.operator")
    assert "no KubeRay operator Deployment found" in finding["title"]
    assert "helm install kuberay-operator kuberay/kuberay-operator" in finding["fix"]


@pytest.mark.parametrize(
    "operator, expected",
    [
        (
            dc.kuberay_operator("v1.2.2"),
            "KubeRay operator v1.2.2 in kuberay-system/kuberay-operator is older than 1.3",
        ),
        (dc.kuberay_operator(ready=0), "has no ready replica (0/1)"),
        (dc.kuberay_operator(watch="team-a,team-b"), "watches only team-a, team-b"),
    ],
)
def test_kuberay_operator_old_down_or_elsewhere(capsys, tmp_path, shared_dir, operator, expected):
    objects = dc.cluster_base(
        shared_dir, [*sc.h200_nodes(), *sc.cpu_nodes()], sc.SHARED_STORAGE, operator=operator
    )
    code, report = preflight(capsys, tmp_path, objects)
    assert code == 1
    assert expected in only(report, "kuberay.operator")["title"]


def test_missing_kuberay_crds_and_monitoring_crds(capsys, tmp_path, shared_dir):
    objects = [
        o
        for o in sc.healthy_h200(shared_dir)
        if not (
            o["kind"] == "CustomResourceDefinition"
            and o["metadata"]["name"].endswith(("ray.io", "coreos.com"))
        )
    ]
    objects.append(dc.crd(shared_dir, "ray.io_rayclusters.yaml"))
    code, report = preflight(capsys, tmp_path, objects)
    assert code == 1
    assert only(report, "kuberay.crds")["title"] == "KubeRay CRDs: rayservices.ray.io missing"
    monitoring = only(report, "monitoring.crds")
    assert monitoring["status"] == "warn"
    assert "nothing scrapes the engines" in monitoring["fix"]
    # Without the monitoring APIs the chart renders no PodMonitor: nothing fails for it.
    assert statuses(report, "chart.render") == ["pass"]


def test_forced_monitoring_objects_without_their_crds_fail(capsys, tmp_path, shared_dir):
    objects = dc.cluster_base(
        shared_dir, [*sc.h200_nodes(), *sc.cpu_nodes()], sc.SHARED_STORAGE, monitoring=False
    )
    code, report = preflight(
        capsys, tmp_path, objects, "h200-flash-mtp", "--set", "monitoring.podMonitor.force=true"
    )
    assert code == 1
    (render_fail,) = [f for f in by_check(report)["chart.render"] if f["status"] == "fail"]
    assert "does not serve PodMonitor (podmonitors.monitoring.coreos.com)" in render_fail["title"]


def test_missing_rwx_storage_class(capsys, tmp_path, shared_dir):
    """An EKS cluster with only the EBS default class: the chart's RWX claim stays Pending."""
    storage = [dc.storage_class("gp3", "ebs.csi.aws.com", default=True)]
    objects = dc.cluster_base(shared_dir, [*sc.h200_nodes(), *sc.cpu_nodes()], storage)
    code, report = preflight(capsys, tmp_path, objects)
    # The weights' claim and the JIT cache's both ask for ReadWriteMany.
    assert code == 1 and failed(report) == {"storage.volume", "storage.jit-cache"}
    assert "gp3 gives volumes one node can mount" in only(report, "storage.jit-cache")["title"]
    finding = only(report, "storage.volume")
    assert (
        "StorageClass gp3 (the default) (ebs.csi.aws.com) gives volumes one node can mount"
        in finding["title"]
    )
    assert "EFS, Filestore" in finding["fix"]


def test_storage_class_choices(capsys, tmp_path, shared_dir):
    storage = [
        dc.storage_class("gp3", "ebs.csi.aws.com", default=True),
        dc.storage_class("efs-models", "efs.csi.aws.com"),
        dc.storage_class("vendor-x", "csi.example.com"),
    ]
    objects = dc.cluster_base(shared_dir, [*sc.h200_nodes(), *sc.cpu_nodes()], storage)
    _, report = preflight(capsys, tmp_path, objects)
    assert (
        "set model.pvc.storageClassName to a shared file system class: efs-models"
        in only(report, "storage.volume")["fix"]
    )
    code, report = preflight(
        capsys,
        tmp_path,
        objects,
        "h200-flash-mtp",
        "--set",
        "model.pvc.storageClassName=efs-models",
        "--set",
        "jitCache.pvc.storageClassName=efs-models",
    )
    assert code == 0 and only(report, "storage.volume")["status"] == "pass"
    _, report = preflight(
        capsys, tmp_path, objects, "h200-flash-mtp", "--set", "model.pvc.storageClassName=vendor-x"
    )
    assert only(report, "storage.volume")["status"] == "warn"
    _, report = preflight(
        capsys, tmp_path, objects, "h200-flash-mtp", "--set", "model.pvc.storageClassName=nope"
    )
    assert (
        "StorageClass nope (model.pvc.storageClassName) does not exist"
        in only(report, "storage.volume")["title"]
    )
    no_default = [s for s in objects if s["kind"] != "StorageClass"] + [
        dc.storage_class("efs", "efs.csi.aws.com")
    ]
    _, report = preflight(capsys, tmp_path, no_default)
    assert "no default StorageClass" in only(report, "storage.volume")["title"]


def test_volume_too_small_for_the_model(capsys, tmp_path, shared_dir):
    code, report = preflight(
        capsys,
        tmp_path,
        sc.healthy_h200(shared_dir),
        "h200-pro-mtp",
        "--set",
        "model.pvc.size=500Gi",
    )
    finding = only(report, "storage.capacity")
    assert finding["status"] == "fail"
    assert (
        "model.pvc.size 500Gi (537 GB) is smaller than deepseek-ai/DeepSeek-V4-Pro (865 GB)"
        in finding["title"]
    )


def test_existing_claim(capsys, tmp_path, shared_dir):
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": dc.meta("PersistentVolumeClaim", "dsv4-weights", "dsv4"),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Ti"}},
            "storageClassName": "gp3",
        },
    }
    dc.bound(claim)
    objects = [*sc.healthy_h200(shared_dir), claim]
    _, report = preflight(
        capsys, tmp_path, objects, "h200-flash-mtp", "--set", "model.pvc.existingClaim=dsv4-weights"
    )
    assert "claim dsv4-weights is ReadWriteOnce" in only(report, "storage.volume")["title"]
    assert (
        only(report, "storage.capacity")["title"]
        == "claim dsv4-weights (1,100 GB) holds deepseek-ai/DeepSeek-V4-Flash (160 GB)"
    )
    _, report = preflight(
        capsys, tmp_path, objects, "h200-flash-mtp", "--set", "model.pvc.existingClaim=other"
    )
    assert (
        "model.pvc.existingClaim other does not exist in dsv4"
        in only(report, "storage.volume")["title"]
    )


def test_taints_not_tolerated_then_tolerated(capsys, tmp_path, shared_dir):
    nodes = [*sc.h200_nodes(taints=[sc.INFERENCE_TAINT]), *sc.cpu_nodes()]
    objects = dc.cluster_base(shared_dir, nodes, sc.SHARED_STORAGE)
    code, report = preflight(capsys, tmp_path, objects)
    assert code == 1 and failed(report) == {"gpu.taints", "gpu.placement"}
    taints = only(report, "gpu.taints")
    assert taints["details"][0] == "gpu-h200-a: dedicated=inference:NoSchedule"
    assert (
        "{key: dedicated, value: inference, operator: Equal, effect: NoSchedule}" in taints["fix"]
    )
    values = tmp_path / "values.yaml"
    values.write_text(json.dumps(sc.TOLERATION_VALUES))
    code, report = preflight(capsys, tmp_path, objects, "h200-flash-mtp", "-f", str(values))
    assert code == 0 and report["summary"]["warn"] == 0


def test_gpu_resource_taint_only_warns(capsys, tmp_path, shared_dir):
    """GKE taints GPU nodes nvidia.com/gpu=present:NoSchedule and its admission plugin adds
    the toleration to pods that request GPUs."""
    nodes = [*sc.h200_nodes(taints=[dc.taint("nvidia.com/gpu", "present")]), *sc.cpu_nodes()]
    code, report = preflight(
        capsys, tmp_path, dc.cluster_base(shared_dir, nodes, sc.SHARED_STORAGE)
    )
    assert only(report, "gpu.taints")["status"] == "warn"
    assert (
        "unless the API server adds nvidia.com/gpu tolerations itself"
        in only(report, "gpu.taints")["title"]
    )


def test_cordoned_and_not_ready_nodes_are_not_room(capsys, tmp_path, shared_dir):
    nodes = [
        dc.node("gpu-h200-a", unschedulable=True),
        dc.node("gpu-h200-b", ready=False),
        *sc.cpu_nodes(),
    ]
    code, report = preflight(
        capsys, tmp_path, dc.cluster_base(shared_dir, nodes, sc.SHARED_STORAGE)
    )
    assert code == 1
    details = only(report, "gpu.placement")["details"]
    assert details == ["gpu-h200-a: cordoned (unschedulable)", "gpu-h200-b: NotReady"]
    assert only(report, "gpu.taints")["status"] == "pass"  # the node controller's, not ours


def test_worker_memory_larger_than_nodes(capsys, tmp_path, shared_dir):
    nodes = [*sc.h200_nodes(memory_gi=1024), *sc.cpu_nodes()]
    code, report = preflight(
        capsys, tmp_path, dc.cluster_base(shared_dir, nodes, sc.SHARED_STORAGE)
    )
    assert code == 1
    (memory,) = [
        f
        for f in by_check(report)["gpu.resources"]
        if "memory" in f["title"] and f["status"] == "fail"
    ]
    assert (
        memory["title"]
        == "workers request 1500Gi of memory; the GPU nodes have at most 1024Gi allocatable"
    )
    _, report = preflight(
        capsys,
        tmp_path,
        dc.cluster_base(shared_dir, nodes, sc.SHARED_STORAGE),
        "h200-flash-mtp",
        "--set",
        "workers.resources.memory=900Gi",
        "--set",
        "workers.shmSize=1Ti",
    )
    shm = [f for f in by_check(report)["gpu.resources"] if "/dev/shm" in f["title"]]
    assert shm[0]["status"] == "warn"


def test_amd_cluster_for_a_rocm_preset(capsys, tmp_path, shared_dir):
    nodes = [dc.node(f"mi300x-{i}", "MI300X", memory_gi=2048) for i in "ab"]
    objects = dc.cluster_base(shared_dir, [*nodes, *sc.cpu_nodes()], sc.SHARED_STORAGE)
    code, report = preflight(capsys, tmp_path, objects, "mi300x-pro-mtp")
    assert code == 0, failed(report)
    assert "AMD_Instinct_MI300X matches the preset's MI300X" in only(report, "gpu.product")["title"]
    assert "amd.com/gpu" in only(report, "gpu.nodes")["title"]
    code, report = preflight(capsys, tmp_path, objects, "h200-flash-mtp")
    assert "the nodes offer amd.com/gpu" in only(report, "gpu.nodes")["fix"]


def test_quota_too_small(capsys, tmp_path, shared_dir):
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": dc.meta("ResourceQuota", "gpu-quota", "dsv4"),
        "spec": {"hard": {"requests.nvidia.com/gpu": "8", "requests.memory": "1Ti"}},
        "status": {
            "hard": {"requests.nvidia.com/gpu": "8", "requests.memory": "1Ti"},
            "used": {"requests.nvidia.com/gpu": "0", "requests.memory": "0"},
        },
    }
    code, report = preflight(capsys, tmp_path, [*sc.healthy_h200(shared_dir), quota])
    finding = only(report, "namespace.quota")
    assert finding["status"] == "fail"
    assert finding["details"] == [
        "gpu-quota: requests.memory has 1024Gi left, the release needs 1532Gi"
    ]


def test_rbac_denied(capsys, tmp_path, shared_dir):
    objects = [o for o in sc.healthy_h200(shared_dir) if o["kind"] != "SelfSubjectAccessReview"]
    objects += dc.access_reviews(
        denied={("create", "rayservices"), ("patch", "rayservices"), ("create", "networkpolicies")}
    )
    code, report = preflight(capsys, tmp_path, objects)
    assert code == 1 and failed(report) == {"rbac.chart"}
    assert only(report, "rbac.chart")["details"] == [
        "create networkpolicies.networking.k8s.io in dsv4",
        "create/patch rayservices.ray.io in dsv4",
    ]


def test_chart_rejects_values_and_preset_fallback_still_checks(capsys, tmp_path, shared_dir):
    code, report = preflight(
        capsys, tmp_path, sc.healthy_h200(shared_dir), "h200-flash-mtp", "--platform", "rocm"
    )
    assert code == 1
    render = only(report, "chart.render")
    assert render["status"] == "fail"
    assert 'platform "rocm" does not match preset "h200-flash-mtp"' in render["title"]
    assert "no node has allocatable amd.com/gpu" in only(report, "gpu.nodes")["title"]


def test_without_helm_the_preset_is_checked_and_the_report_says_so(
    capsys, tmp_path, shared_dir, monkeypatch
):
    monkeypatch.setattr("serving.doctor.plan.find_helm", lambda explicit: None)
    code, report = preflight(capsys, tmp_path, sc.healthy_h200(shared_dir))
    render = only(report, "chart.render")
    assert render["status"] == "warn"
    assert "not a rendering of the chart" in render["title"]
    assert render["fix"].startswith("helm was not found (install it, set HELM, or pass --helm")
    assert render["details"] == ["workers 1-4 replica(s) x 1 pod(s) x 8 nvidia.com/gpu"]
    # The same checks, from the preset table and values.yaml: the same verdict otherwise.
    assert code == 0 and report["summary"]["fail"] == 0
    assert only(report, "rbac.chart")["title"] == (
        "RBAC allows creating, updating and deleting all 12 kinds the release uses"
    )


def test_dump_without_nodes_or_reviews_warns_what_to_add(capsys, tmp_path, shared_dir):
    dump = dc.write_dump(
        tmp_path / "d", sc.healthy_h200(shared_dir), omit=("Node", "SelfSubjectAccessReview")
    )
    code, report = doctor(
        capsys, "preflight", "h200-flash-mtp", "-n", "dsv4", "--from-dump", str(dump)
    )
    assert code == 0
    gpu = only(report, "gpu.nodes")
    assert gpu["title"] == "not checked: the dump holds no Node objects"
    assert gpu["fix"] == "add them: kubectl get nodes -o yaml > DIR/nodes.yaml"
    assert "doctor dump-script" in only(report, "rbac.chart")["fix"]


def test_cpu_preset_and_unknown_preset_are_bad_input(capsys, tmp_path, shared_dir):
    dump = dc.write_dump(tmp_path / "d", sc.healthy_h200(shared_dir))
    for preset, message in [("cpu-tiny", "runs on the CPU"), ("h900", "unknown preset 'h900'")]:
        code = main(["doctor", "preflight", preset, "-n", "dsv4", "--from-dump", str(dump)])
        out, err = capsys.readouterr()
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and message in err


def test_old_kubernetes(capsys, tmp_path, shared_dir):
    dump = dc.write_dump(tmp_path / "d", sc.healthy_h200(shared_dir), version="v1.27.16")
    code, report = doctor(
        capsys, "preflight", "h200-flash-mtp", "-n", "dsv4", "--from-dump", str(dump)
    )
    assert code == 1
    assert only(report, "cluster.version")["title"] == (
        "Kubernetes v1.27.16 is older than the chart supports (>= 1.28)"
    )
    render = only(report, "chart.render")
    assert render["title"] == (
        "the chart rejects these values: chart requires kubeVersion: >=1.28.0-0 which is "
        "incompatible with Kubernetes v1.27.16"
    )


@pytest.mark.parametrize(
    "labels, expected",
    [
        ({"nvidia.com/gpu.product": None}, "cannot tell the GPU model"),
        ({"nvidia.com/gpu.product": "NVIDIA-H200-SHARED"}, "GPUs are time-sliced (shared)"),
    ],
)
def test_gpu_model_unknown_or_shared_warns(capsys, tmp_path, shared_dir, labels, expected):
    nodes = sc.h200_nodes(2)
    for node in nodes:
        for key, value in labels.items():
            node["metadata"]["labels"].pop(key)
            if value:
                node["metadata"]["labels"][key] = value
    objects = dc.cluster_base(shared_dir, [*nodes, *sc.cpu_nodes()], sc.SHARED_STORAGE)
    _, report = preflight(capsys, tmp_path, objects)
    finding = only(report, "gpu.product")
    assert finding["status"] == "warn" and finding["title"].startswith(expected)


def test_no_node_for_the_head_and_a_node_local_cache(capsys, tmp_path, shared_dir):
    code, report = preflight(
        capsys,
        tmp_path,
        sc.healthy_h200(shared_dir),
        "h200-flash-mtp",
        "--set",
        "head.resources.memory=4Ti",
        "--set",
        "model.localCache.enabled=true",
    )
    assert code == 1
    head = [f for f in by_check(report)["gpu.placement"] if "Ray head" in f["title"]][0]
    assert head["title"] == "no node can take the Ray head (8 CPU, 4096Gi memory)"
    assert "cpu-a: memory 251Gi allocatable < 4096Gi requested" in head["details"]
    (cache,) = [f for f in by_check(report)["storage.filling"] if "localCache" in f["title"]]
    assert cache["status"] == "warn" and "160 GB" in cache["title"]


def test_jit_cache_volume(capsys, tmp_path, shared_dir):
    """The chart's JIT cache claim on the default class passes; a pod-local cache warns with
    the measured cost; a missing claim of one's own fails with the fix."""
    objects = sc.healthy_h200(shared_dir)
    _, report = preflight(capsys, tmp_path, objects)
    finding = only(report, "storage.jit-cache")
    assert finding["status"] == "pass"
    assert (
        "JIT cache on a new claim dsv4-dsv4-serve-jit-cache of StorageClass shared-nfs"
        in (finding["title"])
    )
    _, report = preflight(
        capsys, tmp_path, objects, "h200-flash-mtp", "--set", "jitCache.type=emptyDir"
    )
    finding = only(report, "storage.jit-cache")
    assert finding["status"] == "warn" and COLD_START in finding["title"]
    code, report = preflight(
        capsys, tmp_path, objects, "h200-flash-mtp", "--set", "jitCache.pvc.existingClaim=kernels"
    )
    finding = only(report, "storage.jit-cache")
    assert code == 1 and finding["status"] == "fail"
    assert finding["title"] == "jitCache.pvc.existingClaim kernels does not exist in dsv4"
