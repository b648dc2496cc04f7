"""Finding 8 (values the API server or KubeRay would reject fail at `helm template`, naming
the value; NOTES mention only what is rendered; every environment variable the pods get is
one its consumer reads) and the chart half of finding 7 (architectures, GB300 memory)."""

import re
import sysconfig
from pathlib import Path

import pytest
from kubernetes.utils import parse_quantity

from serving.chart.presets_table import presets_table
from serving.chart.values_model import QUANTITY_PATTERN
from serving.config.jit_cache import READERS
from tests.support.chart_render import MONITORING_APIS, ROOT, by_kind, notes, pod_templates, render

PRESETS = presets_table()
SITE = Path(sysconfig.get_paths()["purelib"])
# kuberay ray-operator/controllers/ray/utils: validation.go ValidateRayServiceMetadata,
# constant.go MaxRayServiceNameLength = MaxRayClusterNameLength (53) - 6.
MAX_RAYSERVICE_NAME = 47
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def kuberay_accepts(name: str) -> bool:
    return len(name) <= MAX_RAYSERVICE_NAME and bool(DNS_1035.match(name))


@pytest.mark.parametrize(
    ("release", "values"),
    [
        ("1dsv4", {}),
        ("dsv4.prod", {}),
        ("rel", {"fullnameOverride": "DSV4_Prod"}),
        ("rel", {"fullnameOverride": "9-lives"}),
    ],
)
def test_names_kuberay_rejects_fail_naming_the_release(release, values, tmp_path: Path):
    stderr = render(tmp_path, values, release=release, expect_ok=False)
    assert f'release name "{release}"' in stderr and "DNS-1035" in stderr


@pytest.mark.parametrize("release", ["rel", "dsv4", "a" * 53, "prod-dsv4-serve-eu-west-1"])
def test_names_kuberay_accepts_render(release: str, tmp_path: Path):
    (service,) = by_kind(render(tmp_path, {}, release=release), "RayService")
    assert kuberay_accepts(service["metadata"]["name"])


QUANTITIES = [
    "16Gi",
    "500m",
    "1.5",
    "2e3",
    "1500Gi",
    ".5",
    "5.",
    "1E",
    "96",
    "lots",
    "1.5.5",
    "Gi",
    "1ki",
    "1e",
    "--1",
    "1Gi ",
    "0x10",
]


def test_quantity_pattern_agrees_with_the_kubernetes_parser():
    for text in QUANTITIES:
        try:
            parse_quantity(text)
            valid = True
        except ValueError:
            valid = False
        assert bool(re.match(QUANTITY_PATTERN, text)) == valid, text


@pytest.mark.parametrize(
    ("values", "path"),
    [
        ({"workers": {"resources": {"memory": "lots"}}}, "/workers/resources/memory"),
        ({"workers": {"resources": {"cpu": "96 cores"}}}, "/workers/resources/cpu"),
        ({"head": {"resources": {"memory": "32GB"}}}, "/head/resources/memory"),
        ({"workers": {"shmSize": "big"}}, "/workers/shmSize"),
        ({"model": {"pvc": {"size": "2TB"}}}, "/model/pvc/size"),
    ],
)
def test_bad_quantities_fail_naming_the_value(values, path, tmp_path: Path):
    stderr = render(tmp_path, values, expect_ok=False)
    assert path in stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"monitoring": {"rayMetricsPort": 8000}},
            "monitoring.rayMetricsPort=8000 collides with serve.port=8000",
        ),
        (
            {"monitoring": {"gatewayMetricsPort": 8080}},
            "monitoring.gatewayMetricsPort=8080 collides with monitoring.rayMetricsPort",
        ),
        ({"serve": {"port": 8265}}, "serve.port=8265 collides with Ray's dashboard port"),
        ({"monitoring": {"rayMetricsPort": 6379}}, "collides with Ray's GCS port"),
        ({"monitoring": {"gatewayMetricsPort": 52365}}, "collides with Ray's dashboard agent port"),
        ({"monitoring": {"gatewayMetricsPort": 12000}}, "inside Ray's worker port range"),
    ],
)
def test_port_collisions_fail_naming_both(values, message, tmp_path: Path):
    assert message in render(tmp_path, values, expect_ok=False)


