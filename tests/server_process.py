"""Run a server as a child process on 127.0.0.1 and wait until it answers."""

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(url: str, headers: dict[str, str] | None = None) -> bool:
    try:
        return httpx.get(url, timeout=2, headers=headers).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def running_server(
    cmd: list[str],
    health_url: str,
    log_path: Path,
    env: dict[str, str],
    timeout: float = 300,
    headers: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Iterator[subprocess.Popen]:
    """Start ``cmd`` in its own process group; stop the whole group on exit."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
            cwd=cwd,
        )
        try:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"server exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}"
                    )
                if answers(health_url, headers):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"no answer from {health_url}:\n{log_path.read_text()[-4000:]}"
                    )
                time.sleep(1)
            yield proc
        finally:
            stop_group(proc)


def stop_group(proc: subprocess.Popen, grace: float = 30) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


PYTHON = sys.executable
