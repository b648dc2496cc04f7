"""The prefill and decode engines' Ray Serve LLM configs: the preset's engine, one KV
connector for both, MTP where the preset's section puts it, each role's replica count and
GPU share."""

from __future__ import annotations

import importlib.util
from typing import Any

from packaging.version import Version

from serving.config.llm_config import llm_config
from serving.config.preset import Preset
from serving.disagg.placement import ROLE_RESOURCES

# vLLM's names for the connectors (vllm/distributed/kv_transfer/kv_connector/factory.py).
CONNECTORS = {"nixl": "NixlConnector", "mooncake": "MooncakeConnector"}
# NIXL de-duplicated KV regions by base address alone before this release, so DSV4's
# compressor state, indexer and sliding-window caches aliased and decode read garbage
# (vllm-project/vllm#57661; 0.34 keys regions on base address and block length).
NIXL_DSV4_FIXED_IN = Version("0.34.0")


def connector_problem(preset: Preset, vllm_version: str) -> str | None:
    """Why this vLLM cannot serve the preset disaggregated (None when it can)."""
    pd = preset.disaggregation
    if pd is None or pd.connector != "nixl":
        return None
    # vLLM imports NIXL from nixl, or nixl_rocm on ROCm (vllm/distributed/nixl_utils.py);
    # without it every engine would fail at start, each with an import error.
    package = "nixl_rocm" if preset.accelerator.kind == "amd" else "nixl"
    if importlib.util.find_spec(package) is None:
        return (
            f"connector 'nixl' needs the {package} package, which this environment lacks: "
            "vLLM's images built with INSTALL_KV_CONNECTORS carry it; elsewhere install it "
            "(pip install --no-deps -r requirements-nixl.lock on a CPU, the nixl wheel of "
            "your CUDA on a GPU) or use connector 'mooncake'"
        )
    if preset.accelerator.kind == "cpu":
        # vLLM's CPU backend keeps a layer row's caches in one packed storage: NIXL's
        # base-address merge makes one region of whole rows, which moves every cache of
        # the row together (measured on 0.32: disaggregated text equals one engine's).
        return None
    if Version(vllm_version).release < NIXL_DSV4_FIXED_IN.release:
        return (
            f"disaggregation over NIXL needs vLLM >= {NIXL_DSV4_FIXED_IN} for DeepSeek-V4, "
            f"found {vllm_version}: earlier NIXL aliases DSV4's KV cache groups and decode "
            "returns wrong text (vllm-project/vllm#57661); use an image on vLLM "
            f"{NIXL_DSV4_FIXED_IN} or connector 'mooncake'"
        )
    return None


def kv_transfer_config(preset: Preset) -> dict[str, Any]:
    """vLLM's KVTransferConfig for both roles (each engine may send and receive)."""
    pd = preset.disaggregation
    assert pd is not None
    device = pd.kv_buffer_device
    if device == "auto":
        device = "cpu" if preset.accelerator.kind == "cpu" else "cuda"
    config: dict[str, Any] = {
        "kv_connector": CONNECTORS[pd.connector],
        "kv_role": "kv_both",
        "kv_buffer_device": device,
        # vLLM's default fails the request when its KV cannot be read
        # (vllm/config/kv_transfer.py, v1/core/sched/scheduler.py _handle_invalid_blocks).
        "kv_load_failure_policy": pd.on_transfer_failure,
    }
    if pd.connector == "nixl" and pd.mtp_on == "decode" and preset.speculation.method != "none":
        # NIXL's handshake compares the engines' speculative configs; a prefill engine
        # without the drafter differs from decode on purpose
        # (vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py).
        config["kv_connector_extra_config"] = {"enforce_handshake_compat": False}
    return config


def _role_config(preset: Preset, source: str, role: str) -> dict[str, Any]:
    pd = preset.disaggregation
    assert pd is not None
    side = getattr(pd, role)
    role_preset = preset.model_copy(
        update={
            "accelerator": preset.role_accelerator(role),
            "deployment": preset.deployment.model_copy(update={"replicas": side.replicas}),
        }
    )
    config = llm_config(role_preset, source)
    if side.autoscaling:
        deployment = config["deployment_config"]
        deployment.pop("num_replicas")
        deployment["autoscaling_config"] = side.autoscaling.model_dump()
    if pd.role_resources:
        # Ray Serve LLM copies placement_group_config's bundles as given (its
        # accelerator_type is added on top), and the replica actor joins the first one.
        resource = ROLE_RESOURCES[role]
        placement = config["placement_group_config"]
        placement["bundles"] = [{**b, resource: b.get("GPU", 1)} for b in placement["bundles"]]
    kwargs = config["engine_kwargs"]
    kwargs["kv_transfer_config"] = kv_transfer_config(preset)
    if role == "prefill" and pd.mtp_on == "decode":
        kwargs.pop("speculative_config", None)
    return config


def pd_llm_configs(preset: Preset, source: str) -> dict[str, dict[str, Any]]:
    """``prefill_config`` and ``decode_config`` as Ray Serve LLM's P/D builder takes them."""
    return {
        "prefill_config": _role_config(preset, source, "prefill"),
        "decode_config": _role_config(preset, source, "decode"),
    }
