"""One engine alone (vllm.LLM, no speculation) on a golden checkpoint as the reference for
texts another layout served (a child process): its own greedy text for each prompt and,
for each served text that parts from it, how far that text is from greedy.

Input (JSON): ``[{"prompt": str, "served": [str, ...]}, ...]``. Output per prompt:
``{"reference": str, "verdicts": [None | {"tokens": n, "gaps": [...]}, ...]}``, a verdict
for each served text that differs from the reference: the engine teacher-forced on prompt +
text, and for every text token the top token's log-prob minus its own (0 where it is top).

Used where two engines may part at a near-tie: greedy decoding picks between tokens whose
log-probs bf16 rounding can reorder, so exact text tells a KV error from a near-tie only
where it agrees. One engine start serves both steps."""

import json
import sys

from serving.golden.golden_engine import golden_engine_kwargs


def _gaps(out, start: int, tail: list[int]) -> list[float]:
    gaps = []
    for position, token in zip(range(start, start + len(tail)), tail, strict=True):
        ranked = out.prompt_logprobs[position]
        gaps.append(max(lp.logprob for lp in ranked.values()) - ranked[token].logprob)
    return gaps


if __name__ == "__main__":
    from vllm import LLM, SamplingParams

    model_dir, cases, max_tokens = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    llm = LLM(**golden_engine_kwargs(model_dir))
    tokenizer = llm.get_tokenizer()
    greedy = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    outs = llm.generate([c["prompt"] for c in cases], greedy, use_tqdm=False)
    references = [o.outputs[0].text for o in outs]

    parted, requests, spans = [], [], []
    for i, (case, reference) in enumerate(zip(cases, references, strict=True)):
        head = tokenizer(case["prompt"]).input_ids
        for j, text in enumerate(case["served"]):
            if text == reference:
                continue
            tail = tokenizer(text, add_special_tokens=False).input_ids
            parted.append((i, j))
            requests.append({"prompt_token_ids": head + tail})
            spans.append((len(head), tail))
    forced = SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=1)
    judged = llm.generate(requests, forced, use_tqdm=False) if requests else []

    result = [
        {"reference": r, "verdicts": [None] * len(c["served"])}
        for c, r in zip(cases, references, strict=True)
    ]
    for (i, j), out, (start, tail) in zip(parted, judged, spans, strict=True):
        result[i]["verdicts"][j] = {"tokens": len(tail), "gaps": _gaps(out, start, tail)}
    print("RESULT " + json.dumps(result))
