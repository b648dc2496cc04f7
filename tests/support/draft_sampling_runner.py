"""Child process: the spread golden checkpoint sampled at temperature 1 with MTP drafts.

    python -m tests.support.draft_sampling_runner MODEL_DIR K DRAFT_SAMPLE_METHOD

One engine with vLLM's ``draft_sample_method`` as given. A batch of seeded requests at
temperature 1 records how the spec-decode counters moved and, for every generated token,
which of the previous token's choices it was (0 the favourite, -1 none of them); one
request at temperature 0 records whether the greedy text is still the ring's. One JSON
line out.
"""

import json
import os
import sys
from collections import Counter

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine and worker in this process

from serving.golden.golden_engine import golden_engine_kwargs, mtp_config  # noqa: E402
from serving.golden.writer import read_design  # noqa: E402
from tests.support.golden_prompts import prompt_of  # noqa: E402
from tests.support.mtp_runner import counters, delta  # noqa: E402

REQUESTS = 16
MAX_TOKENS = 96
PROMPT_WORDS = 4


def main(model_dir: str, k: int, method: str) -> dict:
    from vllm import LLM, SamplingParams

    design = read_design(model_dir)
    llm = LLM(
        **golden_engine_kwargs(
            model_dir, speculative_config=mtp_config(k, method), disable_log_stats=False
        )
    )
    prompts = [prompt_of(design, PROMPT_WORDS, seed) for seed in range(REQUESTS)]
    params = [
        SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS, ignore_eos=True, seed=seed)
        for seed in range(REQUESTS)
    ]
    before = counters(llm)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    moved = delta(counters(llm), before)
    steps: Counter[int] = Counter()
    for prompt, output in zip(prompts, outputs, strict=True):
        last = design.token_ids(prompt)[-1]
        for token in output.outputs[0].token_ids:
            choices = design.choices(last)
            steps[choices.index(token) if token in choices else -1] += 1
            last = token
    greedy_prompt = prompts[0]
    greedy = llm.generate(
        [greedy_prompt],
        SamplingParams(temperature=0, max_tokens=24, ignore_eos=True),
        use_tqdm=False,
    )[0]
    return {
        "k": k,
        "draft_sample_method": method,
        "counters": moved,
        "choice_counts": {str(choice): n for choice, n in sorted(steps.items())},
        "greedy_text_ok": greedy.outputs[0].text == design.continuation(greedy_prompt, 24),
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], int(sys.argv[2]), sys.argv[3])), flush=True)
