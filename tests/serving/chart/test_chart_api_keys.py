"""The chart's API-key Secret carries both kinds of keys, and the pods read them as the
gateway does: each Secret entry is a file in the mounted volume, named by the pods'
DSV4_API_KEYS_FILE and DSV4_ADMIN_KEYS_FILE."""

import base64
from pathlib import Path

from serving.gateway.keys import KeyRing, Role
from tests.support.chart_render import by_kind, render

MOUNT = "/etc/dsv4/api-keys"


def _containers(objects: list[dict]) -> list[dict]:
    cluster = by_kind(objects, "RayService")[0]["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]["template"]["spec"]]
    pods += [g["template"]["spec"] for g in cluster["workerGroupSpecs"]]
    return [c for pod in pods for c in pod["containers"] if c["name"] != "autoscaler"]


def _key_env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if e["name"].endswith("KEYS_FILE")}


def test_the_secret_holds_distinct_inference_and_admin_keys(tmp_path: Path):
    objects = render(tmp_path, {})
    (secret,) = by_kind(objects, "Secret")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert set(data) == {"api-keys", "admin-keys"}
    assert data["api-keys"] != data["admin-keys"]
    assert all(len(v) == 48 and v.isalnum() for v in data.values())
    # Mounted as files, they are what the gateway in every pod reads, each with its role.
    for name, value in data.items():
        (tmp_path / name).write_text(value + "\n")
    for container in _containers(objects):
        env = _key_env(container)
        assert env == {
            "DSV4_API_KEYS_FILE": f"{MOUNT}/api-keys",
            "DSV4_ADMIN_KEYS_FILE": f"{MOUNT}/admin-keys",
        }
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["api-keys"] == MOUNT
        local = {k: v.replace(MOUNT, str(tmp_path)) for k, v in env.items()}
        ring = KeyRing(env=local)
        assert ring.identify(data["api-keys"].encode()).role is Role.INFERENCE
        assert ring.identify(data["admin-keys"].encode()).role is Role.ADMIN


def test_no_admin_entry_means_no_admin_keys_and_control_routes_off(tmp_path: Path):
    objects = render(tmp_path, {"apiKey": {"adminSecretKey": ""}})
    (secret,) = by_kind(objects, "Secret")
    assert set(secret["data"]) == {"api-keys"}
    for container in _containers(objects):
        assert set(_key_env(container)) == {"DSV4_API_KEYS_FILE"}


def test_an_existing_secret_is_read_for_both_entries(tmp_path: Path):
    values = {"apiKey": {"existingSecret": "my-keys", "generate": False, "adminSecretKey": "ops"}}
    objects = render(tmp_path, values)
    assert by_kind(objects, "Secret") == []
    for container in _containers(objects):
        assert _key_env(container)["DSV4_ADMIN_KEYS_FILE"] == f"{MOUNT}/ops"


def test_one_entry_for_both_kinds_is_refused(tmp_path: Path):
    err = render(tmp_path, {"apiKey": {"adminSecretKey": "api-keys"}}, expect_ok=False)
    assert "adminSecretKey must differ from apiKey.secretKey" in err


def test_the_helm_test_pod_mounts_the_inference_keys_only(tmp_path: Path):
    objects = render(tmp_path, {})
    (secret,) = by_kind(objects, "Secret")
    (pod,) = [o for o in by_kind(objects, "Pod") if o["metadata"]["name"].endswith("test-openai")]
    (volume,) = pod["spec"]["volumes"]
    # A Secret volume with `items` projects the listed keys only (core/v1 SecretVolumeSource).
    projected = {item["path"]: item["key"] for item in volume["secret"]["items"]}
    assert set(secret["data"]) == {"api-keys", "admin-keys"}
    assert projected == {"api-keys": "api-keys"}
    # Nor the namespace's service-account token, which it never reads either.
    assert pod["spec"]["automountServiceAccountToken"] is False
    (container,) = pod["spec"]["containers"]
    (mount,) = container["volumeMounts"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["KEY_FILE"] == f"{mount['mountPath']}/api-keys"
