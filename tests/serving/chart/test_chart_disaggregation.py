"""The chart's disaggregated release and its ingress layout, against the real components:
helm (template, lint --strict), kubernetes-validate and the vendored KubeRay CRD, the
values schema, Ray Serve's config schema and builders (the app the Serve config makes,
beside Ray Serve LLM's own P/D builder), Ray's KubeRay autoscaling config and bin-packing
(where each role's replica and the ingress can go), Ray Serve LLM's and vLLM's NIXL port
handling (the fixed side-channel port the pods set), and the NetworkPolicy evaluator.

No Ray cluster or engine starts: Ray Serve LLM's deployment options read the runtime
context, which is stubbed.
"""

from __future__ import annotations

import os
import re
import types
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import ray
import yaml
from ray.serve._private.build_app import build_app
from ray.serve.llm import build_pd_openai_app
from ray.serve.schema import ServeDeploySchema

from serving.app import INGRESS_NAME, build
from serving.chart.presets_table import presets_table
from serving.config.build_args import resolve
from serving.disagg.configs import pd_llm_configs
from serving.disagg.placement import (
    INGRESS_RESOURCE,
    NIXL_PORT_BAND,
    NIXL_SIDE_CHANNEL_PORTS,
    ROLE_RESOURCES,
    UCX_TCP_PORT_RANGE,
)
from tests.serving.chart.test_helm_chart import crds, validate_all  # noqa: F401 - fixture
from tests.support.chart_cluster import disruptions_allowed
from tests.support.chart_layout import DIRECT_INGRESS, FALLBACK_PROXY, RAYLET_HEALTH, Pod
from tests.support.chart_ray import autoscaling_config, nodes_to_launch
from tests.support.chart_render import (
    CHART,
    INSTALL_VALUES,
    by_kind,
    helm,
    notes,
    pod_templates,
    ray_cluster,
    render,
    serve_config,
)
from tests.support.netpol_eval import selector_matches
from tests.support.netpol_flows import Flow, check, cluster_endpoints

PRESETS = presets_table()
PD = {
    "disaggregation": {
        "enabled": True,
        "prefill": {"minReplicas": 2, "maxReplicas": 4, "targetOngoingRequests": 16},
        "decode": {"minReplicas": 1, "resources": {"cpu": "64", "memory": "1Ti"}},
    }
}
MOONCAKE = {"disaggregation": {**PD["disaggregation"], "connector": "mooncake"}}


@pytest.fixture(scope="module")
def pd_release(tmp_path_factory) -> list[dict]:
    return render(tmp_path_factory.mktemp("pd"), PD)


def _groups(objects: list[dict]) -> dict[str, dict[str, Any]]:
    """The worker groups by role label."""
    return {
        g["template"]["metadata"]["labels"]["dsv4-serve/role"]: g
        for g in ray_cluster(objects)["workerGroupSpecs"]
    }


def _container(template: dict) -> dict[str, Any]:
    (container,) = template["spec"]["containers"]
    return container


def _env(template: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in _container(template)["env"]}


def _ports(template: dict) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in _container(template)["ports"]}


def _built(objects: list[dict]) -> dict[str, Any]:
    """The Serve application of serveConfigV2 as Ray Serve builds it (what KubeRay's push
    makes Serve's controller run), by deployment name."""
    (app,) = serve_config(objects)["applications"]
    stub = types.SimpleNamespace(runtime_env={})
    with mock.patch.object(ray, "get_runtime_context", lambda: stub):
        built = build_app(build(app["args"]), name=app["name"])
    return {d.name: d for d in built.deployments}


# --- the release renders, lints and validates ----------------------------------------


