"""Finding 5: a replica spanning hosts gets Ready, keeps each TP group on one node, and its
nodes can be drained. Every multi-node preset is rendered and its probes, placement
bundles and PodDisruptionBudget are checked together."""

from pathlib import Path

import pytest

from serving.chart.presets_table import presets_table
from tests.support.chart_cluster import disruptions_allowed, running_pods
from tests.support.chart_ray import (
    autoscaling_config,
    nodes_to_launch,
    replica_placement_group,
    served_preset,
)
from tests.support.chart_render import by_kind, render, worker_group
from tests.support.netpol_eval import selector_matches

PRESETS = presets_table()
MULTI_NODE = sorted(n for n, row in PRESETS.items() if row["nodesPerReplica"] > 1)


def test_there_is_a_multi_node_preset_to_check():
    assert MULTI_NODE, "no preset spans nodes: this file would check nothing"


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("preset", MULTI_NODE)
def test_multi_node_replicas_get_ready_stay_packed_and_drain(
    preset: str, replicas: int, tmp_path: Path
):
    row = PRESETS[preset]
    hosts, per_pod, tp = row["nodesPerReplica"], row["gpusPerPod"], row["tensorParallel"]
    objects = render(
        tmp_path,
        {
            "preset": preset,
            "platform": row["platform"],
            "workers": {"minReplicas": replicas, "maxReplicas": replicas},
        },
    )
    group = worker_group(objects)
    assert group["numOfHosts"] == hosts and group["rayStartParams"]["num-gpus"] == str(per_pod)

    # Placement: one-GPU bundles (vLLM's Ray executor rejects more per bundle), packed
    # onto whole hosts; ranks are numbered host by host, so TP groups never straddle.
    resolved = served_preset(objects)
    bundles, strategy = replica_placement_group(resolved)
    assert strategy == "PACK", "SPREAD deals a replica's bundles over every free node"
    assert len(bundles) == row["gpusPerReplica"] and all(b["GPU"] == 1 for b in bundles)
    assert per_pod % tp == 0, "a host holds whole tensor-parallel groups"
    to_add, residual = nodes_to_launch(autoscaling_config(objects), bundles, strategy)
    assert residual == [] and dict(to_add) == {group["groupName"]: hosts}

    # Probes: every host of a healthy replica is Ready, with or without a Serve proxy.
    pods = running_pods(objects)
    workers = [p for p in pods if p.labels["app.kubernetes.io/component"] == "ray-worker"]
    assert len(workers) == replicas * hosts
    not_ready = [p.name for p in workers if not p.ready]
    assert not not_ready, f"never Ready: {not_ready} (no Serve proxy on those hosts)"

    # The API Service only routes to pods that do run a Serve proxy.
    api = next(s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-api"))
    routed = [
        p for p in pods if selector_matches({"matchLabels": api["spec"]["selector"]}, p.labels)
    ]
    assert routed and all(("/-/healthz", 8000) in p.serves for p in routed)

    # The PDB lets a drain evict a worker of a healthy cluster (KubeRay's RayCluster has no
    # scale subresource: tests/support/reference/crds/ray.io_rayclusters.yaml lists only status).
    (pdb,) = by_kind(objects, "PodDisruptionBudget")
    assert disruptions_allowed(pdb, pods, controller_has_scale=False) >= 1
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_can_be_drained_when_healthy(preset: str, tmp_path: Path, shared_dir):
    import yaml

    crd = yaml.safe_load((shared_dir / "crds" / "ray.io_rayclusters.yaml").read_text())
    has_scale = any("scale" in (v.get("subresources") or {}) for v in crd["spec"]["versions"])
    row = PRESETS[preset]
    objects = render(tmp_path, {"preset": preset, "platform": row["platform"]})
    pods = running_pods(objects)
    assert all(p.ready for p in pods)
    (pdb,) = by_kind(objects, "PodDisruptionBudget")
    assert disruptions_allowed(pdb, pods, controller_has_scale=has_scale) >= 1
