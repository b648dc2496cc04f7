"""vLLM's model-class inspection answered ahead: the engine that follows finds both answers
(the target's and the MTP drafter's) in its cache and starts no inspection of its own."""

import os
import subprocess
import sys
from pathlib import Path

from serving.warm.model_info import answer_ahead

# vLLM's own lookup, with its inspection process made to fail: it answers only from cache.
ENGINE_SIDE = """
import sys
from vllm.model_executor.models import registry
from serving.warm.model_info import architectures

def no_inspection(fn):
    raise SystemExit("vLLM started an inspection: the answer was not cached")

registry._run_in_subprocess = no_inspection
for arch in architectures(sys.argv[1]):
    info = registry.ModelRegistry.models[arch].inspect_model_cls()
    print(arch, info.architecture, info.supports_pp)
"""


def test_the_target_and_its_drafter_are_answered_from_the_cache(golden_dir: Path, tmp_path):
    env = os.environ | {"VLLM_CACHE_ROOT": str(tmp_path / "vllm")}
    line = answer_ahead(str(golden_dir), env)
    assert line == (
        "model classes inspected ahead: DeepseekV4ForCausalLM cached; DeepSeekV4MTPModel cached"
    )
    assert len(list((tmp_path / "vllm" / "modelinfos").glob("*.json"))) == 2
    engine = subprocess.run(
        [sys.executable, "-c", ENGINE_SIDE, str(golden_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert engine.returncode == 0, engine.stderr[-2000:]
    answered = [line.split()[:2] for line in engine.stdout.splitlines()]
    assert answered == [
        ["DeepseekV4ForCausalLM", "DeepseekV4ForCausalLM"],
        ["DeepSeekV4MTPModel", "DeepSeekV4MTP"],
    ]