@pytest.mark.parametrize(
    "values",
    [PD, MOONCAKE, {**PD, "serve": {"path": "ingress"}}, {"serve": {"path": "ingress"}}],
    ids=["nixl", "mooncake", "explicit-path", "ingress-layout"],
)
def test_renders_objects_kubernetes_and_kuberay_accept(values, tmp_path: Path, crds):  # noqa: F811
    objects = render(
        tmp_path,
        {
            **values,
            "networkPolicy": {
                "egress": {"restrict": True, "apiServer": {"cidrs": ["10.0.0.1/32"]}}
            },
        },
    )
    validate_all(objects, crds)
    # Ray Serve's own schema of the config KubeRay pushes.
    ServeDeploySchema.model_validate(serve_config(objects))


def test_helm_lint_strict_accepts_a_disaggregated_release(tmp_path: Path):
    values = tmp_path / "pd.yaml"
    values.write_text(yaml.safe_dump({**PD, **INSTALL_VALUES}))
    out = helm("lint", "--strict", str(CHART), "-f", str(values))
    assert out.returncode == 0, out.stdout + out.stderr


# --- the Serve config: Ray's P/D graph, placed on the role groups ---------------------


def test_the_serve_config_builds_ray_s_p_d_graph_sized_by_the_role_values(pd_release):
    (app,) = serve_config(pd_release)["applications"]
    _, preset = resolve(app["args"])
    pd = preset.disaggregation
    assert preset.serving.path == "ingress" and preset.serving.ingress_resource
    assert pd is not None and pd.role_resources and pd.connector == "nixl"
    assert pd.prefill.autoscaling is not None
    assert pd.prefill.autoscaling.model_dump() == {
        "min_replicas": 2,
        "max_replicas": 4,
        "target_ongoing_requests": 16,
    }
    assert pd.decode.autoscaling is None and pd.decode.replicas == 1


def test_ray_builds_prefill_decode_and_the_ingress_where_the_chart_expects(tmp_path: Path):
    # Built by Ray Serve from the chart's config (mooncake: the vLLM 0.32 here refuses NIXL
    # for DSV4 on a GPU; the placement does not depend on the connector).
    objects = render(tmp_path, MOONCAKE)
    deployments = _built(objects)
    model = "deepseek-ai--DeepSeek-V4-Flash"
    prefill, decode = deployments[f"Prefill:{model}"], deployments[f"Decode:{model}"]
    ingress = deployments[INGRESS_NAME]
    groups = _groups(objects)
    # Per-role sizing: Serve's autoscaling for prefill, a fixed count for decode, the same
    # numbers as each worker group.
    auto = prefill._deployment_config.autoscaling_config
    assert (auto.min_replicas, auto.max_replicas) == (2, 4)
    assert (groups["prefill"]["minReplicas"], groups["prefill"]["maxReplicas"]) == (2, 4)
    assert decode._deployment_config.num_replicas == 1
    assert decode._deployment_config.autoscaling_config is None
    assert (groups["decode"]["minReplicas"], groups["decode"]["maxReplicas"]) == (1, 1)
    assert ray_cluster(objects)["enableInTreeAutoscaling"] is True
    # The same deployments as Ray Serve LLM's own P/D builder makes of these configs, with
    # the role resource added to every bundle.
    (app,) = serve_config(objects)["applications"]
    _, preset = resolve(app["args"])
    stub = types.SimpleNamespace(runtime_env={})
    with mock.patch.object(ray, "get_runtime_context", lambda: stub):
        theirs = build_app(
            build_pd_openai_app(pd_llm_configs(preset, preset.model.source)), name="ref"
        )
    reference = {d.name: d for d in theirs.deployments}
    for role, ours in (("prefill", prefill), ("decode", decode)):
        ref = reference[ours.name]
        assert (
            ours._replica_config.placement_group_bundles
            == ref._replica_config.placement_group_bundles
        )
        bundles = ours._replica_config.placement_group_bundles
        assert all(b[ROLE_RESOURCES[role]] == b["GPU"] for b in bundles), role
        other = ROLE_RESOURCES["decode" if role == "prefill" else "prefill"]
        assert not any(other in b for b in bundles), role
    assert ingress.ray_actor_options["resources"] == {INGRESS_RESOURCE: 1}


