"""Run a rendered container's command for real, as its securityContext says (test helper).

Root only: a private mount namespace (unshare) with a minimal root (the host's /usr and
/etc bound read-only) where each volumeMount is a bind mount of a host directory, then
chroot and setpriv with the container's uid, gid, supplementary fsGroup, capability set
and no_new_privs, as a container runtime applies them. This shows file ownership and
permissions the way kubelet's volumes meet them; it is not a container runtime.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

CAP_NAMES = {"CHOWN": "chown", "FOWNER": "fowner", "DAC_OVERRIDE": "dac_override"}


def _identity(pod_sc: dict, sc: dict) -> tuple[int, int, list[int]]:
    uid = sc.get("runAsUser", pod_sc.get("runAsUser", 0))
    gid = sc.get("runAsGroup", pod_sc.get("runAsGroup", 0))
    groups = [pod_sc["fsGroup"]] if "fsGroup" in pod_sc else []  # kubelet adds fsGroup
    return uid, gid, groups


def _caps(sc: dict) -> str:
    caps = sc.get("capabilities") or {}
    assert "ALL" in (caps.get("drop") or []), "the chart drops all capabilities first"
    added = [CAP_NAMES[c] for c in caps.get("add") or []]
    return ",".join(["-all", *(f"+{c}" for c in added)])


def run_container(
    container: dict, pod_spec: dict, volumes: dict[str, Path], workdir: Path
) -> subprocess.CompletedProcess:
    """Run `container` with each of its volumeMounts backed by volumes[name]."""
    assert os.geteuid() == 0
    root = workdir / f"root-{container['name']}"
    lines = ["set -e", f"root={shlex.quote(str(root))}"]
    for top in ("usr", "etc", "bin", "lib", "lib64", "sbin"):
        host = Path("/") / top
        if host.is_symlink():  # merged /usr: /bin -> usr/bin
            lines.append(f'ln -sfn {shlex.quote(os.readlink(host))} "$root/{top}"')
        elif host.is_dir():
            lines += [
                f'mkdir -p "$root/{top}"',
                f'mount --bind /{top} "$root/{top}"',
                f'mount -o remount,bind,ro "$root/{top}"',
            ]
    lines.append('mkdir -p "$root/tmp"')
    for mount in container.get("volumeMounts") or []:
        target = f'"$root"{shlex.quote(mount["mountPath"])}'
        lines += [
            f"mkdir -p {target}",
            f"mount --bind {shlex.quote(str(volumes[mount['name']]))} {target}",
        ]
        if mount.get("readOnly"):
            lines.append(f"mount -o remount,bind,ro {target}")
    pod_sc = pod_spec.get("securityContext") or {}
    sc = container.get("securityContext") or {}
    uid, gid, groups = _identity(pod_sc, sc)
    caps = _caps(sc)
    setpriv = [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={gid}",
        f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups",
        f"--inh-caps={caps}",
        f"--bounding-set={caps}",
    ]
    if sc.get("allowPrivilegeEscalation") is False:
        setpriv.append("--no-new-privs")
    if uid != 0:
        setpriv.append(f"--ambient-caps={caps}")
    env = ["env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin"]
    env += [f"{e['name']}={e['value']}" for e in container.get("env") or [] if "value" in e]
    argv = [*container.get("command", []), *container.get("args", [])]
    lines.append('exec chroot "$root" ' + shlex.join([*setpriv, *env, *argv]))
    script = "\n".join(lines)
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
