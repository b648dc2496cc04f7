"""Child process: the golden DSV4 with MTP in an in-process engine, one JSON line out.

For each batch size it decodes a batch of prompts greedily and records whether the
texts are the golden ones and how the engine's spec-decode counters moved. Every
token->request mapping DSV4's metadata builders receive is compared with a fresh
mapping of the current query layout (stale ones are counted).

    python -m tests.support.mtp_runner MODEL_DIR K BATCH[@T][,BATCH[@T]...] [TEMPERATURE]

``BATCH@T`` decodes that batch at temperature T (several sampling settings, one engine
start); the others take TEMPERATURE (default 0, greedy).
"""

import json
import os
import sys

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine and worker in this process

from serving.golden.golden_engine import golden_engine_kwargs, mtp_config  # noqa: E402
from serving.golden.writer import read_design  # noqa: E402
from tests.support.golden_prompts import CPU_MTP_MAX_TOKENS, mtp_prompts  # noqa: E402

SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
)


def counters(llm) -> dict:
    out = {}
    for m in llm.get_metrics():
        if m.name in SPEC_COUNTERS:
            out[m.name] = list(m.values) if hasattr(m, "values") else m.value
    return out


def delta(after: dict, before: dict) -> dict:
    out = {}
    for name, value in after.items():
        prev = before.get(name, 0 if not isinstance(value, list) else [0] * len(value))
        out[name] = (
            [a - b for a, b in zip(value, prev, strict=True)]
            if isinstance(value, list)
            else value - prev
        )
    return out


def fused_flags(llm) -> list[bool]:
    def flags(worker) -> list[bool]:
        modules = list(worker.model_runner.model.modules()) + list(
            worker.model_runner.drafter.model.modules()
        )
        return sorted({m.use_fused_mhc for m in modules if hasattr(m, "use_fused_mhc")})

    return llm.collective_rpc(flags)[0]


if __name__ == "__main__":
    import torch
    from vllm import LLM, SamplingParams
    from vllm.v1.attention.backend import CommonAttentionMetadata

    from model_overrides.kernels import kernel_library
    from model_overrides.kernels.dsv4_metadata import token_to_req_indices
    from model_overrides.registry import REGISTRY

    model_dir, k = sys.argv[1], int(sys.argv[2])
    default_temperature = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    batches = [
        (int(b), float(t) if t else default_temperature)
        for b, _, t in (item.partition("@") for item in sys.argv[3].split(","))
    ]
    design = read_design(model_dir)
    llm = LLM(
        **golden_engine_kwargs(model_dir, speculative_config=mtp_config(k), disable_log_stats=False)
    )
    seen = {"calls": 0, "stale": 0}
    installed = CommonAttentionMetadata.token_to_req_indices

    def checked(self, buffer):
        got = installed(self, buffer)
        fresh = token_to_req_indices(
            self.query_start_loc,
            torch.empty_like(buffer),
            int(self.query_start_loc_cpu[-1]),
            got.shape[0],
        )
        seen["calls"] += 1
        seen["stale"] += int(not torch.equal(got, fresh))
        return got

    CommonAttentionMetadata.token_to_req_indices = checked
    runs = []
    for batch, temperature in batches:
        prompts = mtp_prompts(design, batch)
        before = counters(llm)
        params = SamplingParams(temperature=temperature, max_tokens=CPU_MTP_MAX_TOKENS, seed=1)
        outs = llm.generate(prompts, params, use_tqdm=False)
        texts = [o.outputs[0].text for o in outs]
        runs.append(
            {
                "batch": batch,
                "temperature": temperature,
                "texts": texts,
                "texts_ok": [
                    t == design.continuation(p, CPU_MTP_MAX_TOKENS)
                    for t, p in zip(texts, prompts, strict=True)
                ],
                "counters": delta(counters(llm), before),
            }
        )
    result = {
        "library": kernel_library.loaded(),
        "runs": runs,
        "seen": seen,
        "patches": {name: st.outcome.value for name, st in REGISTRY.results.items()},
        "use_fused_mhc": fused_flags(llm),
    }
    print("RESULT " + json.dumps(result))