def test_ray_s_autoscaler_starts_each_role_on_its_own_group_and_the_ingress_on_the_head(
    tmp_path: Path,
):
    objects = render(tmp_path, MOONCAKE)
    config = autoscaling_config(objects)
    types_ = config["available_node_types"]
    groups = _groups(objects)
    gpus = PRESETS["h200-flash-mtp"]["gpusPerPod"]
    for role, group in groups.items():
        node = types_[group["groupName"]]
        assert node["resources"][ROLE_RESOURCES[role]] == gpus, role
        assert (node["min_workers"], node["max_workers"]) == (
            group["minReplicas"],
            group["maxReplicas"],
        )
    deployments = _built(objects)
    for role, group in groups.items():
        (name,) = [n for n in deployments if n.lower().startswith(role)]
        d = deployments[name]
        bundles = d._replica_config.placement_group_bundles
        to_add, residual = nodes_to_launch(
            config, bundles, d._replica_config.placement_group_strategy
        )
        assert residual == [] and dict(to_add) == {group["groupName"]: 1}, role
    # Only the head offers the ingress's resource: Ray places the gateway there.
    head = types_[config["head_node_type"]]
    assert head["resources"].get(INGRESS_RESOURCE) == 1
    assert all(
        INGRESS_RESOURCE not in t["resources"]
        for n, t in types_.items()
        if n != config["head_node_type"]
    )


# --- pods: NIXL ports, probes, scrape targets -------------------------------------------


def test_each_role_pod_pins_its_nixl_side_channel_where_ray_serve_llm_and_vllm_put_it(
    pd_release, monkeypatch
):
    from ray.llm._internal.serve.engines.vllm.kv_transfer.nixl import NixlConnectorBackend
    from ray.serve.llm import LLMConfig
    from vllm import envs as vllm_envs

    from serving.disagg.app import pd_serving_args

    (app,) = serve_config(pd_release)["applications"]
    _, preset = resolve(app["args"])
    args = pd_serving_args(preset, preset.model.source)
    templates = pod_templates(pd_release)
    for role in ("prefill", "decode"):
        config: LLMConfig = getattr(args, f"{role}_config")
        backend = NixlConnectorBackend(config)
        monkeypatch.setattr(backend, "_compute_port_offset", lambda: 0)
        # Ray Serve LLM's base for the role's first replica: the chart's port ...
        monkeypatch.delenv("VLLM_NIXL_SIDE_CHANNEL_PORT", raising=False)
        backend._set_side_channel_port()
        assert int(os.environ["VLLM_NIXL_SIDE_CHANNEL_PORT"]) == NIXL_SIDE_CHANNEL_PORTS[role]
        # ... and with the pod's environment set, Ray keeps it for every replica, and vLLM's
        # handshake listener binds it (base_scheduler.py: the variable + DP index 0).
        env = _env(templates[role])
        monkeypatch.setenv("VLLM_NIXL_SIDE_CHANNEL_PORT", env["VLLM_NIXL_SIDE_CHANNEL_PORT"])
        monkeypatch.setattr(backend, "_compute_port_offset", lambda: 8 * 3)
        backend._set_side_channel_port()
        assert _ports(templates[role])["nixl"] == vllm_envs.VLLM_NIXL_SIDE_CHANNEL_PORT
        assert env["UCX_TCP_PORT_RANGE"] == "{}-{}".format(*UCX_TCP_PORT_RANGE)
        # Ready when that listener is up: the engine registered its KV caches.
        assert _container(templates[role])["readinessProbe"]["tcpSocket"] == {"port": "nixl"}
    lo, hi = NIXL_PORT_BAND
    assert all(lo <= p <= hi for p in [*NIXL_SIDE_CHANNEL_PORTS.values(), *UCX_TCP_PORT_RANGE])


