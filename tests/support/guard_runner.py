"""Child process: the families checkpoint, MTP k=2, the speculation guard from the env.

    python -m tests.support.guard_runner MODEL_DIR PLAN

PLAN is a comma list of ``family:batch`` phases (e.g. ``high:1,zero:4,mixed:4``), each
one ``generate`` call of that many greedy requests (``mixed``: high and zero in turn).
Records per phase whether every text is the designed one, the spec-decode counters'
movement, and the guard's decisions (its ``DSV4_SPEC_GUARD_LOG``) and last state. One
JSON line out.
"""

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from model_overrides.guard.spec_guard_config import LOG_ENV, STATE_ENV, from_environment
from serving.golden.golden_engine import golden_engine_kwargs, mtp_config
from serving.golden.writer import read_design
from tests.support.guard_plan import MAX_TOKENS, K, prompts_of
from tests.support.mtp_runner import counters, delta

MAX_NUM_SEQS = 16  # the plans' largest phase is 8


def main(model_dir: str, plan: str) -> dict:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine and worker in this process
    from vllm import LLM, SamplingParams

    work = tempfile.mkdtemp(prefix="guard-runner-")
    os.environ.setdefault(LOG_ENV, os.path.join(work, "decisions.jsonl"))
    os.environ.setdefault(STATE_ENV, os.path.join(work, "state.json"))
    design = read_design(model_dir)
    # As the preset builds it: beside the guard, vLLM's table that holds every k (for the
    # GPU's graphs); the scheduler must run the guard's k, not the table's.
    spec = mtp_config(K)
    if table := from_environment().graph_table(K, MAX_NUM_SEQS):
        spec["num_speculative_tokens_per_batch_size"] = table
    llm = LLM(
        **golden_engine_kwargs(
            model_dir, speculative_config=spec, max_num_seqs=MAX_NUM_SEQS, disable_log_stats=False
        )
    )
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    phases = []
    for phase in plan.split(","):
        family, _, batch = phase.partition(":")
        prompts = prompts_of(design, family, int(batch or 1))
        before, started = counters(llm), time.time()
        texts = [o.outputs[0].text for o in llm.generate(prompts, params, use_tqdm=False)]
        phases.append(
            {
                "family": family,
                "batch": len(prompts),
                "started": started,
                "ended": time.time(),
                "texts_ok": [
                    t == design.continuation(p, MAX_TOKENS)
                    for t, p in zip(texts, prompts, strict=True)
                ],
                "counters": delta(counters(llm), before),
            }
        )
    log_path = os.environ[LOG_ENV]
    decisions = []
    if os.path.exists(log_path):
        with open(log_path) as f:
            decisions = [json.loads(line) for line in f]
    state_path = os.environ[STATE_ENV]
    state = json.loads(Path(state_path).read_text()) if os.path.exists(state_path) else None
    return {"phases": phases, "decisions": decisions, "state": state}


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], sys.argv[2])), flush=True)
