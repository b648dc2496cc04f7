"""Run a server as a child process on 127.0.0.1 and wait until it answers."""

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from serving.local.processes import stop_group


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
    stop_grace_s: float = 30,
) -> Iterator[subprocess.Popen]:
    """Start ``cmd`` in its own process group; stop the whole group on exit (SIGTERM,
    SIGKILL after ``stop_grace_s``)."""
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
            stop_group(proc, stop_grace_s)


PYTHON = sys.executable