# --- NOTES -----------------------------------------------------------------------------

NOTES_CASES = {
    "defaults": ({}, MONITORING_APIS),
    "no monitoring API": ({}, []),
    "forced, no rule": (
        {
            "monitoring": {
                "podMonitor": {"force": True},
                "prometheusRule": {"enabled": False},
                "serviceMonitor": {"enabled": True, "force": True},
            }
        },
        [],
    ),
    "ingress, download, no dashboard": (
        {
            "ingress": {"enabled": True, "host": "dsv4.example.com"},
            "model": {"download": {"enabled": True}},
            "monitoring": {"dashboard": {"enabled": False}},
        },
        MONITORING_APIS,
    ),
    "existing secret, no netpol": (
        {
            "apiKey": {"existingSecret": "keys", "generate": False},
            "networkPolicy": {"enabled": False},
        },
        MONITORING_APIS,
    ),
    "disaggregated": ({"disaggregation": {"enabled": True}}, MONITORING_APIS),
}
KIND_WORDS = {
    "rayservice": "RayService",
    "secret": "Secret",
    "svc": "Service",
    "job": "Job",
    "PodMonitor": "PodMonitor",
    "ServiceMonitor": "ServiceMonitor",
    "PrometheusRule": "PrometheusRule",
    "ConfigMap": "ConfigMap",
    "Ingress": "Ingress",
    "NetworkPolicy": "NetworkPolicy",
}
_REF = re.compile(
    r"\b(rayservice|secret|PodMonitor|ServiceMonitor|PrometheusRule|ConfigMap|Ingress"
    r"|NetworkPolicy) ([a-z0-9][-a-z0-9.]*[a-z0-9])|\b(svc|job)/([a-z0-9][-a-z0-9]*)"
)


def referenced_objects(text: str) -> set[tuple[str, str]]:
    refs = set()
    for m in _REF.finditer(text):
        word, name = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        refs.add((KIND_WORDS[word], name))
    return refs


@pytest.mark.parametrize("case", sorted(NOTES_CASES))
def test_notes_name_only_rendered_objects(case: str, tmp_path: Path):
    values, apis = NOTES_CASES[case]
    rendered = {(o["kind"], o["metadata"]["name"]) for o in render(tmp_path, values, apis)}
    if values.get("apiKey", {}).get("existingSecret"):
        rendered.add(("Secret", "keys"))  # the user's own
    text = notes(tmp_path, values, apis)
    refs = referenced_objects(text)
    assert ("RayService", "rel-dsv4-serve") in refs
    assert refs <= rendered, f"NOTES mention what is not installed: {refs - rendered}"


# --- environment variables -------------------------------------------------------------

# Who reads an environment variable, by prefix: the installed sources that must name it.
CONSUMERS = {
    "RAY_": [SITE / "ray"],
    "HF_": [SITE / "huggingface_hub"],
    "DSV4_": [ROOT / "serving", ROOT / "model_overrides"],
    "AWS_": [SITE / "pyarrow"],
    "MPLCONFIGDIR": [SITE / "matplotlib"],
}
POSIX = {"HOME", "PATH"}
# The JIT cache variables (serving/config/jit_cache.py): read by the package it names where that
# package is installed here; the GPU-only ones (TileLang, CuTe DSL, FlashInfer, the CUDA
# driver) are not on this machine and are cited there instead.
JIT_READERS = {name: [SITE / pkg] if pkg else [] for name, pkg in READERS.items()}


def _read_by(name: str, dirs: list[Path]) -> bool:
    needle = name.encode()
    for base in dirs:
        for path in base.rglob("*"):
            library = path.suffix in {".py", ".so"} or ".so." in path.name
            if library and needle in path.read_bytes():
                return True
    return False


@pytest.fixture(scope="module")
def everything_rendered(tmp_path_factory) -> list[list[dict]]:
    values = {
        "model": {
            "download": {"enabled": True, "tokenSecret": {"name": "t"}},
            "localCache": {"enabled": True},
        },
        "bench": {"enabled": True},
    }
    s3 = {
        "model": {
            "download": {
                "enabled": True,
                "source": "s3",
                "s3Uri": "s3://b/m",
                "tokenSecret": {"name": "t"},
            }
        }
    }
    return [render(tmp_path_factory.mktemp("a"), values), render(tmp_path_factory.mktemp("b"), s3)]


