"""Child processes in their own process group: free ports and clean shutdown."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_group(proc: subprocess.Popen, grace: float = 30) -> None:
    """SIGTERM the child's whole group, SIGKILL it after ``grace`` seconds."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def port_free(host: str, port: int) -> bool:
    """Whether ``host:port`` can be bound now (as a server would, without SO_REUSEPORT)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def port_holder(port: int) -> str:
    """Who listens on ``port``: ``haproxy (pid 123: haproxy -db -f ...)``, or why unknown."""
    import psutil

    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return "another process (not visible to this user)"
    for conn in conns:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            if conn.pid is None:
                return "a process of another user"
            try:
                proc = psutil.Process(conn.pid)
                command = " ".join(" ".join(proc.cmdline()).split())[:160]
                return f"{proc.name()} (pid {conn.pid}: {command})"
            except psutil.Error:
                return f"pid {conn.pid}"
    return "another process (it may be closing)"


def descendants() -> list[psutil.Process]:
    """This process's children, recursively (psutil processes, start times included, so a
    recycled pid is never mistaken for one of them)."""
    import psutil

    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def end_processes(procs: list[psutil.Process], grace_s: float = 10) -> list[psutil.Process]:
    """SIGTERM those of ``procs`` still running, SIGKILL them after ``grace_s``; the ones
    that had to be ended."""
    import psutil

    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                proc.terminate()
                alive.append(proc)
        except psutil.Error:
            continue
    _, stubborn = psutil.wait_procs(alive, timeout=grace_s)
    for proc in stubborn:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(stubborn, timeout=grace_s)
    return alive
