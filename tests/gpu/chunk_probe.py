"""Diagnosis (GPU): DSV4 prefill of prompts that end a few tokens past a chunk boundary.

    python3 -m tests.gpu.chunk_probe MODEL_DIR CHUNK CACHING LENGTHS...

One in-process engine (gpu-golden's arguments, MTP off) with max_num_batched_tokens=CHUNK
serves each prompt length alone, caching on or off; prints one line per length.
CHUNK_PROBE_ENGINE (JSON) adds engine arguments, e.g. {"enforce_eager": true}.
"""

import json
import os
import sys
import traceback

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("DSV4_GOLDEN_PRESET", "gpu-golden")

if __name__ == "__main__":
    from vllm import LLM, SamplingParams

    from serving.golden import GoldenDesign, write_golden_model
    from serving.golden.golden_engine import golden_engine_kwargs
    from tests.support.golden_prompts import prompt_of

    model, chunk, caching = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    if not os.path.exists(os.path.join(model, "config.json")):
        write_golden_model(model, GoldenDesign())
    engine = {"max_num_batched_tokens": chunk, "enable_prefix_caching": caching}
    engine |= {"kv_cache_memory_bytes": 2 << 30, "gpu_memory_utilization": 0.1, "max_num_seqs": 8}
    engine |= json.loads(os.environ.get("CHUNK_PROBE_ENGINE", "{}"))
    llm = LLM(**golden_engine_kwargs(model, **engine))
    design = GoldenDesign()
    for length in map(int, sys.argv[4:]):
        prompt = prompt_of(design, length, seed=length)
        try:
            params = SamplingParams(temperature=0, max_tokens=4)
            out = llm.generate([prompt], params, use_tqdm=False)
            ok = out[0].outputs[0].text == design.continuation(prompt, 4)
            print(f"PROBE {engine} length={length}: ok text={ok}", flush=True)
        except Exception:
            print(f"PROBE {engine} length={length}: FAILED", flush=True)
            traceback.print_exc()
            break
