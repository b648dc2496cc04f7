"""Preset -> Ray Serve LLM ``LLMConfig`` (as a plain dict, so it renders to YAML too)."""

from pathlib import Path
from typing import Any

from serving.config.preset import Preset

# Ray's accelerator_type names for the GPUs our presets target.
RAY_ACCELERATOR_TYPES = {
    "H100": "H100",  # Ray's own names (ray.util.accelerators)
    "H200": "H200",
    "B200": "B200",
    "GB300": "GB300",
    "MI300X": "AMD-Instinct-MI300X-OAM",
    "MI355X": "AMD-Instinct-MI355X-OAM",
}


def resolve_model_source(preset: Preset, base_dir: Path | None = None) -> str:
    """A local relative path becomes absolute (replicas do not share our cwd)."""
    source = preset.model.source
    candidate = (base_dir or Path.cwd()) / source
    if (
        preset.model.golden
        or preset.model.bench
        or source.startswith((".", "/"))
        or candidate.exists()
    ):
        return str(candidate.resolve())
    return source


def is_local_path(model_source: str) -> bool:
    return model_source.startswith("/")


def deployment_config(preset: Preset) -> dict[str, Any]:
    dep = preset.deployment
    out: dict[str, Any] = {
        "max_ongoing_requests": dep.max_ongoing_requests,
        "max_queued_requests": dep.max_queued_requests,
        # A DSV4 engine loads for minutes; do not mark a loading replica unhealthy.
        "health_check_period_s": 10,
        "health_check_timeout_s": 60,
        "graceful_shutdown_timeout_s": 60,
    }
    if dep.autoscaling:
        out["autoscaling_config"] = dep.autoscaling.model_dump()
    else:
        out["num_replicas"] = dep.replicas
    if preset.serving.routing == "prefix":
        out["request_router_config"] = request_router_config(preset)
    return out


PREFIX_ROUTER_CLASS = "serving.routing.router:PrefixAffinityRouter"


def request_router_config(preset: Preset) -> dict[str, Any]:
    """Serve's request router of the engine deployment for ``serving.routing: prefix``
    (ray/serve/config.py RequestRouterConfig; the kwargs reach ``initialize_state``)."""
    prefix = preset.serving.prefix
    return {
        "request_router_class": PREFIX_ROUTER_CLASS,
        "request_router_kwargs": {
            "key_chars": prefix.key_chars,
            "balance_factor": prefix.balance_factor,
            "load_ttl_s": prefix.load_ttl_ms / 1000,
        },
    }


def placement_strategy(preset: Preset) -> str:
    """How Ray places one replica's one-GPU bundles (vLLM needs one GPU per bundle).

    One node: STRICT_PACK, the whole TP group on one node or not at all. Several nodes:
    PACK fills whole nodes (each worker pod is one node of per_replica/nodes GPUs, a
    multiple of TP), and vLLM's Ray executor orders ranks node by node (0.32:
    vllm/v1/executor/ray_executor.py, sort_by_driver_then_worker_ip; 0.33 deletes that
    executor: ray_executor_v2.py ranks bundles by ray_utils.get_bundles_sorted_by_node,
    driver's node first, grouped by node), so each TP group stays inside one node. SPREAD
    would deal bundles round-robin over every free node and split TP groups as soon as
    more nodes are free than a replica needs.
    """
    return "STRICT_PACK" if preset.parallelism.nodes == 1 else "PACK"


def llm_config(preset: Preset, model_source: str) -> dict[str, Any]:
    acc = preset.accelerator
    config: dict[str, Any] = {
        "model_loading_config": {"model_id": preset.model.id, "model_source": model_source},
        "engine_kwargs": preset.engine_kwargs(),
        "deployment_config": deployment_config(preset),
        "runtime_env": {"env_vars": preset.engine_env()},
        "log_engine_metrics": True,
        # Ray Serve LLM batches stream chunks every 50 ms by default (ingress path).
        "experimental_configs": {
            "stream_batching_interval_ms": preset.serving.stream_batching_interval_ms
        },
    }
    if is_local_path(model_source):
        # Node initialisation only downloads the model (a task that imports torch and
        # transformers): nothing to do for a local or PVC path.
        config["callback_config"] = {"callback_class": "serving.compat.ray_private.SkipNodeInit"}
    if acc.kind == "cpu":
        config["accelerator_config"] = {"kind": "cpu"}
        config["placement_group_config"] = {"bundles": [{"CPU": 1}] * acc.per_replica}
    else:
        # Ray Serve LLM adds `accelerator_type:<TYPE>` to each bundle; the chart's worker
        # groups advertise that resource so the autoscaler can start them from zero.
        config["accelerator_type"] = RAY_ACCELERATOR_TYPES[acc.type]
        config["placement_group_config"] = {
            "bundles": [{"GPU": acc.gpu_share, "CPU": 1}] * acc.per_replica,
            "strategy": placement_strategy(preset),
        }
    return config
