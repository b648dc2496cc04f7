"""What Ray makes of the rendered chart (test helper), with Ray's own code: KubeRay's
autoscaling-config builder, the autoscaler's bin-packing, and Ray Serve LLM's placement
bundles for the Serve config the chart embeds. No Ray cluster is started."""

from __future__ import annotations

import functools
from typing import Any

from ray.autoscaler._private.kuberay.autoscaling_config import (
    _derive_autoscaling_config_from_ray_cr,
)
from ray.autoscaler._private.node_provider_availability_tracker import NodeAvailabilitySummary
from ray.autoscaler._private.resource_demand_scheduler import (
    _default_utilization_scorer,
    get_nodes_for,
    placement_groups_to_resource_demands,
)
from ray.core.generated.common_pb2 import Bundle, PlacementStrategy
from ray.core.generated.gcs_pb2 import PlacementGroupTableData

from serving.config.build_args import resolve
from serving.config.llm_config import llm_config
from serving.config.preset import Preset
from tests.support.chart_render import NAMESPACE, ray_cluster, serve_config


def autoscaling_config(objects: list[dict]) -> dict[str, Any]:
    """The autoscaler's view of the RayCluster KubeRay creates from the RayService."""
    ray_cr = {
        "metadata": {"name": "rel-dsv4-serve-x7k2q", "namespace": NAMESPACE},
        "spec": ray_cluster(objects),
    }
    return _derive_autoscaling_config_from_ray_cr(ray_cr)


def served_preset(objects: list[dict]) -> Preset:
    """The preset the Serve application in serveConfigV2 resolves to."""
    (app,) = serve_config(objects)["applications"]
    return resolve(app["args"])[1]


def replica_placement_group(resolved: Preset) -> tuple[list[dict[str, float]], str]:
    """One engine replica's placement group, as Ray Serve LLM requests it."""
    from ray.llm._internal.serve.core.server.llm_server import (
        _merge_replica_actor_and_child_actor_bundles,
    )
    from ray.serve.llm import LLMConfig

    config = LLMConfig(**llm_config(resolved, "/models/m"))
    engine = config.get_engine_config()
    # LLMServer.get_deployment_options: the replica actor joins the first bundle.
    bundles = _merge_replica_actor_and_child_actor_bundles(
        engine.placement_bundles, {"CPU": 1, "GPU": 0}
    )
    return bundles, engine.placement_strategy


def nodes_to_launch(config: dict[str, Any], bundles: list[dict], strategy: str):
    """Ray's autoscaler: worker nodes to add to an empty cluster for one pending group."""
    group = PlacementGroupTableData(
        strategy=PlacementStrategy.Value(strategy),
        bundles=[Bundle(unit_resources=b) for b in bundles],
    )
    demands, strict_spread = placement_groups_to_resource_demands([group])
    assert not strict_spread
    return get_nodes_for(
        config["available_node_types"],
        {},
        config["head_node_type"],
        config["max_workers"],
        demands,
        # As StandardAutoscaler binds it (no node type known to be unavailable).
        functools.partial(
            _default_utilization_scorer,
            node_availability_summary=NodeAvailabilitySummary(node_availabilities={}),
        ),
    )
