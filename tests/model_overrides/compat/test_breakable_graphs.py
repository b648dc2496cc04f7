"""Off the CPU the plugin must not import DSV4's model modules before vLLM's config exists.

vLLM turns breakable CUDA graphs on for DSV4 in ``VllmConfig`` and DSV4's attention reads the
switch at import (model_overrides/compat/breakable_graphs.py): a plugin that imported it first would
have the sparse attention captured into the graphs. Here vLLM's platform answers as a GPU
platform would (``is_cpu`` False: vLLM's own DSV4 package then takes its CUDA branch, which
imports on this CPU), the whole plugin registers in a child process, and nothing under
``vllm.models.deepseek_v4`` may have been imported; the test switch that has to import them
sets vLLM's own default first, and vLLM's decorator then makes the attention a break.
"""

import json
import subprocess
import sys

from tests.support.paths import ROOT

CHILD = """
import json, os, sys
from vllm.platforms import current_platform
type(current_platform).is_cpu = lambda self: False
type(current_platform).is_cuda = lambda self: True
from model_overrides import plugin
from model_overrides.registry import REGISTRY
plugin.register()
print("RESULT " + json.dumps({
    "imported": sorted(
        m for m in sys.modules
        if m.startswith("vllm.models.deepseek_v4") or m == "vllm.v1.worker.gpu_model_runner"
    ),
    "env": os.environ.get("VLLM_USE_BREAKABLE_CUDAGRAPH"),
    "outcomes": {n: s.outcome.value for n, s in REGISTRY.results.items()},
}))
"""


IMPORT = """
import json, os, sys
from vllm.platforms import current_platform
type(current_platform).is_cpu = lambda self: False
from model_overrides.compat import breakable_graphs
if sys.argv[1] == "prepared":
    breakable_graphs.prepare_dsv4_import()
import vllm.models.deepseek_v4.attention
print("RESULT " + json.dumps({
    "breaks": breakable_graphs.attention_breaks_during_capture(),
    "env": os.environ.get("VLLM_USE_BREAKABLE_CUDAGRAPH"),
}))
"""


def run(env: dict[str, str], code: str = CHILD, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(ROOT), **env},
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, proc.stderr[-4000:]
    return json.loads(line.removeprefix("RESULT "))


def test_the_plugin_imports_no_dsv4_model_module_off_the_cpu():
    result = run({})
    assert result["imported"] == [], result["imported"]
    assert result["env"] is None
    assert result["outcomes"]["pr42930-decoder-defaults"] == "not needed"
    assert result["outcomes"]["dsv4-cpu-tile-scheduler-keys"] == "not applicable"
    # The guard's probe reads the runner's and the proposer's source without importing
    # them (importing the runner imports DSV4's modules: on the H200 a short last prefill
    # chunk then crashed CUDA-graph replay), and recognises them.
    assert result["outcomes"]["adaptive-speculation-guard"] == "applied"


def test_importing_after_the_preparation_makes_dsv4_attention_a_capture_break():
    prepared = run({}, IMPORT, "prepared")
    assert prepared == {"breaks": True, "env": "1"}
    # Without it, vLLM's decorator has already returned the bare function: the bug.
    assert run({}, IMPORT, "bare") == {"breaks": False, "env": None}
