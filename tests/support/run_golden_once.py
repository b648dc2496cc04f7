"""Generate once with vllm.LLM on a golden checkpoint and print the text (a child process)."""

import json
import sys

from serving.golden.golden_engine import golden_engine_kwargs

if __name__ == "__main__":
    from vllm import LLM, SamplingParams

    model_dir, prompt = sys.argv[1], sys.argv[2]
    llm = LLM(**golden_engine_kwargs(model_dir))
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
    print("RESULT " + json.dumps(out[0].outputs[0].text))
