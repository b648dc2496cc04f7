"""Prefill/decode disaggregation up to the engine: the preset section's checks, the KV
connector config as vLLM's own ``KVTransferConfig`` and connector registry read it, and
the Serve application as Ray builds it (``build_app``, what ``serve run`` and KubeRay do
first) beside the one Ray Serve LLM's ``build_pd_openai_app`` makes of the same configs."""

import os
from typing import Any

import pytest
import vllm
from ray.serve._private.build_app import build_app
from ray.serve.llm import build_pd_openai_app
from vllm.config import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

from serving.app import build
from serving.config.build_args import resolve
from serving.config.llm_config import resolve_model_source
from serving.config.preset import PresetError, load_preset, parse_set
from serving.disagg.configs import connector_problem, pd_llm_configs

PD_SETS = ["serving.path=ingress", "deployment.autoscaling=null"]


def pd_preset(name: str = "h200-flash-mtp", *sets: str):
    return load_preset(name, [parse_set(s) for s in (*PD_SETS, *sets)])


@pytest.mark.parametrize(
    ("name", "sets", "message"),
    [
        ("cpu-tiny", ["disaggregation.decode.replicas=2"], "needs serving.path 'ingress'"),
        (
            "h200-flash-mtp",
            ["serving.path=ingress", "disaggregation.connector=nixl"],
            "sizes each role itself .*: drop deployment.autoscaling",
        ),
        (
            "cpu-tiny",
            [
                *PD_SETS,
                "disaggregation.decode.autoscaling="
                "{min_replicas: 3, max_replicas: 2, target_ongoing_requests: 4}",
            ],
            "min_replicas \\(3\\) must not exceed max_replicas \\(2\\)",
        ),
        (
            "cpu-tiny",
            [
                *PD_SETS,
                "disaggregation.prefill.autoscaling="
                "{min_replicas: 0, max_replicas: 2, target_ongoing_requests: 4}",
            ],
            "disaggregation.prefill.autoscaling.min_replicas: Input should be greater than or "
            "equal to 1",
        ),
        (
            "cpu-tiny",
            ["serving.ingress_resource=true"],
            "ingress_resource places the ingress replica: it needs path 'ingress'",
        ),
        ("cpu-tiny", [*PD_SETS, "disaggregation.connector=rdma"], "'nixl' or 'mooncake'"),
        ("cpu-tiny", [*PD_SETS, "disaggregation.prefill.gpu_share=0.5"], "needs a GPU"),
        ("cpu-tiny", [*PD_SETS, "disaggregation.kv_buffer_device=cuda"], "on a cpu accelerator"),
        ("cpu-tiny", [*PD_SETS, "disaggregation.decode.replicas=0"], "greater than or equal to 1"),
        (
            "cpu-tiny",
            [*PD_SETS, "disaggregation.mtp_on=both", "engine_args.kv_transfer_config={}"],
            "sets engine_args.kv_transfer_config itself",
        ),
        (
            "h200-flash-mtp",
            [*PD_SETS, "disaggregation.mtp_on=decode"],
            "mtp_on 'decode' with NIXL on a GPU",
        ),
    ],
)
def test_a_bad_section_is_refused_by_name(name: str, sets: list[str], message: str):
    with pytest.raises(PresetError, match=message):
        load_preset(name, [parse_set(s) for s in sets])


