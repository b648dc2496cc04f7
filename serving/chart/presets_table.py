"""What the Helm chart needs to know about each GPU preset, derived from the profiles
(the chart cannot run Python; this table is generated and checked for staleness)."""

from __future__ import annotations

from typing import Any

from serving.profile import GPUS_PER_NODE, list_presets, load_profile

PLATFORMS = {"nvidia": "cuda", "amd": "rocm"}


def preset_row(name: str) -> dict[str, Any]:
    profile = load_profile(name)
    acc, par, dep = profile.accelerator, profile.parallelism, profile.deployment
    scaling = dep.autoscaling
    return {
        "platform": PLATFORMS[acc.kind],
        "gpuType": acc.type,
        "gpusPerNode": GPUS_PER_NODE[acc.type],
        "gpusPerReplica": acc.per_replica,
        "nodesPerReplica": par.nodes,
        "gpusPerPod": acc.per_replica // par.nodes,
        "minReplicas": scaling.min_replicas if scaling else dep.replicas,
        "maxReplicas": scaling.max_replicas if scaling else dep.replicas,
        "modelId": profile.model.id,
        "modelSource": profile.model.source,
    }


def gpu_presets() -> list[str]:
    return [n for n in list_presets() if load_profile(n).accelerator.kind in PLATFORMS]


def presets_table() -> dict[str, dict[str, Any]]:
    return {name: preset_row(name) for name in gpu_presets()}
