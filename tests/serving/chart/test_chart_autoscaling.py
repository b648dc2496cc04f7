"""Finding 3: one set of values drives Serve's autoscaling and the worker groups, and
Ray's autoscaler, fed the rendered RayCluster, can start GPU workers (from zero too)."""

import json
import shlex
from pathlib import Path

import pytest
from ray.serve.config import AutoscalingConfig

from serving.chart.presets_table import presets_table
from serving.config.llm_config import deployment_config
from tests.support.chart_ray import (
    autoscaling_config,
    nodes_to_launch,
    replica_placement_group,
    served_preset,
)
from tests.support.chart_render import ray_cluster, render, worker_group

PRESETS = presets_table()
CASES = {
    **{name: {} for name in PRESETS},
    "h200-flash-mtp from zero": {"workers": {"minReplicas": 0, "maxReplicas": 3}},
    "h200-pro-mtp to 3": {"workers": {"maxReplicas": 3, "targetOngoingRequests": 12}},
    "mi300x-pro-mtp from zero": {"workers": {"minReplicas": 0, "maxReplicas": 2}},
    "gb300-pro-mtp fixed 3": {"workers": {"minReplicas": 3, "maxReplicas": 3}},
}


def _values(case: str) -> dict:
    preset = case.split()[0]
    return {"preset": preset, "platform": PRESETS[preset]["platform"], **CASES[case]}


@pytest.mark.parametrize("case", sorted(CASES))
def test_ray_autoscaler_sees_the_gpus_serve_asks_for(case: str, tmp_path: Path):
    values = _values(case)
    row = PRESETS[values["preset"]]
    objects = render(tmp_path, values)
    group = worker_group(objects)
    hosts = row["nodesPerReplica"]

    # KubeRay's builder, as the in-tree autoscaler runs it on this RayCluster.
    config = autoscaling_config(objects)
    node_type = config["available_node_types"][group["groupName"]]
    accelerator = f"accelerator_type:{row['rayAcceleratorType']}"
    assert node_type["resources"]["GPU"] == row["gpusPerPod"]
    assert node_type["resources"][accelerator] == 1
    assert node_type["min_workers"] == group["minReplicas"] * hosts
    assert node_type["max_workers"] == group["maxReplicas"] * hosts

    # Serve's deployment runs the same replica counts.
    resolved = served_preset(objects)
    deployment = deployment_config(resolved)
    if group["minReplicas"] < group["maxReplicas"]:
        scaling = AutoscalingConfig(**deployment["autoscaling_config"])
        assert (scaling.min_replicas, scaling.max_replicas) == (
            group["minReplicas"],
            group["maxReplicas"],
        )
        assert ray_cluster(objects)["enableInTreeAutoscaling"] is True
    else:
        assert "autoscaling_config" not in deployment
        assert deployment["num_replicas"] == group["replicas"] == group["maxReplicas"]
        assert ray_cluster(objects)["enableInTreeAutoscaling"] is False

    # One replica's placement group, on an empty cluster: Ray launches one replica's hosts.
    bundles, strategy = replica_placement_group(resolved)
    assert all(b[accelerator] > 0 for b in bundles), "Ray Serve LLM asks for the GPU type"
    to_add, residual = nodes_to_launch(config, bundles, strategy)
    assert residual == [], f"Ray's autoscaler cannot place {bundles[0]} on {node_type}"
    assert dict(to_add) == {group["groupName"]: hosts}


def test_serve_autoscaling_follows_the_chart_values(tmp_path: Path):
    objects = render(
        tmp_path,
        {"workers": {"minReplicas": 0, "maxReplicas": 5, "targetOngoingRequests": 7}},
    )
    scaling = deployment_config(served_preset(objects))["autoscaling_config"]
    assert scaling == {"min_replicas": 0, "max_replicas": 5, "target_ongoing_requests": 7}
    group = worker_group(objects)
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (0, 0, 5)


def test_h200_pro_with_more_replicas_autoscales_in_serve_too(tmp_path: Path):
    objects = render(tmp_path, {"preset": "h200-pro-mtp", "workers": {"maxReplicas": 3}})
    scaling = deployment_config(served_preset(objects))["autoscaling_config"]
    assert (scaling["min_replicas"], scaling["max_replicas"]) == (1, 3)
    assert ray_cluster(objects)["enableInTreeAutoscaling"] is True


def test_accelerator_resource_survives_kuberays_ray_start_command(tmp_path: Path):
    # KubeRay writes `--resources=<value>` into the container's shell command
    # (ray-operator/controllers/ray/common/pod.go, convertParamMap); `ray start` parses JSON.
    for preset, row in PRESETS.items():
        group = worker_group(render(tmp_path, {"preset": preset, "platform": row["platform"]}))
        (arg,) = shlex.split(f"--resources={group['rayStartParams']['resources']}")
        assert json.loads(arg.removeprefix("--resources=")) == {
            f"accelerator_type:{row['rayAcceleratorType']}": 1
        }


@pytest.mark.parametrize(
    "item",
    [
        "deployment.replicas=3",
        "deployment.autoscaling.max_replicas=9",
        "deployment.autoscaling={min_replicas: 1, max_replicas: 2, target_ongoing_requests: 1}",
        "parallelism.tensor=4",
        "accelerator.per_replica=4",
    ],
)
def test_serve_set_cannot_resize_behind_the_worker_group(item: str, tmp_path: Path):
    stderr = render(tmp_path, {"serve": {"set": [item]}}, expect_ok=False)
    assert f'serve.set[0] "{item}": the chart sets' in stderr