def test_every_env_var_is_read_by_its_consumer(everything_rendered):
    unread = []
    templates = [t for objects in everything_rendered for t in pod_templates(objects).items()]
    for role, template in templates:
        spec = template["spec"]
        for container in spec.get("initContainers", []) + spec["containers"]:
            own = " ".join(container.get("command", []) + container.get("args", []))
            for env in container.get("env") or []:
                name = env["name"]
                if name in POSIX or f"${name}" in own or f'"{name}"' in own:
                    continue  # the container's own script reads it
                if name in JIT_READERS:
                    readers = [d for d in JIT_READERS[name] if d.exists()]
                    if readers and not _read_by(name, readers):
                        unread.append(f"{role}/{container['name']}: {name}")
                    continue
                prefix = next((p for p in CONSUMERS if name.startswith(p)), None)
                if prefix is None or not _read_by(name, CONSUMERS[prefix]):
                    unread.append(f"{role}/{container['name']}: {name}")
    assert not unread, f"set but never read: {unread}"


def test_serve_http_host_is_the_variable_ray_reads():
    constants = (SITE / "ray/serve/_private/constants.py").read_text()
    assert 'os.environ.get("RAY_SERVE_DEFAULT_HTTP_HOST")' in constants
    assert "RAY_SERVE_HTTP_HOST" not in constants.replace("RAY_SERVE_DEFAULT_HTTP_HOST", "")


# --- architectures and GB300 nodes (finding 7, chart side) --------------------------------


def test_gb300_workers_pin_arm64_and_fit_a_tray(tmp_path: Path):
    objects = render(tmp_path, {"preset": "gb300-pro-mtp"})
    pods = pod_templates(objects)
    worker = pods["worker"]["spec"]
    assert worker["nodeSelector"]["kubernetes.io/arch"] == "arm64"
    assert {
        "key": "kubernetes.io/arch",
        "operator": "Equal",
        "value": "arm64",
        "effect": "NoSchedule",
    } in worker["tolerations"]
    # The CUDA image is a manifest list of amd64 and arm64: the head may run on either.
    assert "kubernetes.io/arch" not in (pods["head"]["spec"].get("nodeSelector") or {})
    memory = worker["containers"][0]["resources"]["requests"]["memory"]
    # A GB300 NVL tray has about 960 GB of LPDDR5X; leave the system a tenth of it.
    assert parse_quantity(memory) <= 0.9 * 960e9
    limits = worker["containers"][0]["resources"]["limits"]
    assert limits["memory"] == memory


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_workers_are_pinned_to_their_preset_architecture(preset: str, tmp_path: Path):
    row = PRESETS[preset]
    objects = render(tmp_path, {"preset": preset, "platform": row["platform"]})
    worker = pod_templates(objects)["worker"]["spec"]
    assert worker["nodeSelector"]["kubernetes.io/arch"] == row["arch"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {
                "preset": "gb300-pro-mtp",
                "image": {"cuda": {"repository": "r/x", "tag": "1", "arches": ["amd64"]}},
            },
            "the workers run on arm64 nodes (preset gb300-pro-mtp on GB300) but image.cuda.arches",
        ),
        (
            {"preset": "mi355x-pro-mtp", "platform": "rocm", "workers": {"arch": "arm64"}},
            "workers.arch=arm64",
        ),
        (
            {"scheduling": {"nodeSelector": {"kubernetes.io/arch": "arm64"}}},
            "contradicts the workers' architecture amd64",
        ),
        ({"head": {"arch": "s390x"}}, "/head/arch"),
    ],
)
def test_architecture_mismatches_fail(values, message, tmp_path: Path):
    assert message in render(tmp_path, values, expect_ok=False)


def test_amd64_only_image_pins_the_head_too(tmp_path: Path):
    objects = render(tmp_path, {"preset": "mi355x-pro-mtp", "platform": "rocm"})
    assert pod_templates(objects)["head"]["spec"]["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
