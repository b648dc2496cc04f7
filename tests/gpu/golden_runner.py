"""Child process: the golden DSV4 on vLLM's CUDA path in one engine, one JSON line out.

    python -m tests.gpu.golden_runner SPEC_JSON

SPEC: {"model_dir", "k": MTP draft tokens (0 = none), "eager": bool, "batches": [1, 8],
"long": bool (also prompts over 2048 tokens, so the ratio-4 layers' indexer kernels run),
"engine": {extra engine kwargs}}. The engine takes the gpu-golden preset's arguments
(DSV4_GOLDEN_PRESET, set by tests/gpu/conftest.py). For each batch it records the texts,
whether each is the designed one and how the spec-decode counters moved; then what the
engine runs (CUDA graph mode, attention backend, MoE method, HC path) and the plugin's
status table as this engine process saw it.
"""

import json
import os
import sys
import time

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine and worker in this process

from serving.golden.golden_engine import golden_engine_kwargs, mtp_config  # noqa: E402
from serving.golden.writer import read_design  # noqa: E402
from tests.support.engine_facts import engine_facts  # noqa: E402
from tests.support.golden_prompts import MTP_MAX_TOKENS, mtp_prompts, prompt_of  # noqa: E402
from tests.support.mtp_runner import counters, delta  # noqa: E402

# Over 2048 tokens: with index_topk 512 shorter prompts skip the indexer kernels in eager
# mode, so a config could pass short tests and still fail there.
LONG_WORDS = (2300, 2100)
MIXED_WORDS = (1, 3, 40, 129, 260, 7, 513, 2300)
LONG_MAX_TOKENS = 16


def generate(llm, params, prompts: list[str], design, max_tokens: int) -> dict:
    before = counters(llm)
    outs = llm.generate(prompts, params, use_tqdm=False)
    texts = [o.outputs[0].text for o in outs]
    return {
        "prompt_tokens": [len(o.prompt_token_ids) for o in outs],
        "texts": texts,
        "texts_ok": [
            t == design.continuation(p, max_tokens) for t, p in zip(texts, prompts, strict=True)
        ],
        "counters": delta(counters(llm), before),
    }


def main(spec: dict) -> dict:
    import torch
    from vllm import LLM, SamplingParams

    from model_overrides.registry import REGISTRY

    design = read_design(spec["model_dir"])
    k = spec["k"]
    started = time.monotonic()
    llm = LLM(
        **golden_engine_kwargs(
            spec["model_dir"],
            speculative_config=mtp_config(k),
            enforce_eager=spec.get("eager", False),
            disable_log_stats=False,
            **spec.get("engine", {}),
        )
    )
    start_s = time.monotonic() - started
    params = SamplingParams(temperature=0, max_tokens=MTP_MAX_TOKENS, ignore_eos=True)
    runs = []
    for batch in spec.get("batches", [1, 8]):
        run = generate(llm, params, mtp_prompts(design, batch), design, MTP_MAX_TOKENS)
        runs.append({"batch": batch, "kind": "mtp_prompts", **run})
    if spec.get("long", True):
        long_params = SamplingParams(temperature=0, max_tokens=LONG_MAX_TOKENS, ignore_eos=True)
        long_prompts = [prompt_of(design, n, seed=43 + i) for i, n in enumerate(LONG_WORDS)]
        mixed = [prompt_of(design, n, seed=n) for n in MIXED_WORDS]
        for kind, prompts in (("long", long_prompts), ("mixed", mixed)):
            run = generate(llm, long_params, prompts, design, LONG_MAX_TOKENS)
            runs.append({"batch": len(prompts), "kind": kind, **run})
    return {
        "k": k,
        "start_seconds": round(start_s, 1),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "engine": engine_facts(llm),
        "runs": runs,
        "patches": {name: st.outcome.value for name, st in REGISTRY.results.items()},
        "patch_details": {name: st.detail for name, st in REGISTRY.results.items()},
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(json.loads(sys.argv[1]))))
