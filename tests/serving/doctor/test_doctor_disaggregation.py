"""`dsv4-serve doctor preflight` on a disaggregated release: the plan carries the prefill and
decode worker groups, and the capacity checks judge each role's pods, which share the GPU
nodes. The chart is rendered by the real helm; the clusters are dumps
(tests/support/doctor_cluster.py)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from serving.chart import derived_files
from serving.doctor.k8s import quantity
from serving.doctor.plan import PodPlan, deep_merge, find_helm, make_plan
from tests.serving.doctor.test_doctor_preflight import by_check, failed, only, preflight
from tests.support import doctor_cluster as dc
from tests.support import doctor_scenarios as sc
from tests.support.chart_render import INSTALL_VALUES

# Prefill 2-4 replicas, decode 1 with its own memory: 3 pods (24 GPUs) at the minimum.
PD = {
    "disaggregation": {
        "enabled": True,
        "prefill": {"minReplicas": 2, "maxReplicas": 4},
        "decode": {"minReplicas": 1, "resources": {"cpu": "64", "memory": "1Ti"}},
    }
}
PD_SETS = (
    "--set",
    "disaggregation.enabled=true",
    "--set",
    "disaggregation.prefill.minReplicas=2",
    "--set",
    "disaggregation.prefill.maxReplicas=4",
    "--set",
    "disaggregation.decode.minReplicas=1",
    "--set",
    "disaggregation.decode.resources.cpu=64",
    "--set",
    "disaggregation.decode.resources.memory=1Ti",
)


def _plan(values: dict, tmp_path: Path, helm: str | None):
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(deep_merge(INSTALL_VALUES, values)))
    chart = derived_files.CHART_DIR
    return make_plan("h200-flash-mtp", None, "dsv4", "dsv4", [str(path)], [], helm, chart, None, [])


# What sizes a worker group (not its pod spec or image, which only a rendering has in full).
SIZES = (
    "role",
    "group",
    "cpu",
    "memory",
    "memory_limit",
    "gpus",
    "gpu_resource",
    "shm",
    "hosts",
    "min_replicas",
    "max_replicas",
)


def _sizes(group: PodPlan) -> dict:
    return {key: getattr(group, key) for key in SIZES}


# --- the plan ----------------------------------------------------------------------------


def test_the_plan_carries_each_role_s_group_as_rendered(tmp_path: Path):
    plan = _plan(PD, tmp_path, find_helm(None))
    assert plan.rendered_by, plan.fallback_reason
    prefill, decode = plan.worker_groups
    assert (prefill.role, prefill.group, prefill.min_replicas, prefill.max_replicas) == (
        "prefill",
        "h200-prefill",
        2,
        4,
    )
    assert (decode.role, decode.group, decode.min_replicas, decode.max_replicas) == (
        "decode",
        "h200-decode",
        1,
        1,
    )
    # Each role's own resources (decode's values, prefill's the workers' and preset's).
    assert (prefill.cpu, prefill.memory) == (Decimal(96), quantity("1500Gi"))
    assert (decode.cpu, decode.memory, decode.memory_limit) == (
        Decimal(64),
        quantity("1Ti"),
        quantity("1Ti"),
    )
    assert [(g.gpus, g.hosts, g.gpu_resource) for g in plan.worker_groups] == [
        (8, 1, "nvidia.com/gpu")
    ] * 2
    assert (prefill.values_key, decode.noun) == ("disaggregation.prefill", "decode worker")


@pytest.mark.parametrize("values", [PD, {}], ids=["disaggregated", "aggregated"])
def test_without_helm_the_plan_has_the_groups_helm_renders(values: dict, tmp_path: Path):
    rendered = _plan(values, tmp_path, find_helm(None))
    fallback = _plan(values, tmp_path, None)
    assert rendered.rendered_by and fallback.rendered_by is None
    assert [_sizes(g) for g in fallback.worker_groups] == [
        _sizes(g) for g in rendered.worker_groups
    ]
    assert len(rendered.worker_groups) == (2 if values else 1)


# --- the checks ----------------------------------------------------------------------------


def test_the_chart_check_names_both_groups(capsys, tmp_path, shared_dir):
    _, report = preflight(capsys, tmp_path, sc.healthy_h200(shared_dir), "h200-flash-mtp", *PD_SETS)
    assert only(report, "chart.render")["title"].endswith(
        "RayService dsv4-dsv4-serve, prefill workers 2-4 replica(s) x 1 pod(s) x 8 "
        "nvidia.com/gpu, decode workers 1 replica(s) x 1 pod(s) x 8 nvidia.com/gpu"
    )


def test_the_roles_share_the_gpu_nodes(capsys, tmp_path, shared_dir):
    """Four 8-GPU nodes take the 3 pods of the minimum, not the 5 of the maximum: the
    autoscaling warning caps the role that does not fit."""
    code, report = preflight(
        capsys, tmp_path, sc.healthy_h200(shared_dir), "h200-flash-mtp", *PD_SETS
    )
    assert code == 0, failed(report)
    finding = only(report, "gpu.placement")
    assert finding["status"] == "warn"
    assert finding["title"] == (
        "room for the 3 worker pod(s) needed (prefill 2 replica(s) x 1 pod(s) of 8 GPUs, "
        "decode 1 replica(s) x 1 pod(s) of 8 GPUs: 24 GPUs); autoscaling to 4 prefill + "
        "1 decode replica(s) needs 5 pod(s), room for 4"
    )
    assert finding["fix"] == (
        "cap autoscaling: --set disaggregation.prefill.maxReplicas=3, or add nodes"
    )
    nodes = [*sc.h200_nodes(5), *sc.cpu_nodes()]
    _, report = preflight(
        capsys,
        tmp_path,
        dc.cluster_base(shared_dir, nodes, sc.SHARED_STORAGE),
        "h200-flash-mtp",
        *PD_SETS,
    )
    assert only(report, "gpu.placement")["status"] == "pass"


def test_two_nodes_leave_decode_without_room(capsys, tmp_path, shared_dir):
    """Two nodes hold either role's pods, not all three: one group's count alone would
    pass."""
    nodes = [*sc.h200_nodes(2), *sc.cpu_nodes()]
    code, report = preflight(
        capsys,
        tmp_path,
        dc.cluster_base(shared_dir, nodes, sc.SHARED_STORAGE),
        "h200-flash-mtp",
        *PD_SETS,
    )
    assert code == 1 and failed(report) == {"gpu.placement"}
    finding = only(report, "gpu.placement")
    assert finding["title"].startswith("room for 2 of the 3 worker pod(s) needed")
    assert finding["details"] == ["decode: room for 0 of 1 pod(s)"]


def test_each_role_s_pod_must_fit_a_node(capsys, tmp_path, shared_dir):
    """Nodes of 1024Gi take decode's 900Gi pods but not prefill's 1500Gi (the preset's
    default): the memory check and the placement name prefill and its values alone."""
    nodes = [*sc.h200_nodes(memory_gi=1024), *sc.cpu_nodes()]
    code, report = preflight(
        capsys,
        tmp_path,
        dc.cluster_base(shared_dir, nodes, sc.SHARED_STORAGE),
        "h200-flash-mtp",
        *PD_SETS,
        "--set",
        "disaggregation.decode.resources.memory=900Gi",
    )
    assert code == 1
    memory = [
        f
        for f in by_check(report)["gpu.resources"]
        if f["title"].startswith(("memory", "prefill", "decode"))
    ]
    assert [(f["status"], f["title"]) for f in memory] == [
        (
            "fail",
            "prefill workers request 1500Gi of memory; the GPU nodes have at most 1024Gi "
            "allocatable",
        ),
        ("pass", "memory: 4 GPU node(s) have >= 900Gi allocatable for the decode pods"),
    ]
    assert "--set disaggregation.prefill.resources.memory=1024Gi" in memory[0]["fix"]
    placement = only(report, "gpu.placement")
    assert placement["title"].startswith("room for 1 of the 3 worker pod(s) needed")
    assert placement["details"][:2] == [
        "prefill: room for 0 of 2 pod(s)",
        "gpu-h200-a (prefill): memory 1024Gi allocatable < 1500Gi requested",
    ]


def test_a_quota_counts_both_roles_gpus(capsys, tmp_path, shared_dir):
    """The minimum asks 2 prefill + 1 decode pods of 8 GPUs: 24, more than 16 left."""
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": dc.meta("ResourceQuota", "gpu-quota", "dsv4"),
        "spec": {"hard": {"requests.nvidia.com/gpu": "16"}},
        "status": {
            "hard": {"requests.nvidia.com/gpu": "16"},
            "used": {"requests.nvidia.com/gpu": "0"},
        },
    }
    _, report = preflight(
        capsys, tmp_path, [*sc.healthy_h200(shared_dir), quota], "h200-flash-mtp", *PD_SETS
    )
    finding = only(report, "namespace.quota")
    assert finding["status"] == "fail"
    assert finding["details"] == [
        "gpu-quota: requests.nvidia.com/gpu has 16 left, the release needs 24"
    ]


def test_without_helm_both_groups_are_checked(capsys, tmp_path, shared_dir, monkeypatch):
    monkeypatch.setattr("serving.doctor.plan.find_helm", lambda explicit: None)
    nodes = [*sc.h200_nodes(2), *sc.cpu_nodes()]
    code, report = preflight(
        capsys,
        tmp_path,
        dc.cluster_base(shared_dir, nodes, sc.SHARED_STORAGE),
        "h200-flash-mtp",
        *PD_SETS,
    )
    assert only(report, "chart.render")["details"] == [
        "prefill workers 2-4 replica(s) x 1 pod(s) x 8 nvidia.com/gpu",
        "decode workers 1 replica(s) x 1 pod(s) x 8 nvidia.com/gpu",
    ]
    assert code == 1 and failed(report) == {"gpu.placement"}
    assert only(report, "gpu.placement")["details"] == ["decode: room for 0 of 1 pod(s)"]
