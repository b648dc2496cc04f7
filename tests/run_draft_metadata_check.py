"""Child process: MTP decoding with an in-process engine, checking every token->request
mapping DSV4's metadata builders receive against the current query layout.

Prints one JSON line: mismatching mappings seen, acceptance counters, NaN-free output.
"""

import json
import os
import sys

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine and worker in this process

from serving.golden import GoldenDesign  # noqa: E402
from serving.golden_engine import golden_engine_kwargs  # noqa: E402

if __name__ == "__main__":
    import torch
    from vllm import LLM, SamplingParams
    from vllm.v1.attention.backend import CommonAttentionMetadata

    from model_overrides.kernels.dsv4_metadata import token_to_req_indices

    model_dir, k, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    spec = {"method": "mtp", "num_speculative_tokens": k}
    llm = LLM(**golden_engine_kwargs(model_dir, speculative_config=spec, disable_log_stats=False))
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
    design = GoldenDesign()
    prompts = [" ".join(design.words[3 * i : 3 * i + 3 + i]) for i in range(batch)]
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=48), use_tqdm=False)
    counters = {
        m.name: getattr(m, "value", None) or getattr(m, "values", None) for m in llm.get_metrics()
    }
    texts_ok = [
        o.outputs[0].text == design.continuation(p, 48) for o, p in zip(outs, prompts, strict=True)
    ]
    print("RESULT " + json.dumps({"seen": seen, "texts_ok": texts_ok, "counters": counters}))