@pytest.mark.parametrize("values", [PD, {"serve": {"path": "ingress"}}], ids=["pd", "ingress"])
def test_the_ingress_layout_scrapes_the_gateway_on_the_head_alone(values, tmp_path: Path):
    objects = render(tmp_path, {**values, "monitoring": {"serviceMonitor": {"enabled": True}}})
    templates = pod_templates(objects)
    head = templates["head"]
    assert _ports(head)["gw-metrics"] == int(_env(head)["DSV4_GATEWAY_METRICS_PORT"])
    assert head["metadata"]["labels"]["dsv4-serve/gateway-metrics"] == "true"
    workers = [t for role, t in templates.items() if role in ("worker", "prefill", "decode")]
    for t in workers:
        assert "gw-metrics" not in _ports(t)
        assert t["metadata"]["labels"]["dsv4-serve/gateway-metrics"] == "false"
        # No worker holds the ingress: the API Service routes to the head.
        assert t["metadata"]["labels"]["dsv4-serve/api-endpoint"] == "false"
    (monitor,) = by_kind(objects, "PodMonitor")
    assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} == {"metrics", "gw-metrics"}
    (gateway,) = [
        s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-gateway-metrics")
    ]
    selects = [
        r
        for r, t in templates.items()
        if selector_matches({"matchLabels": gateway["spec"]["selector"]}, t["metadata"]["labels"])
    ]
    assert selects == ["head"]
    if "disaggregation" not in values:
        # Ingress layout without P/D: an engine pod has no port of its own to show its
        # engine serves; its raylet is the readiness.
        probe = _container(templates["worker"])["readinessProbe"]["httpGet"]
        assert (probe["path"], probe["port"]) == RAYLET_HEALTH
        deployments = _built(objects)
        assert deployments[INGRESS_NAME].ray_actor_options["resources"] == {INGRESS_RESOURCE: 1}


def test_each_role_has_its_own_disruption_budget(pd_release):
    groups = _groups(pd_release)
    budgets = {
        p["metadata"]["name"].rsplit("-", 1)[1]: p
        for p in by_kind(pd_release, "PodDisruptionBudget")
    }
    assert set(budgets) == {"prefill", "decode"}
    for role, group in groups.items():
        template = group["template"]
        pods = [
            Pod(f"{role}-{i}", dict(template["metadata"]["labels"]), {}, None, ready=True)
            for i in range(group["replicas"])
        ]
        others = [
            Pod("other", dict(g["template"]["metadata"]["labels"]), {}, None, ready=True)
            for r, g in groups.items()
            if r != role
        ]
        # podDisruptionBudget.maxUnavailable (1) below the role's minimum, counted on the
        # role's pods alone: the other role's Ready pods do not widen it.
        allowed = disruptions_allowed(budgets[role], pods + others, controller_has_scale=False)
        assert allowed == min(1, group["replicas"]), role


# --- NetworkPolicy: NIXL between prefill and decode only --------------------------------