@pytest.mark.parametrize(
    ("connector", "mtp_on"), [("nixl", "both"), ("mooncake", "decode"), ("mooncake", "both")]
)
def test_both_roles_get_a_connector_vllm_knows_and_mtp_where_asked(connector: str, mtp_on: str):
    preset = pd_preset(
        "h200-flash-mtp",
        f"disaggregation.connector={connector}",
        f"disaggregation.mtp_on={mtp_on}",
    )
    configs = pd_llm_configs(preset, "/models/flash")
    prefill, decode = configs["prefill_config"], configs["decode_config"]
    for config in (prefill, decode):
        kv = KVTransferConfig(**config["engine_kwargs"]["kv_transfer_config"])
        assert kv.kv_connector in KVConnectorFactory._registry
        assert kv.is_kv_producer and kv.is_kv_consumer
        assert kv.kv_buffer_device == "cuda"
        # What NixlConnector's worker reads (nixl/base_worker.py, enforce_compat_hash):
        # relaxed only where the engines' speculative configs differ on purpose.
        relaxed = connector == "nixl" and mtp_on == "decode"
        assert kv.get_from_extra_config("enforce_handshake_compat", True) is not relaxed
    assert decode["engine_kwargs"]["speculative_config"]["method"] == "mtp"
    assert ("speculative_config" in prefill["engine_kwargs"]) is (mtp_on == "both")


def test_two_roles_on_one_gpu_fit_it_as_ray_builds_them():
    """Each role's replica, as Ray's builder makes it, asks for its share of the card in its
    placement group and tells vLLM the same share; the two fit one GPU."""
    sets = [
        *PD_SETS,
        "disaggregation.connector=mooncake",
        "disaggregation.prefill.gpu_share=0.45",
        "disaggregation.decode.gpu_share=0.45",
    ]
    built = build_app(build({"preset": "gpu-golden", "set": sets}), name="dsv4")
    roles = [d for d in built.deployments if d.func_or_class.__name__ != "Dsv4Ingress"]
    gpus = []
    for role in roles:
        replica = role._replica_config
        (bundle,) = replica.placement_group_bundles
        env = replica.ray_actor_options["runtime_env"]["env_vars"]
        assert float(env["VLLM_RAY_PER_WORKER_GPUS"]) == bundle["GPU"], role.name
        gpus.append(bundle["GPU"])
    assert len(roles) == 2 and sum(gpus) <= 1.0


def test_the_cpu_backend_stages_kv_in_host_memory():
    configs = pd_llm_configs(
        pd_preset("cpu-tiny", "disaggregation.connector=nixl"), "/models/golden"
    )
    kv = configs["decode_config"]["engine_kwargs"]["kv_transfer_config"]
    assert kv["kv_buffer_device"] == "cpu"


def _graph(args: dict[str, Any] | Any) -> list[dict[str, Any]]:
    built = build_app(args, name="dsv4")
    return [
        {
            "name": d.name,
            "class": d.func_or_class.__name__,
            "replicas": d._deployment_config.num_replicas,
            "bundles": d._replica_config.placement_group_bundles,
            "strategy": d._replica_config.placement_group_strategy,
        }
        for d in built.deployments
    ]


def test_the_app_is_ray_s_p_d_graph_with_our_gateway_as_its_ingress():
    sets = [*PD_SETS, "disaggregation.connector=mooncake", "disaggregation.prefill.replicas=2"]
    args = {"preset": "h200-flash-mtp", "set": sets}
    ours = _graph(build(args))
    _, preset = resolve(args)
    theirs = _graph(build_pd_openai_app(pd_llm_configs(preset, resolve_model_source(preset))))
    assert [d["class"] for d in ours] == ["PDPrefillServer", "PDDecodeServer", "Dsv4Ingress"]
    assert ours[:2] == theirs[:2]  # prefill and decode exactly as Ray's builder makes them
    assert [d["replicas"] for d in ours] == [2, 1, 1]
    assert len(ours[0]["bundles"]) == preset.accelerator.per_replica


def test_nixl_before_0_34_is_refused_naming_the_upstream_bug():
    preset = pd_preset("h200-flash-mtp", "disaggregation.connector=nixl")
    assert connector_problem(preset, "0.34.0") is None
    assert connector_problem(preset, "0.34.1+cu130") is None
    assert "vllm-project/vllm#57661" in (connector_problem(preset, "0.33.0") or "")
    mooncake = pd_preset("h200-flash-mtp", "disaggregation.connector=mooncake")
    assert connector_problem(mooncake, "0.32.0") is None
    # The installed vLLM is 0.32: the builder refuses, before any replica starts.
    assert vllm.__version__.startswith("0.32")
    with pytest.raises(ValueError, match="needs vLLM >= 0.34.0 for DeepSeek-V4, found 0.32"):
        build({"preset": "h200-flash-mtp", "set": [*PD_SETS, "disaggregation.connector=nixl"]})


