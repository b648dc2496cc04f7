"""The JIT cache volume: every engine's kernel cache on one volume that outlives the pod.

Rendered by the real helm; the hostPath owner step runs for real as its rendered user
(tests/support/chart_exec.py), then the worker's user writes each cache directory there.
"""

import os
import shutil
from pathlib import Path

import pytest

from serving.config.jit_cache import CACHE_DIRS, ROOT_ENV
from tests.support.chart_exec import run_container
from tests.support.chart_render import by_kind, pod_templates, render, worker_group

UID = 1000


def _volume(spec: dict, name: str) -> dict:
    return next(v for v in spec["volumes"] if v["name"] == name)


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_default_is_a_kept_claim_every_pod_mounts(tmp_path: Path):
    objects = render(tmp_path, {})
    claims = {c["metadata"]["name"]: c for c in by_kind(objects, "PersistentVolumeClaim")}
    jit = next(c for name, c in claims.items() if name.endswith("-jit-cache"))
    assert jit["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert jit["spec"]["accessModes"] == ["ReadWriteMany"]
    assert jit["spec"]["resources"]["requests"]["storage"] == "100Gi"
    templates = pod_templates(objects)
    for role in ("head", "worker"):  # the Ray pods: an engine may run in either
        spec = templates[role]["spec"]
        volume = _volume(spec, "jit-cache")
        assert volume["persistentVolumeClaim"]["claimName"] == jit["metadata"]["name"], role
        container = spec["containers"][0]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["jit-cache"] == "/var/cache/dsv4", role
        env = _env(container)
        for name, sub in CACHE_DIRS.items():
            assert env[name] == f"/var/cache/dsv4/{sub}", (role, name)
        assert env[ROOT_ENV] == "/var/cache/dsv4", role  # where the manifest is read


def test_existing_claim_and_emptydir_create_no_claim(tmp_path: Path):
    values = {"jitCache": {"pvc": {"existingClaim": "kernels"}, "mountPath": "/jit/"}}
    objects = render(tmp_path, values)
    names = [c["metadata"]["name"] for c in by_kind(objects, "PersistentVolumeClaim")]
    assert not [n for n in names if n.endswith("-jit-cache")]
    spec = worker_group(objects)["template"]["spec"]
    assert _volume(spec, "jit-cache")["persistentVolumeClaim"]["claimName"] == "kernels"
    assert _env(spec["containers"][0])["DG_JIT_CACHE_DIR"] == "/jit/deep_gemm"
    spec = worker_group(render(tmp_path, {"jitCache": {"type": "emptyDir"}}))["template"]["spec"]
    assert _volume(spec, "jit-cache") == {"name": "jit-cache", "emptyDir": {}}
    assert not [c for c in spec.get("initContainers", []) if c["name"] == "prepare-jit-cache"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"jitCache": {"type": "nfs"}}, "/jitCache/type"),
        ({"jitCache": {"mountPath": "cache"}}, "/jitCache/mountPath"),
        ({"jitCache": {"pvc": {"size": "lots"}}}, "/jitCache/pvc/size"),
    ],
)
def test_bad_values_are_named(tmp_path: Path, values: dict, message: str):
    assert message in render(tmp_path, values, expect_ok=False)


@pytest.mark.skipif(
    os.geteuid() != 0 or not all(map(shutil.which, ("unshare", "setpriv", "chroot"))),
    reason="runs containers' commands as their users: needs root, unshare, setpriv, chroot",
)
def test_host_path_is_handed_to_the_pods_user(tmp_path: Path):
    objects = render(tmp_path, {"jitCache": {"type": "hostPath"}})
    head = pod_templates(objects)["head"]["spec"]
    assert [c["name"] for c in head["initContainers"]] == ["prepare-jit-cache"]
    spec = worker_group(objects)["template"]["spec"]
    host_path = _volume(spec, "jit-cache")["hostPath"]
    assert host_path == {"path": "/mnt/dsv4-jit-cache", "type": "DirectoryOrCreate"}
    node_dir = tmp_path / "node-jit"
    node_dir.mkdir(mode=0o755)  # as kubelet creates a missing DirectoryOrCreate: root's
    os.chown(node_dir, 0, 0)
    prepare = next(c for c in spec["initContainers"] if c["name"] == "prepare-jit-cache")
    assert prepare["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    out = run_container(prepare, spec, {"jit-cache": node_dir}, tmp_path / "run")
    assert out.returncode == 0, out.stdout + out.stderr
    assert node_dir.stat().st_uid == UID
    # What the engine's tools do first: make their directory under the root, as the user.
    worker = dict(spec["containers"][0])
    env = _env(worker)
    dirs = " ".join(f"/jit-cache/{sub}" for sub in CACHE_DIRS.values())
    worker |= {
        "name": "engine-writes",
        "command": ["/bin/sh", "-c", f"mkdir -p {dirs} && touch /jit-cache/deep_gemm/k.cubin"],
        "volumeMounts": [{"name": "jit-cache", "mountPath": "/jit-cache"}],
    }
    assert env["DG_JIT_CACHE_DIR"] == "/var/cache/dsv4/deep_gemm"
    out = run_container(worker, spec, {"jit-cache": node_dir}, tmp_path / "engine")
    assert out.returncode == 0, out.stdout + out.stderr
    assert (node_dir / "deep_gemm" / "k.cubin").stat().st_uid == UID
