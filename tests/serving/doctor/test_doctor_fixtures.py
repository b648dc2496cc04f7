"""The doctor's fixtures are API objects, its committed example is current, and the
Kubernetes page (docs/kubernetes.md) shows what the doctor really prints for it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import kubernetes_validate
import pytest

from serving.cli import main
from tests.support import doctor_cluster as dc
from tests.support import doctor_scenarios as sc
from tests.support.crd_schema import CrdValidator
from tests.support.paths import ROOT

PAGE = ROOT / "docs" / "kubernetes.md"  # where the doctor's examples are shown
EXAMPLE = re.compile(r"<!-- doctor-example: (.+?) -->\n```text\n(.*?)```", re.S)
VERSIONS = ["1.30", kubernetes_validate.utils.latest_version()]
# The kinds the doctor reads and the fixtures build (or give a status).
READ = {
    "Node",
    "Pod",
    "Event",
    "Job",
    "Deployment",
    "StorageClass",
    "Namespace",
    "PersistentVolumeClaim",
    "ResourceQuota",
    "SelfSubjectAccessReview",
}


def everything(shared: Path) -> list[dict]:
    """One of every object the scenarios build."""
    crashing = {"state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}}
    return [
        *sc.stuck_cluster(shared),
        *sc.release(ready=True, app_status="RUNNING"),
        *sc.release(download="failed", worker_node="gpu-h200-a", worker_status=crashing),
        *sc.release(download="running", app_status="DEPLOY_FAILED", app_message="boom"),
        *sc.release(ready=True, warm="failed"),
        *sc.release(worker_node="gpu-h200-a", warm="running"),
        *sc.release(preset="h200-pro-mtp", values={"rdma": {"enabled": True}}),
        dc.node("mi300x-a", "MI300X"),
        dc.node("gb300-a", "GB300", gpus=4, arch="arm64"),
        dc.node("gpu-h100-a", "H100", unschedulable=True, ready=False),
        dc.busy_pod("gpu-h200-a", 4),
        dc.kuberay_operator("v1.2.2", ready=0, watch="a,b"),
        dc.bound(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": dc.meta("PersistentVolumeClaim", "w", "dsv4"),
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "resources": {"requests": {"storage": "1Ti"}},
                },
            }
        ),
    ]


def test_fixture_objects_are_valid_api_objects(shared_dir):
    crds = {
        "RayService": CrdValidator(shared_dir / "crds" / "ray.io_rayservices.yaml"),
        "RayCluster": CrdValidator(shared_dir / "crds" / "ray.io_rayclusters.yaml"),
    }
    seen = set()
    for obj in everything(shared_dir):
        kind = obj["kind"]
        where = f"{kind}/{obj['metadata'].get('name')}"
        if kind in crds:
            assert crds[kind].errors(obj) == [], where
        elif kind not in READ:
            # the chart's rendered objects: tests/serving/chart/test_helm_chart.py validates them
            continue
        else:
            for version in VERSIONS:
                try:
                    kubernetes_validate.validate(obj, version, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    pytest.fail(f"{where} is not a valid {version} object: {exc.message}")
        seen.add(kind)
    assert {
        "Node",
        "Pod",
        "Event",
        "Job",
        "Deployment",
        "StorageClass",
        "Namespace",
        "PersistentVolumeClaim",
        "RayService",
        "RayCluster",
        "SelfSubjectAccessReview",
    } <= seen


def test_a_crd_fixture_is_a_valid_crd(shared_dir):
    kubernetes_validate.validate(
        dc.crd(shared_dir, "ray.io_rayclusters.yaml"), VERSIONS[0], strict=True
    )


def test_example_dump_is_current(shared_dir, tmp_path):
    if os.environ.get("DSV4_WRITE_DOCTOR_EXAMPLE"):
        sc.write_example(sc.EXAMPLE_DIR, shared_dir)
    fresh = sc.write_example(tmp_path / "example", shared_dir)
    files = sorted(p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file())
    committed = sorted(
        p.relative_to(sc.EXAMPLE_DIR) for p in sc.EXAMPLE_DIR.rglob("*") if p.is_file()
    )
    assert files == committed, (
        "DSV4_WRITE_DOCTOR_EXAMPLE=1 pytest tests/serving/doctor/test_doctor_fixtures.py"
    )
    for rel in files:
        assert (fresh / rel).read_text() == (sc.EXAMPLE_DIR / rel).read_text(), rel


def test_page_examples_are_what_the_doctor_prints(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    examples = EXAMPLE.findall(PAGE.read_text())
    assert len(examples) == 2
    for args, shown in examples:
        code = main(["doctor", *args.split(), "--no-color"])
        out = capsys.readouterr().out
        expected_exit = 0 if args.startswith("preflight") else 1
        assert code == expected_exit
        assert shown == f"$ dsv4-serve doctor {args}\n{out}", (
            "docs/kubernetes.md example out of date: run this test with DSV4_WRITE_DOCTOR_EXAMPLE=1"
        )


def write_page_examples() -> None:
    """Put the doctor's real output into docs/kubernetes.md (DSV4_WRITE_DOCTOR_EXAMPLE=1)."""
    import contextlib
    import io

    text = PAGE.read_text()

    def fill(match: re.Match) -> str:
        args = match.group(1)
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
        with contextlib.redirect_stdout(out):
            main(["doctor", *args.split(), "--no-color", "-q"])
        out.seek(0)
        return (
            f"<!-- doctor-example: {args} -->\n```text\n$ dsv4-serve doctor {args}\n{out.read()}```"
        )

    PAGE.write_text(EXAMPLE.sub(fill, text))


@pytest.fixture(autouse=True, scope="module")
def _maybe_write_page():
    if os.environ.get("DSV4_WRITE_DOCTOR_EXAMPLE"):
        cwd = Path.cwd()
        os.chdir(ROOT)
        try:
            write_page_examples()
        finally:
            os.chdir(cwd)
    yield
