"""How far each given continuation is from greedy, by one engine (vllm.LLM, no speculation)
teacher-forced on prompt + continuation (a child process): for every continuation token,
the top token's log-probability minus its own (0 where it is the top one).

Used where two engines may part at a near-tie: greedy decoding picks between tokens whose
log-probs bf16 rounding can reorder, so exact text tells a KV error from a near-tie only
where it agrees."""

import json
import sys

from serving.golden.golden_engine import golden_engine_kwargs

if __name__ == "__main__":
    from vllm import LLM, SamplingParams

    model_dir, pairs = sys.argv[1], json.loads(sys.argv[2])
    llm = LLM(**golden_engine_kwargs(model_dir))
    tokenizer = llm.get_tokenizer()
    requests, spans = [], []
    for prompt, continuation in pairs:
        head = tokenizer(prompt).input_ids
        tail = tokenizer(continuation, add_special_tokens=False).input_ids
        requests.append({"prompt_token_ids": head + tail})
        spans.append((len(head), tail))
    params = SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=1)
    outs = llm.generate(requests, params, use_tqdm=False)
    verdicts = []
    for out, (start, tail) in zip(outs, spans, strict=True):
        gaps = []
        for position, token in zip(range(start, start + len(tail)), tail, strict=True):
            ranked = out.prompt_logprobs[position]
            gaps.append(max(lp.logprob for lp in ranked.values()) - ranked[token].logprob)
        verdicts.append({"tokens": len(tail), "gaps": gaps})
    print("RESULT " + json.dumps(verdicts))
