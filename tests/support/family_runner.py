"""Child process: the golden checkpoint with designed-acceptance families, MTP k drafts.

    python -m tests.support.family_runner MODEL_DIR K

One engine; for each family ("high", "half", "zero") a batch of 4 prompts whose walks stay
in the family's arc, decoded greedily. Records the texts, whether each is the designed
one, the spec-decode counters' movement and what the design expects. One JSON line out.
"""

import json
import os
import sys

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine and worker in this process

from serving.golden.design import FAMILIES  # noqa: E402
from serving.golden.golden_engine import golden_engine_kwargs, mtp_config  # noqa: E402
from serving.golden.writer import read_design  # noqa: E402
from tests.support.golden_prompts import CPU_MTP_MAX_TOKENS, expected_counters  # noqa: E402
from tests.support.mtp_runner import counters, delta  # noqa: E402

BATCH = 4


def main(model_dir: str, k: int) -> dict:
    from vllm import LLM, SamplingParams

    design = read_design(model_dir)
    llm = LLM(
        **golden_engine_kwargs(model_dir, speculative_config=mtp_config(k), disable_log_stats=False)
    )
    max_tokens = min(CPU_MTP_MAX_TOKENS, design.family_span(offset=BATCH - 1, k=k))
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    out: dict = {"k": k, "max_tokens": max_tokens, "families": {}}
    for family in FAMILIES:
        prompts = [design.family_prompt(family, offset) for offset in range(BATCH)]
        before = counters(llm)
        texts = [o.outputs[0].text for o in llm.generate(prompts, params, use_tqdm=False)]
        out["families"][family] = {
            "texts_ok": [
                t == design.continuation(p, max_tokens) for t, p in zip(texts, prompts, strict=True)
            ],
            "counters": delta(counters(llm), before),
            "expected": expected_counters(design, prompts, k, max_tokens),
        }
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], int(sys.argv[2]))), flush=True)
