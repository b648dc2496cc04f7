"""The Helm chart with the real helm binary: lint, render every preset x platform and
edge values, validate every object (built-in kinds with kubernetes-validate, custom
resources against the CRDs in tests/support/reference), and compare serveConfigV2 with
`dsv4-serve render-serve-config`."""

import json
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from serving.chart import derived_files
from serving.chart.presets_table import presets_table
from serving.config.build_args import resolve
from tests.support.chart_render import CHART, OPERATOR_NAMESPACE, ROOT, by_kind, helm, render
from tests.support.crd_schema import CrdValidator
from tests.support.server_process import PYTHON

KUBE_VERSIONS = ["1.30", kubernetes_validate.utils.latest_version()]
CUSTOM_KINDS = {
    "RayService": "ray.io_rayservices.yaml",
    "PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
    "ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
    "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
}
# Gateway API is not among the vendored CRDs nor in kubernetes-validate: rendered, not
# validated.
UNVALIDATED_KINDS = {"HTTPRoute"}
PRESETS = presets_table()


@pytest.fixture(scope="module")
def crds(shared_dir: Path) -> dict[str, CrdValidator]:
    return {kind: CrdValidator(shared_dir / "crds" / f) for kind, f in CUSTOM_KINDS.items()}


def validate_all(objects: list[dict], crds: dict[str, CrdValidator]) -> None:
    for obj in objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in CUSTOM_KINDS:
            assert crds[obj["kind"]].errors(obj) == [], name
        elif obj["kind"] not in UNVALIDATED_KINDS:
            for version in KUBE_VERSIONS:
                try:
                    kubernetes_validate.validate(obj, version, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    pytest.fail(f"{name} invalid for Kubernetes {version}: {exc.message}")


def test_helm_lint_strict():
    operator = f"networkPolicy.kuberayOperator.namespace={OPERATOR_NAMESPACE}"
    for platform_values in ({}, {"preset": "mi355x-pro-mtp", "platform": "rocm"}):
        args = ["lint", "--strict", str(CHART), "--set", operator]
        for key, value in platform_values.items():
            args += ["--set", f"{key}={value}"]
        out = helm(*args)
        assert out.returncode == 0, out.stdout + out.stderr
    # The chart's bare defaults: the operator's namespace is the one value a user must give
    # (helm lint logs a template's `fail` and passes; template and install stop on it).
    bare = helm("template", "rel", str(CHART))
    assert bare.returncode != 0
    assert "networkPolicy.kuberayOperator.namespace is required" in bare.stderr


def test_generated_chart_files_are_current():
    from serving.cli import build_parser

    assert derived_files.stale(build_parser()) == [], (
        "run `dsv4-serve generate` and commit the result"
    )


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_renders_valid_objects(preset: str, tmp_path: Path, crds):
    row = PRESETS[preset]
    objects = render(tmp_path, {"preset": preset, "platform": row["platform"]})
    validate_all(objects, crds)
    kinds = {o["kind"] for o in objects}
    assert {
        "RayService",
        "Service",
        "Secret",
        "PersistentVolumeClaim",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "ServiceAccount",
        "PodMonitor",
        "PrometheusRule",
        "ConfigMap",
        "Pod",
    } <= kinds
    (service,) = by_kind(objects, "RayService")
    (group,) = service["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    gpu = "amd.com/gpu" if row["platform"] == "rocm" else "nvidia.com/gpu"
    (container,) = group["template"]["spec"]["containers"]
    assert container["resources"]["limits"][gpu] == row["gpusPerPod"]
    assert group["numOfHosts"] == row["nodesPerReplica"]
    assert row["gpusPerPod"] * row["nodesPerReplica"] == row["gpusPerReplica"]
    assert f"dsv4-serve-{row['platform']}:" in container["image"]
    assert group["rayStartParams"]["num-gpus"] == str(row["gpusPerPod"])


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_serve_config_is_what_render_serve_config_prints(preset: str, tmp_path: Path):
    row = PRESETS[preset]
    user_sets = ["deployment.max_ongoing_requests=64", "speculation.num_speculative_tokens=2"]
    if row["platform"] == "rocm" or preset.endswith("dspark"):
        user_sets = user_sets[:1]
    objects = render(
        tmp_path,
        {"preset": preset, "platform": row["platform"], "serve": {"set": user_sets, "port": 8100}},
    )
    in_chart = yaml.safe_load(by_kind(objects, "RayService")[0]["spec"]["serveConfigV2"])
    sets = in_chart["applications"][0]["args"]["set"]
    # The chart's own overrides first (weights path, routing, layout, replica counts), then
    # the user's.
    assert sets[0] == f"model.source=/models/{row['modelSource']}"
    assert sets[1] == f"serving.routing={row['routing']}"
    assert sets[2] == f"serving.path={row['servingPath']}"
    assert sets[-len(user_sets) :] == user_sets
    assert all(item.startswith("deployment.") for item in sets[3 : -len(user_sets)])
    cmd = [PYTHON, "-m", "serving.cli", "render-serve-config", preset, "--port", "8100"]
    cmd += ["--host", "0.0.0.0"]
    for item in sets:
        cmd += ["--set", item]
    cli = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert in_chart == yaml.safe_load(cli.stdout)
    # The chart's replica counts are what the worker group runs.
    resolved = resolve(in_chart["applications"][0]["args"])[1]
    (group,) = by_kind(objects, "RayService")[0]["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    scaling = resolved.deployment.autoscaling
    if scaling:
        assert (scaling.min_replicas, scaling.max_replicas) == (
            group["minReplicas"],
            group["maxReplicas"],
        )
    else:
        assert resolved.deployment.replicas == group["minReplicas"] == group["maxReplicas"]


def test_monitoring_objects_carry_the_one_copy_of_rules_and_dashboard(tmp_path: Path):
    objects = render(tmp_path, {})
    (rule,) = by_kind(objects, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(derived_files.RULES_FILE.read_text())
    (board,) = [o for o in by_kind(objects, "ConfigMap") if "dashboard" in o["metadata"]["name"]]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["dsv4-dashboard.json"]) == json.loads(
        derived_files.DASHBOARD_FILE.read_text()
    )


def test_monitoring_renders_only_where_its_api_exists_unless_forced(tmp_path: Path, crds):
    without = render(tmp_path, {}, apis=[])
    assert not {"PodMonitor", "PrometheusRule", "ServiceMonitor"} & {o["kind"] for o in without}
    forced = render(
        tmp_path,
        {
            "monitoring": {
                "podMonitor": {"force": True},
                "prometheusRule": {"force": True},
                "serviceMonitor": {"enabled": True, "force": True},
            }
        },
        apis=[],
    )
    validate_all(forced, crds)
    assert {"PodMonitor", "PrometheusRule", "ServiceMonitor"} <= {o["kind"] for o in forced}
    metrics = [o for o in by_kind(forced, "Service") if o["metadata"]["name"].endswith("metrics")]
    assert metrics and metrics[0]["spec"]["clusterIP"] == "None"
    off = render(
        tmp_path,
        {
            "monitoring": {
                "podMonitor": {"enabled": False},
                "prometheusRule": {"enabled": False},
                "dashboard": {"enabled": False},
            }
        },
    )
    assert not {"PodMonitor", "PrometheusRule", "ConfigMap"} & {o["kind"] for o in off}


EDGE_VALUES = {
    "existing-secrets": {
        "apiKey": {"existingSecret": "my-keys", "generate": False},
        "model": {"pvc": {"existingClaim": "dsv4-weights", "create": False}},
        "jitCache": {"pvc": {"existingClaim": "dsv4-kernels"}},
    },
    "multi-host-rocm": {"preset": "mi300x-pro-mtp", "platform": "rocm"},
    "rdma-h200-pro": {
        "preset": "h200-pro-mtp",
        "rdma": {"enabled": True},
        "hostIPC": True,
        "scheduling": {
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
    },
    "download-hf-cache": {
        "model": {
            "download": {"enabled": True, "tokenSecret": {"name": "hf-token"}},
            "localCache": {"enabled": True},
        }
    },
    "download-s3": {
        "model": {
            "download": {
                "enabled": True,
                "source": "s3",
                "s3Uri": "s3://bucket/dsv4",
                "tokenSecret": {"name": "s3-creds"},
            }
        }
    },
    "ingress-and-route": {
        "ingress": {"enabled": True, "host": "dsv4.example.com", "tlsSecret": "dsv4-tls"},
        "gatewayRoute": {"enabled": True, "parentRefs": [{"name": "public-gw"}]},
        "networkPolicy": {"apiFrom": [{"namespaceSelector": {"matchLabels": {"team": "ml"}}}]},
        "service": {"type": "LoadBalancer", "port": 80},
    },
    "no-optional-objects": {
        "networkPolicy": {"enabled": False},
        "podDisruptionBudget": {"enabled": False},
        "serviceAccount": {"create": False},
        "monitoring": {"dashboard": {"enabled": False}},
    },
    "fixed-replicas": {"workers": {"minReplicas": 2, "maxReplicas": 2}},
    "bench-job": {"bench": {"enabled": True, "concurrency": [1, 4], "requests": 8}},
}


def jobs(objects: list[dict], component: str) -> list[dict]:
    """The Jobs of one component (the JIT warm Job renders beside the others by default)."""
    return [
        j
        for j in by_kind(objects, "Job")
        if j["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]


@pytest.mark.parametrize("case", sorted(EDGE_VALUES))
def test_edge_values_render_valid_objects(case: str, tmp_path: Path, crds):
    objects = render(tmp_path, EDGE_VALUES[case])
    validate_all(objects, crds)
    kinds = [o["kind"] for o in objects]
    spec = by_kind(objects, "RayService")[0]["spec"]["rayClusterConfig"]
    worker = spec["workerGroupSpecs"][0]["template"]["spec"]
    if case == "existing-secrets":
        assert "Secret" not in kinds and "PersistentVolumeClaim" not in kinds
        volumes = {v["name"]: v for v in worker["volumes"]}
        assert volumes["api-keys"]["secret"]["secretName"] == "my-keys"
        assert volumes["model"]["persistentVolumeClaim"]["claimName"] == "dsv4-weights"
        assert volumes["jit-cache"]["persistentVolumeClaim"]["claimName"] == "dsv4-kernels"
    if case.startswith("multi-host"):
        assert spec["workerGroupSpecs"][0]["numOfHosts"] == 2
    if case == "rdma-h200-pro":
        limits = worker["containers"][0]["resources"]["limits"]
        assert limits["rdma/hca"] == 1 and worker["hostIPC"] is True
        assert "IPC_LOCK" in worker["containers"][0]["securityContext"]["capabilities"]["add"]
    if case.startswith("download"):
        (job,) = jobs(objects, "model-download")
        env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert ("HF_TOKEN" in env) == (case == "download-hf-cache")
        assert ("AWS_ACCESS_KEY_ID" in env) == (case == "download-s3")
        assert [c["name"] for c in worker["initContainers"]][0] == "wait-for-weights"
    if case == "download-hf-cache":
        serve = yaml.safe_load(by_kind(objects, "RayService")[0]["spec"]["serveConfigV2"])
        source = serve["applications"][0]["args"]["set"][0]
        assert source == "model.source=/model-cache/deepseek-ai/DeepSeek-V4-Flash"
    if case == "ingress-and-route":
        assert {"Ingress", "HTTPRoute"} <= set(kinds)
    if case == "no-optional-objects":
        assert not {"NetworkPolicy", "PodDisruptionBudget", "ServiceAccount"} & set(kinds)
        assert worker["serviceAccountName"] == "default"
    if case == "bench-job":
        (job,) = jobs(objects, "bench")
        container = job["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == ["dsv4-serve", "bench"]
        args = container["args"]
        assert (
            args[1] == "dsv4=http://rel-dsv4-serve-api:8000/v1,model=deepseek-ai/DeepSeek-V4-Flash"
        )
        assert args[args.index("--concurrency") + 1 : args.index("--requests")] == ["1", "4"]
        # The same arguments parse with the real bench CLI.
        from serving.cli import build_parser

        parsed = build_parser().parse_args(container["command"][1:] + args)
        assert parsed.concurrency == [1, 4] and parsed.requests == 8
    if case == "fixed-replicas":
        assert spec["enableInTreeAutoscaling"] is False
        assert spec["workerGroupSpecs"][0]["replicas"] == 2


def test_network_policy_keeps_metrics_to_the_monitoring_namespace(tmp_path: Path):
    (policy,) = by_kind(render(tmp_path, {}), "NetworkPolicy")
    api, operator, metrics, ray = policy["spec"]["ingress"]
    assert api["ports"] == [{"port": 8000, "protocol": "TCP"}] and "from" not in api
    assert {p["port"] for p in operator["ports"]} == {8265, 8000}
    assert {p["port"] for p in metrics["ports"]} == {8080, 9464}
    (peer,) = metrics["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}
    assert "ports" not in ray and ray["from"][0]["podSelector"]


def test_helm_test_pod_sends_an_openai_request(tmp_path: Path):
    (pod,) = by_kind(render(tmp_path, {}), "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = pod["spec"]["containers"][0]["args"][0]
    assert "openai.OpenAI" in script and "completions.create" in script
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["MODEL"] == PRESETS["h200-flash-mtp"]["modelId"]


BAD_VALUES = [
    ({"platform": "tpu"}, "/platform"),
    ({"platform": "rocm"}, 'platform "rocm" does not match preset "h200-flash-mtp"'),
    ({"preset": "h100-turbo"}, "/preset"),
    ({"workers": {"minReplicas": -1}}, "/workers/minReplicas"),
    ({"workers": {"gpusPerPod": 4}}, "workers.gpusPerPod=4 does not match preset"),
    ({"workers": {"minReplicas": 3, "maxReplicas": 2}}, "must not exceed workers.maxReplicas"),
    ({"monitoring": {"podMonitr": {}}}, "podMonitr"),
    ({"model": {"download": {"enabled": True, "source": "s3"}}}, "s3Uri is required"),
    ({"apiKey": {"generate": False}}, "apiKey.existingSecret"),
    ({"ingress": {"enabled": True}}, "ingress.host is required"),
]


@pytest.mark.parametrize(("values", "message"), BAD_VALUES, ids=[m for _, m in BAD_VALUES])
def test_bad_values_fail_with_a_message_naming_the_problem(values, message, tmp_path: Path):
    stderr = render(tmp_path, values, expect_ok=False)
    assert message in stderr


def test_validators_reject_unknown_fields(tmp_path: Path, crds):
    objects = render(tmp_path, {})
    (service,) = by_kind(objects, "RayService")
    service["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParam"] = {}
    assert any("rayStartParam" in e for e in crds["RayService"].errors(service))
    (monitor,) = by_kind(objects, "PodMonitor")
    monitor["spec"]["podMetricsEndpoints"][0]["intervall"] = "5s"
    assert crds["PodMonitor"].errors(monitor)
    (pdb,) = by_kind(objects, "PodDisruptionBudget")
    pdb["spec"]["maxUnavailabel"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pdb, KUBE_VERSIONS[0], strict=True)
