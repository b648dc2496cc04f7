"""vLLM's OpenAI app for the cpu-tiny preset, built without an engine by some vLLM's
interpreter (``python -m serving.gateway.routes --json``): the routes it mounts by
default and with every setting that mounts more."""

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.support.paths import ROOT

# Everything vLLM mounts only on request (vllm/entrypoints/launchers/api_server/
# routers.py and the routers it calls; enable_sleep_mode: 0.34's /checkpoint/*).
EVERY_SWITCH_ENV = {
    "VLLM_SERVER_DEV_MODE": "1",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1",
    "VLLM_ENABLE_COHERE_API": "1",
}
EVERY_SWITCH_ARGS = [
    *("--set", "enable_tokenizer_info_endpoint=true", "--set", "enable_scale_out=true"),
    *("--set", "enable_fault_tolerance=true", "--set", "enable_elastic_ep=true"),
    *("--set", "enable_sleep_mode=true", "--set", "enable_offline_docs=true", "--profiler"),
]

Routes = list[tuple[str, list[str]]]


def mounted_routes(python: Path | str, extra: list[str], env: dict[str, str]) -> Routes:
    cmd = [str(python), "-m", "serving.gateway.routes", "cpu-tiny", "--json", *extra]
    out = subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env}, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [tuple(item) for item in json.loads(out.stdout.splitlines()[-1])]


def default_and_every_switch(python: Path | str, env: dict[str, str] | None = None) -> dict:
    """Both builds, each in its own process: vLLM reads its switches from the
    environment and some routers keep state between builds."""
    env = env or {}
    with ThreadPoolExecutor(2) as pool:
        default = pool.submit(mounted_routes, python, [], env)
        every = pool.submit(mounted_routes, python, EVERY_SWITCH_ARGS, env | EVERY_SWITCH_ENV)
        return {"default": default.result(), "every-switch": every.result()}
