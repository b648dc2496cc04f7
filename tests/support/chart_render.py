"""Render the chart with the real helm (test helper shared by the chart tests)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from serving.chart import derived_files
from tests.support.paths import ROOT

# DSV4_CHART_DIR renders another copy of the chart (e.g. a previous release's, to show a
# test fails there).
CHART = Path(os.environ.get("DSV4_CHART_DIR") or derived_files.CHART_DIR)
_REPO_HELM = ROOT / ".cache/tools/helm"
HELM = os.environ.get("HELM") or (str(_REPO_HELM) if _REPO_HELM.exists() else None)
HELM = HELM or shutil.which("helm")
MONITORING_APIS = [
    "monitoring.coreos.com/v1/PodMonitor",
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
]
NAMESPACE = "dsv4"
# The namespace the install command names for the KubeRay operator (the chart requires one);
# a test's own values override it.
OPERATOR_NAMESPACE = "kuberay-operator"
INSTALL_VALUES = {"networkPolicy": {"kuberayOperator": {"namespace": OPERATOR_NAMESPACE}}}


def helm(*args: str) -> subprocess.CompletedProcess:
    assert HELM, "helm missing: `make deps` installs it into .cache/tools"
    return subprocess.run([HELM, *args], capture_output=True, text=True, timeout=120)


def _values_files(values_file: Path, values: dict) -> list[str]:
    """`-f` arguments: the install command's values, then the test's (the later file wins)."""
    install = values_file.with_name("install-values.yaml")
    install.write_text(yaml.safe_dump(INSTALL_VALUES))
    values_file.write_text(yaml.safe_dump(values))
    return ["-f", str(install), "-f", str(values_file)]


def _args(values_file: Path, values: dict, release: str, apis: list[str]) -> list[str]:
    args = [release, str(CHART), "-n", NAMESPACE, *_values_files(values_file, values)]
    for api in apis:
        args += ["--api-versions", api]
    return args


def render(
    tmp_path: Path,
    values: dict,
    apis: list[str] = MONITORING_APIS,
    expect_ok: bool = True,
    release: str = "rel",
) -> list[dict] | str:
    """The objects `helm template` renders, or its stderr when expect_ok is False."""
    out = helm("template", *_args(tmp_path / "values.yaml", values, release, apis))
    if not expect_ok:
        assert out.returncode != 0, "helm template accepted bad values"
        return out.stderr
    assert out.returncode == 0, out.stderr
    objects = [d for d in yaml.safe_load_all(out.stdout) if d]
    for obj in objects:
        obj["metadata"].setdefault("namespace", NAMESPACE)
    return objects


def notes(tmp_path: Path, values: dict, apis: list[str] = MONITORING_APIS) -> str:
    """NOTES.txt as `helm install` would print it for these values and cluster APIs.

    `helm install --dry-run` takes no --api-versions, so a copy of the chart renders the
    same NOTES.txt text as a ConfigMap through `helm template`.
    """
    chart = tmp_path / "chart-with-notes"
    shutil.rmtree(chart, ignore_errors=True)
    shutil.copytree(CHART, chart)
    text = (chart / "templates/NOTES.txt").read_text()
    (chart / "templates/NOTES.txt").unlink()
    (chart / "templates/_notes_under_test.tpl").write_text(
        '{{- define "notes-under-test" -}}\n' + text + "\n{{- end }}\n"
    )
    (chart / "templates/notes-under-test.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes-under-test}\n"
        'data:\n  notes: {{ include "notes-under-test" . | toJson }}\n'
    )
    files = _values_files(tmp_path / "values.yaml", values)
    args = ["template", "rel", str(chart), "-n", NAMESPACE, *files]
    for api in apis:
        args += ["--api-versions", api]
    args += ["--show-only", "templates/notes-under-test.yaml"]
    out = helm(*args)
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)["data"]["notes"]


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def ray_cluster(objects: list[dict]) -> dict[str, Any]:
    (service,) = by_kind(objects, "RayService")
    return service["spec"]["rayClusterConfig"]


def worker_group(objects: list[dict]) -> dict[str, Any]:
    (group,) = ray_cluster(objects)["workerGroupSpecs"]
    return group


def serve_config(objects: list[dict]) -> dict[str, Any]:
    (service,) = by_kind(objects, "RayService")
    return yaml.safe_load(service["spec"]["serveConfigV2"])


def pod_templates(objects: list[dict]) -> dict[str, dict[str, Any]]:
    """Every pod the release creates, by role: {role: {"metadata": ..., "spec": ...}}; the
    worker group is "worker", or a disaggregated release's groups "prefill" and "decode"."""
    cluster = ray_cluster(objects)
    out = {"head": cluster["headGroupSpec"]["template"]}
    groups = cluster["workerGroupSpecs"]
    for group in groups:
        labels = group["template"]["metadata"]["labels"]
        role = labels.get("dsv4-serve/role", "worker") if len(groups) > 1 else "worker"
        out[role] = group["template"]
    for job in by_kind(objects, "Job"):
        out[job["metadata"]["labels"]["app.kubernetes.io/component"]] = job["spec"]["template"]
    for pod in by_kind(objects, "Pod"):
        out[pod["metadata"]["labels"]["app.kubernetes.io/component"]] = pod
    return out