PD_NEEDED = [
    Flow("decode-0", "prefill-1", NIXL_SIDE_CHANNEL_PORTS["prefill"], "NIXL handshake"),
    Flow("prefill-0", "decode-1", NIXL_SIDE_CHANNEL_PORTS["decode"], "NIXL notifications"),
    *[
        Flow(src, dst, port, "UCX TCP transfer")
        for src, dst in (("decode-0", "prefill-0"), ("prefill-1", "decode-0"))
        for port in UCX_TCP_PORT_RANGE
    ],
    Flow("head", "prefill-0", 10005, "Ray's worker ports"),
    Flow("decode-0", "head", 6379, "raylet -> GCS"),
    Flow("prefill-0", "decode-1", 29500, "NCCL / Ray's random ports stay open"),
    Flow("decode-1", "head", DIRECT_INGRESS.start, "HAProxy -> the ingress replica on the head"),
    Flow("prefill-0", "head", FALLBACK_PROXY, "HAProxy's backup server"),
    Flow("decode-0", "kube-dns", 53, "DNS", "UDP"),
    Flow("prometheus", "head", 9464, "the gateway metrics on the head"),
    Flow("tenant", "head", 8000, "the API"),
]
PD_DENIED = [
    Flow("head", "prefill-0", NIXL_SIDE_CHANNEL_PORTS["prefill"], "the head holds no engine"),
    Flow("prefill-0", "prefill-1", NIXL_SIDE_CHANNEL_PORTS["prefill"], "prefill to prefill"),
    Flow("decode-0", "decode-1", UCX_TCP_PORT_RANGE[0], "decode to decode"),
    Flow("tenant", "prefill-0", NIXL_SIDE_CHANNEL_PORTS["prefill"], "outside the release"),
    Flow("same-ns-app", "decode-0", UCX_TCP_PORT_RANGE[1], "another app in the namespace"),
    Flow("prometheus", "decode-0", NIXL_SIDE_CHANNEL_PORTS["decode"], "metrics ports only"),
]


def _ids(flows: list[Flow]) -> list[str]:
    return [f"{f.source}->{f.dest}:{f.port}" for f in flows]


@pytest.mark.parametrize("flow", PD_NEEDED, ids=_ids(PD_NEEDED))
def test_nixl_and_ray_flows_are_allowed(flow: Flow, pd_release):
    assert check(*cluster_endpoints(pd_release), flow), f"blocked: {flow.why}"


@pytest.mark.parametrize("flow", PD_DENIED, ids=_ids(PD_DENIED))
def test_nixl_ports_are_closed_to_everyone_else(flow: Flow, pd_release):
    assert not check(*cluster_endpoints(pd_release), flow), f"allowed: {flow.why}"


def test_mooncake_opens_no_nixl_ports(tmp_path: Path):
    objects = render(tmp_path, MOONCAKE)
    for role in ("prefill", "decode"):
        template = pod_templates(objects)[role]
        assert "nixl" not in _ports(template) and "UCX_TCP_PORT_RANGE" not in _env(template)
    assert not [p for p in by_kind(objects, "NetworkPolicy") if "-nixl-" in p["metadata"]["name"]]


# --- NOTES: what `helm install` prints --------------------------------------------------

WATCH = re.compile(r"kubectl -n \S+ get pods -l (\S+) -w")


@pytest.mark.parametrize("preset", ["h200-flash-mtp", "mi300x-pro-mtp"])
def test_notes_name_each_role_s_group_bounds_and_pods(preset: str, tmp_path: Path):
    values = {**PD, "preset": preset, "platform": PRESETS[preset]["platform"]}
    objects = render(tmp_path, values)
    text = notes(tmp_path, values)
    assert "Disaggregated (KV over nixl)" in text
    for role, group in _groups(objects).items():
        line = (
            f"  {role}: group {group['groupName']}, minReplicas {group['minReplicas']}, "
            f"maxReplicas {group['maxReplicas']}"
        )
        if group["numOfHosts"] > 1:
            line += f", {group['numOfHosts']} pods per replica"
        assert line + "\n" in text
    # Each watch command selects its role's pods and nothing else the release runs.
    templates = pod_templates(objects)
    selected = []
    for selector in WATCH.findall(text):
        wanted = dict(pair.split("=") for pair in selector.split(","))
        selected.append(
            [r for r, t in templates.items() if wanted.items() <= t["metadata"]["labels"].items()]
        )
    assert selected == [["prefill"], ["decode"]]


