"""Reading a dump: every shape `kubectl get -o yaml|json` writes, and one clear line (exit 2)
for every malformed one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from serving.cli import main
from serving.doctor import kinds
from serving.doctor.dump import DumpCluster
from serving.doctor.errors import DoctorError, Unavailable
from serving.doctor.progress import Progress
from tests.support import doctor_cluster as dc

KUBECTL = "(is it `kubectl get -o yaml` output?)"


def read(path: Path) -> DumpCluster:
    return DumpCluster(path, Progress(enabled=False))


def test_lists_multi_document_files_typed_lists_json_and_version(tmp_path):
    nodes = [dc.node("gpu-h200-a"), dc.node("cpu-a", None)]
    # `kubectl get nodes -o yaml`: a List whose items keep kind and apiVersion.
    (tmp_path / "nodes.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes})
    )
    # Multi-document YAML (several `kubectl get X -o yaml` concatenated with ---).
    classes = [dc.storage_class("nfs", "nfs.csi.k8s.io", True), dc.namespace("dsv4")]
    (tmp_path / "mixed.yaml").write_text("---\n".join(yaml.safe_dump(o) for o in classes))
    # The raw API list (`kubectl get --raw /api/v1/namespaces/dsv4/pods`): items lack kind.
    pod = dc.busy_pod("gpu-h200-a", 8)
    pod["metadata"]["namespace"] = "dsv4"
    bare = {k: v for k, v in pod.items() if k not in ("kind", "apiVersion")}
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "pods.json").write_text(
        json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [bare]})
    )
    # `kubectl version -o yaml` and an empty file (a `kubectl get` that found nothing).
    (tmp_path / "version.yaml").write_text(yaml.safe_dump(dc.version_doc("v1.31.2")))
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "dumped-at").write_text("2026-11-30T12:00:00Z\n")
    cluster = read(tmp_path)
    assert [n["metadata"]["name"] for n in cluster.list(kinds.NODE)] == ["gpu-h200-a", "cpu-a"]
    assert cluster.list(kinds.POD, "dsv4")[0]["kind"] == "Pod"
    assert cluster.list(kinds.POD, "other") == []
    assert cluster.version()["gitVersion"] == "v1.31.2"
    assert cluster.namespace_exists("dsv4") is True
    assert cluster.namespace_exists("nope") is False
    assert cluster.get(kinds.STORAGE_CLASS, "nfs")["provisioner"] == "nfs.csi.k8s.io"
    assert cluster.now() == dc.NOW
    assert cluster.list(kinds.EVENT, "dsv4") == []  # events may legitimately be none
    with pytest.raises(Unavailable, match="the dump holds no Deployment objects"):
        cluster.list(kinds.DEPLOYMENT)


def test_selectors_filter_like_the_api(tmp_path):
    pods = [dc.busy_pod(f"gpu-h200-{i}", 1) for i in "ab"]
    pods[1]["status"]["phase"] = "Succeeded"
    pods[1]["metadata"]["labels"] = {"app": "other"}
    dc.write_dump(tmp_path / "d", pods)
    cluster = read(tmp_path / "d")
    assert len(cluster.list(kinds.POD, label_selector="app=trainer")) == 1
    assert len(cluster.list(kinds.POD, label_selector="app!=trainer")) == 1
    assert len(cluster.list(kinds.POD, label_selector="app,!missing")) == 2
    assert (
        len(cluster.list(kinds.POD, field_selector="status.phase!=Succeeded,status.phase!=Failed"))
        == 1
    )
    assert len(cluster.list(kinds.POD, field_selector="spec.nodeName=gpu-h200-a")) == 1


def test_an_empty_list_in_a_named_file_means_none_exist(tmp_path):
    empty = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": []}
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump(empty))
    (tmp_path / "deployments-1.yaml").write_text(yaml.safe_dump(empty))
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump({**empty, "items": [dc.node("a")]}))
    cluster = read(tmp_path)
    assert cluster.list(kinds.JOB, "dsv4") == []
    assert cluster.list(kinds.DEPLOYMENT) == []
    with pytest.raises(Unavailable):
        cluster.list(kinds.RAY_SERVICE, "dsv4")


def test_later_copies_replace_earlier_ones_and_logs_are_found(tmp_path):
    old, new = dc.node("a", gpus=4), dc.node("a", gpus=8)
    (tmp_path / "1.yaml").write_text(yaml.safe_dump(old))
    (tmp_path / "2.yaml").write_text(yaml.safe_dump(new))
    (tmp_path / "logs" / "pod-a").mkdir(parents=True)
    (tmp_path / "logs" / "pod-a" / "ray-worker.previous.log").write_text("a\nb\nc\n")
    (tmp_path / "logs" / "pod-b.log").write_text("only\n")
    cluster = read(tmp_path)
    assert cluster.list(kinds.NODE)[0]["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert cluster.pod_log("ns", "pod-a", "ray-worker", True, 2) == "b\nc"
    assert cluster.pod_log("ns", "pod-a", "ray-worker", False, 2) is None
    assert cluster.pod_log("ns", "pod-b", "main", False, 5) == "only"


def test_a_single_file_is_a_dump_too(tmp_path):
    path = tmp_path / "support.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [dc.node("a")]}))
    assert len(read(path).list(kinds.NODE)) == 1


def test_dump_time_without_dumped_at_is_its_newest_timestamp(tmp_path):
    (tmp_path / "n.yaml").write_text(yaml.safe_dump(dc.node("a")))
    # The kubelet's last heartbeat, 30 s before the fixtures' now.
    assert (dc.NOW - read(tmp_path).now()).total_seconds() == 30


@pytest.mark.parametrize(
    "name, content, message",
    [
        (
            "bad.yaml",
            "kind: Node\nmetadata: {name: a\n",
            "malformed dump: {path} line 3: did not find expected ',' or '}}'",
        ),
        (
            "scalar.yaml",
            "No resources found in dsv4 namespace.\n",
            "malformed dump: {path} is a str, not a Kubernetes object " + KUBECTL,
        ),
        (
            "nokind.yaml",
            'error: the server doesn\'t have a resource type "rayservices"\n',
            "malformed dump: {path} has no `kind` (is it `kubectl get -o yaml` output?)",
        ),
        (
            "noname.yaml",
            "kind: Node\nmetadata: {}\n",
            "malformed dump: {path}: Node without metadata.name",
        ),
        (
            "items.yaml",
            "kind: List\nitems: {a: 1}\n",
            "malformed dump: {path}: `items` is not a list",
        ),
        (
            "item.yaml",
            "kind: List\nitems: [3]\n",
            "malformed dump: {path}: item 0 is not an object",
        ),
        (
            "bad.json",
            '{"kind": "List", "items": [}',
            "malformed dump: {path} line 1: Expecting value",
        ),
        (
            "multi.yaml",
            "kind: Node\nmetadata: {name: a}\n---\n- 1\n",
            "malformed dump: {path} (document 2) is a list, not a Kubernetes object " + KUBECTL,
        ),
    ],
)
def test_malformed_dumps_are_one_line(capsys, tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    code = main(["doctor", "status", "dsv4", "--from-dump", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == f"dsv4-serve doctor: error: {message.format(path=path)}\n"


def test_missing_or_empty_dump_directory(capsys, tmp_path):
    code = main(["doctor", "preflight", "h200-flash-mtp", "--from-dump", str(tmp_path / "nope")])
    assert code == 2
    assert (
        capsys.readouterr().err
        == f"dsv4-serve doctor: error: --from-dump {tmp_path / 'nope'}: no such file or directory\n"
    )
    (tmp_path / "README.txt").write_text("kubectl output goes here")
    with pytest.raises(DoctorError, match="holds no Kubernetes objects"):
        read(tmp_path)


def test_dump_script_collects_what_the_doctor_reads(capsys):
    import subprocess

    assert main(["doctor", "dump-script", "-n", "inference", "--release", "prod"]) == 0
    script = capsys.readouterr().out
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert "NS=inference\nRELEASE=prod\n" in script
    for plural in (
        "nodes",
        "storageclasses",
        "rayservices",
        "rayclusters",
        "jobs",
        "events",
        "persistentvolumeclaims",
        "resourcequotas",
    ):
        assert f"get {plural} " in script or f"get {plural} -o yaml" in script
    assert '--field-selector="$LIVE"' in script and "kubectl version -o yaml" in script
    for group, plural in kinds.CHART_KINDS.values():
        assert f'review "$NS" create "{group}" {plural}' in script
    assert "secret" not in script.replace("secrets\n", "").replace(
        '"" secrets', ""
    ).lower().replace("never secrets", "")