def test_nixl_without_its_package_is_refused_naming_it():
    # This environment has NIXL's CUDA wheel (requirements-nixl.lock), not the ROCm one.
    cuda = pd_preset("h200-flash-mtp", "disaggregation.connector=nixl")
    assert connector_problem(cuda, "0.34.0") is None
    rocm = pd_preset("mi355x-pro-mtp", "disaggregation.connector=nixl")
    assert "needs the nixl_rocm package" in (connector_problem(rocm, "0.34.0") or "")
    mooncake = pd_preset("mi355x-pro-mtp", "disaggregation.connector=mooncake")
    assert connector_problem(mooncake, "0.34.0") is None


def test_a_local_ray_node_has_cpus_for_every_engine_and_the_ingress():
    from serving.local.local_up import local_ray_cpus

    preset = pd_preset("cpu-tiny", "disaggregation.prefill.replicas=3")
    # Ray Serve LLM's first bundle holds the replica actor with a rank: 2 CPUs an engine.
    assert local_ray_cpus(preset) == max(4, os.cpu_count() or 1, 2 * 4 + 2)
    assert local_ray_cpus(load_preset("cpu-tiny")) == max(4, os.cpu_count() or 1)


def test_nixl_on_the_cpu_backend_is_not_gated():
    # One region of whole packed rows there: disaggregated text equals one engine's
    # (tests/serving/disagg/test_disaggregation_cpu.py).
    preset = pd_preset("cpu-tiny", "disaggregation.connector=nixl")
    assert connector_problem(preset, "0.32.0") is None


@pytest.mark.parametrize(("sets", "policy"), [((), "recompute"), (("fail",), "fail")])
def test_a_lost_transfer_is_recomputed_on_decode_unless_the_preset_says_fail(sets, policy):
    chosen = [f"disaggregation.on_transfer_failure={s}" for s in sets]
    configs = pd_llm_configs(pd_preset("cpu-tiny", "disaggregation.connector=nixl", *chosen), "/m")
    for config in configs.values():
        kv = KVTransferConfig(**config["engine_kwargs"]["kv_transfer_config"])
        assert kv.kv_load_failure_policy == policy


def test_an_unknown_transfer_failure_policy_is_refused_by_name():
    with pytest.raises(ValueError, match="on_transfer_failure"):
        pd_preset("cpu-tiny", "disaggregation.on_transfer_failure=retry")


def test_decode_only_mtp_is_refused_only_where_nixl_checks_packed_rows_on_a_gpu():
    gpu_nixl = ("h200-flash-mtp", "disaggregation.connector=nixl", "disaggregation.mtp_on=decode")
    with pytest.raises(ValueError, match="mtp_on 'decode' with NIXL on a GPU"):
        pd_preset(*gpu_nixl)
    # The CPU backend (run in CI disaggregated with MTP on decode only) and Mooncake are not
    # held to that check: the drafter runs on decode alone.
    for sets in (
        ("cpu-tiny", "disaggregation.connector=nixl", "disaggregation.mtp_on=decode"),
        ("h200-flash-mtp", "disaggregation.connector=mooncake", "disaggregation.mtp_on=decode"),
    ):
        configs = pd_llm_configs(pd_preset(*sets), "/m")
        assert "speculative_config" not in configs["prefill_config"]["engine_kwargs"], sets
        assert configs["decode_config"]["engine_kwargs"]["speculative_config"]["method"] == "mtp"
    # Nor is a preset that drafts nothing: neither role gets a drafter.
    plain = pd_preset(*gpu_nixl, "speculation.method=none", "speculation.num_speculative_tokens=0")
    for config in pd_llm_configs(plain, "/m").values():
        assert "speculative_config" not in config["engine_kwargs"]
