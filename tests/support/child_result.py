"""Run a runner module (tests/support/*_runner.py) in a child process, read its RESULT line."""

import json
import os
import re
import subprocess
from pathlib import Path

from tests.support.golden_prompts import engine_env
from tests.support.paths import ROOT
from tests.support.server_process import PYTHON

# A directory that keeps every child's whole output (a GPU run's logs come back from it);
# unset, only a failed child's stderr tail is shown.
LOG_DIR_ENV = "DSV4_CHILD_LOG_DIR"


def child_result(module: str, *args: str, env: dict[str, str] | None = None) -> dict:
    """The JSON a runner prints as ``RESULT {...}``; the child's stderr tail if it printed none.

    The child gets this process's environment, the golden engine's (engine_env) and ``env``."""
    proc = subprocess.run(
        [PYTHON, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env={**os.environ, **engine_env(), **(env or {})},
    )
    if log_dir := os.environ.get(LOG_DIR_ENV):
        name = re.sub(r"[^\w.-]+", "_", "-".join([module.rsplit(".", 1)[-1], *args]))[-120:]
        log = Path(log_dir) / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(
            f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, f"{module} failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(line[len("RESULT ") :])