def test_notes_give_the_nixl_ports_and_the_policies_that_open_them(pd_release, tmp_path: Path):
    text = notes(tmp_path, PD)
    templates = pod_templates(pd_release)
    ports = {role: _ports(templates[role])["nixl"] for role in ("prefill", "decode")}
    assert ports == NIXL_SIDE_CHANNEL_PORTS
    ucx = _env(templates["prefill"])["UCX_TCP_PORT_RANGE"]
    assert (
        f"NIXL ports: prefill pods {ports['prefill']}, decode pods {ports['decode']} "
        f"(vLLM's side channel), UCX {ucx} on both." in text
    )
    # Each policy named admits the role the NOTES say, into the role they say.
    named = re.findall(r"NetworkPolicy (\S+) \((\w+) -> (\w+)\)", text)
    policies = {p["metadata"]["name"]: p["spec"] for p in by_kind(pd_release, "NetworkPolicy")}
    assert len(named) == 2
    for name, source, dest in named:
        spec = policies[name]
        assert spec["podSelector"]["matchLabels"]["dsv4-serve/role"] == dest
        (rule,) = spec["ingress"]
        (peer,) = rule["from"]
        assert peer["podSelector"]["matchLabels"]["dsv4-serve/role"] == source
        assert {p["port"] for p in rule["ports"]} == {ports[dest], UCX_TCP_PORT_RANGE[0]}
    assert {dest for *_, dest in named} == {"prefill", "decode"}


def test_notes_say_when_no_policy_guards_nixl_and_mooncake_has_no_ports(tmp_path: Path):
    text = notes(tmp_path, {**PD, "networkPolicy": {"enabled": False}})
    assert "NIXL ports: prefill pods 20000" in text
    assert "networkPolicy.enabled is false: nothing limits who reaches them." in text
    assert "-nixl-" not in text
    text = notes(tmp_path, MOONCAKE)
    assert "Disaggregated (KV over mooncake)" in text
    assert "NIXL" not in text and "UCX" not in text


@pytest.mark.parametrize(
    "values", [{}, {"serve": {"path": "ingress"}}], ids=["direct", "ingress-layout"]
)
def test_an_aggregated_release_s_notes_say_nothing_of_roles(values: dict, tmp_path: Path):
    text = notes(tmp_path, values)
    for word in ("Disaggregated", "dsv4-serve/role", "prefill", "NIXL"):
        assert word not in text


# --- bad values: refused, naming the problem --------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"disaggregation": {"enabled": True, "prefill": {"minReplicas": 3, "maxReplicas": 2}}},
            "disaggregation.prefill.minReplicas (3) must not exceed "
            "disaggregation.prefill.maxReplicas (2)",
        ),
        (
            {"disaggregation": {"enabled": True, "decode": {"minReplicas": 0}}},
            "at '/disaggregation/decode/minReplicas': minimum: got 0, want 1",
        ),
        (
            {"disaggregation": {"enabled": True, "decode": {"replicas": 2}}},
            "at '/disaggregation/decode': additional properties 'replicas' not allowed",
        ),
        (
            {"disaggregation": {"enabled": True, "connector": "rdma"}},
            "at '/disaggregation/connector': value must be one of 'nixl', 'mooncake'",
        ),
        (
            {**PD, "workers": {"maxReplicas": 3}},
            "workers.maxReplicas sizes the one engine group of an aggregated release; with "
            "disaggregation.enabled=true set disaggregation.prefill.maxReplicas",
        ),
        (
            {**PD, "serve": {"path": "direct"}},
            "disaggregation.enabled=true needs serve.path ingress",
        ),
        (
            {**PD, "serve": {"port": 20000}},
            "serve.port=20000 is inside NIXL's port band 20000-24999",
        ),
        (
            {**PD, "monitoring": {"gatewayMetricsPort": 24500}},
            "monitoring.gatewayMetricsPort=24500 is inside NIXL's port band",
        ),
        ({"serve": {"path": "sideways"}}, "at '/serve/path': value must be one of"),
    ],
)
def test_bad_values_are_refused_naming_the_problem(values: dict, message: str, tmp_path: Path):
    assert message in render(tmp_path, values, expect_ok=False)
