"""vLLM's model-class inspection answered ahead, for the target and its MTP drafter at once.

Before an engine starts, vLLM's model registry asks what the model's classes support
(``model_executor/models/registry.py``, ``_LazyRegisteredModel.inspect_model_cls``). With no
answer in ``$VLLM_CACHE_ROOT/modelinfos`` it imports the model's module in a new process,
once for the target and once more for the drafter, one after the other (what that costs
a fresh node: docs/cold-start.md). ``warm`` answers both from one
process, importing the module once, while nothing else runs; the engine then reads them
from the cache, and they travel in the archive with the kernels.

    python -m serving.warm.model_info MODEL_DIR
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def architectures(model_dir: str) -> list[str]:
    """The target's architectures and the MTP drafter's, as vLLM's configs name them."""
    from vllm.config.speculative import SpeculativeConfig
    from vllm.transformers_utils.config import get_config

    config = get_config(model_dir, trust_remote_code=False)
    drafter = SpeculativeConfig.hf_config_override(copy.deepcopy(config))
    names = [*(config.architectures or []), *(drafter.architectures or [])]
    return list(dict.fromkeys(names))


def cache_answers(model_dir: str) -> dict[str, str]:
    """Inspect each architecture in this process; vLLM writes its cache file for each.
    Returns each architecture with what happened."""
    import vllm.envs as envs
    from vllm.model_executor.models import registry

    # This process is the one vLLM would start for the inspection: run it here, so the
    # model's module is imported once for both classes.
    registry._run_in_subprocess = lambda fn: fn()
    cache = Path(envs.VLLM_CACHE_ROOT) / "modelinfos"
    done: dict[str, str] = {}
    for arch in architectures(model_dir):
        model = registry.ModelRegistry.models.get(arch)
        if model is None:
            done[arch] = "not in vLLM's registry"
            continue
        name = getattr(model, "_get_cache_filename", None)
        file = cache / name() if name else None
        had = file is not None and file.exists()
        model.inspect_model_cls()
        if had:
            done[arch] = "cached already"
        else:
            done[arch] = "cached" if file and file.exists() else "inspected (vLLM keeps no file)"
    return done


def answer_ahead(model_dir: str, env: Mapping[str, str], timeout_s: float = 300) -> str:
    """Run the inspection in a child with the warm's cache environment; one line back.
    Never fatal: the engine inspects for itself what is not cached."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "serving.warm.model_info", model_dir],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return f"model classes not inspected ahead (over {timeout_s:.0f} s)"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"model classes not inspected ahead: {last[:200]}"
    return proc.stdout.strip().splitlines()[-1]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m serving.warm.model_info MODEL_DIR", file=sys.stderr)
        return 2
    done = cache_answers(argv[0])
    print("model classes inspected ahead: " + "; ".join(f"{a} {s}" for a, s in done.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
