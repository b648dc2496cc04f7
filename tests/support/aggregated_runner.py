"""Greedy texts of one engine alone (vllm.LLM, no speculation) on a golden checkpoint, for
prompts given as JSON (a child process): the aggregated reference of the P/D tests."""

import json
import sys

from serving.golden.golden_engine import golden_engine_kwargs

if __name__ == "__main__":
    from vllm import LLM, SamplingParams

    model_dir, prompts, max_tokens = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    llm = LLM(**golden_engine_kwargs(model_dir))
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    outs = llm.generate(prompts, params, use_tqdm=False)
    print("RESULT " + json.dumps([o.outputs[0].text for o in outs]))
