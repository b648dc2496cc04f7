"""Finding 4: the node-local cache (hostPath) fills as the pods' user.

kubelet creates a missing DirectoryOrCreate hostPath with mode 0755 owned by root
(pkg/volume/hostpath), and fsGroup does not apply to hostPath volumes. The worker's init
containers run here for real, each with its rendered uid, gid, fsGroup and capabilities
(tests/support/chart_exec.py), against directories laid out as kubelet leaves them.
"""

import os
import shutil
from pathlib import Path

import pytest

from tests.support.chart_exec import run_container
from tests.support.chart_render import render, worker_group

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(map(shutil.which, ("unshare", "setpriv", "chroot"))),
    reason="runs containers' commands as their users: needs root, unshare, setpriv, chroot",
)
UID = 1000
WEIGHTS = "deepseek-ai/DeepSeek-V4-Flash"


def _volume(spec: dict, name: str) -> dict:
    return next(v for v in spec["volumes"] if v["name"] == name)


def _filled_pvc(tmp_path: Path) -> Path:
    """The model volume as the download Job leaves it (its files owned by the pods' user)."""
    pvc = tmp_path / "pvc"
    weights = pvc / WEIGHTS
    weights.mkdir(parents=True)
    (weights / "config.json").write_text("{}")
    (weights / "model-00001.safetensors").write_bytes(b"\0" * 4096)
    (weights / ".dsv4-download-complete").touch()
    for path in [pvc, *pvc.rglob("*")]:
        os.chown(path, UID, UID)
    return pvc


def _kubelet_host_path(path: Path, kind: str, admin_owner: int | None) -> None:
    if admin_owner is not None:  # prepared on every node by the cluster's admin
        path.mkdir(mode=0o755)
        os.chown(path, admin_owner, admin_owner)
    assert kind in {"DirectoryOrCreate", "Directory"}
    if kind == "DirectoryOrCreate" and not path.exists():
        path.mkdir(mode=0o755)
        os.chown(path, 0, 0)
    assert path.is_dir(), f"hostPath type {kind}: kubelet refuses to start the pod"


@pytest.mark.parametrize("prepare", ["chown", "none"])
def test_node_cache_fills_as_the_pods_user(prepare: str, tmp_path: Path):
    cache = {"enabled": True, **({"prepare": prepare} if prepare != "chown" else {})}
    spec = worker_group(render(tmp_path, {"model": {"localCache": cache}}))["template"]["spec"]
    host_path = _volume(spec, "model-cache")["hostPath"]
    node_dir = tmp_path / "node-cache"
    _kubelet_host_path(node_dir, host_path["type"], UID if prepare == "none" else None)
    volumes = {"model": _filled_pvc(tmp_path), "model-cache": node_dir}

    steps = [c for c in spec["initContainers"] if c["name"].endswith("-node-cache")]
    assert [c["name"] for c in steps][-1] == "fill-node-cache"
    for start in ("first", "second"):  # a restarted pod finds the cache filled
        for container in steps:
            out = run_container(container, spec, volumes, tmp_path / start)
            assert out.returncode == 0, f"{container['name']}: {out.stdout}{out.stderr}"

    cached = node_dir / WEIGHTS
    assert (cached / ".dsv4-cache-complete").exists()
    assert (cached / "model-00001.safetensors").read_bytes() == b"\0" * 4096
    assert all(p.stat().st_uid == UID for p in [cached, *cached.rglob("*")])
    assert node_dir.stat().st_uid == UID


def test_only_the_prepare_step_runs_as_root_and_only_with_chown(tmp_path: Path):
    values = {"model": {"localCache": {"enabled": True}}}
    spec = worker_group(render(tmp_path, values))["template"]["spec"]
    roots = [
        c for c in spec["initContainers"] if c.get("securityContext", {}).get("runAsUser") == 0
    ]
    assert [c["name"] for c in roots] == ["prepare-node-cache"]
    sc = roots[0]["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert sc["allowPrivilegeEscalation"] is False
    assert [m["name"] for m in roots[0]["volumeMounts"]] == ["model-cache"]
    none = {"model": {"localCache": {"enabled": True, "prepare": "none"}}}
    spec = worker_group(render(tmp_path, none))["template"]["spec"]
    assert not [c for c in spec["initContainers"] if c["securityContext"].get("runAsUser") == 0]
    assert _volume(spec, "model-cache")["hostPath"]["type"] == "Directory"
