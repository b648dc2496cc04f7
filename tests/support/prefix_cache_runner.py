"""Child process: the same prompts served cold and then from DSV4's prefix cache.

    python -m tests.support.prefix_cache_runner SPEC_JSON

SPEC: {"model_dir", "library": "native"|"avx512"|"avx2", "k": MTP draft tokens (0 = none),
"engine": {extra engine kwargs}, "max_tokens": n, "cold_only": bool (a reference run:
each case's prompt served once after a cache reset, nothing warmed), "cases": [{"name",
"seed", "shared": words every prompt of the case has in common, "warm": [[words, branch],
...] served first, "prompt": [words, branch] the one measured}]}.

A prompt ``[n, b]`` is the case's first ``shared`` words followed by words of branch
``b``, cut at ``n`` words (one golden word is one token). For each case: reset the
prefix cache, serve the prompt cold, reset again, serve the warm prompts in order and
then the prompt again (the warm run). A case whose only warm prompt is its own prompt
skips that reset and re-serving: the cold run leaves the cache as serving it again
would. Each serving records the greedy token ids with their log-probs, how
``vllm:prefix_cache_queries`` / ``_hits`` moved, and, independently of those counters,
the first prompt position the target model computed (every earlier one came from the
cache).

Prints ``RESULT {...}`` with the patch outcomes, the kernel library loaded and whether
vLLM kept prefix caching on.
"""

import json
import os
import sys

COUNTERS = ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits")
_FORWARDED: list[int] = []  # the smallest position of each target forward pass


def _record_positions(worker) -> None:
    def hook(module, args, kwargs) -> None:
        positions = kwargs.get("positions", args[1] if len(args) > 1 else None)
        if positions is not None and positions.numel():
            _FORWARDED.append(int(positions.min()))

    worker.model_runner.model.register_forward_pre_hook(hook, with_kwargs=True)


def _words(design, case: dict, length: int, branch: int) -> str:
    from tests.support.golden_prompts import prompt_of

    shared = prompt_of(design, case["shared"], seed=case["seed"]).split()
    tail = prompt_of(design, max(length - case["shared"], 0), seed=1000 * case["seed"] + branch)
    return " ".join((shared + tail.split())[:length])


def main(spec: dict) -> dict:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine and worker here
    if spec["library"] != "native":
        os.environ["DSV4_CPU_KERNEL_LIBRARY"] = spec["library"]
    from vllm import LLM, SamplingParams

    from model_overrides.kernels import kernel_library
    from model_overrides.registry import REGISTRY
    from serving.golden import GoldenDesign
    from serving.golden.golden_engine import golden_engine_kwargs, mtp_config

    kwargs = golden_engine_kwargs(spec["model_dir"], disable_log_stats=False, **spec["engine"])
    if spec.get("k"):
        kwargs["speculative_config"] = mtp_config(spec["k"])
    llm = LLM(**kwargs)
    llm.collective_rpc(_record_positions)
    params = SamplingParams(temperature=0.0, max_tokens=spec["max_tokens"], logprobs=1)
    design = GoldenDesign()

    def counters() -> dict[str, int]:
        return {m.name: m.value for m in llm.get_metrics() if m.name in COUNTERS}

    def serve(prompt: str) -> dict:
        before = counters()
        _FORWARDED.clear()
        out = llm.generate([prompt], params, use_tqdm=False)[0]
        after = counters()
        gen = out.outputs[0]
        return {
            "prompt_token_ids": list(out.prompt_token_ids),
            "first_computed_position": min(_FORWARDED) if _FORWARDED else None,
            "token_ids": list(gen.token_ids),
            "text": gen.text,
            "logprobs": [d[t].logprob for d, t in zip(gen.logprobs, gen.token_ids, strict=True)],
            **{name.split(":")[1]: after[name] - before.get(name, 0) for name in COUNTERS},
        }

    cases = {}
    for case in spec["cases"]:
        prompt = _words(design, case, *case["prompt"])
        llm.reset_prefix_cache()
        result = {"cold": serve(prompt)}
        if not spec.get("cold_only"):
            if case["warm"] != [case["prompt"]]:
                llm.reset_prefix_cache()
                result["warmers"] = [serve(_words(design, case, *w)) for w in case["warm"]]
            result["warm"] = serve(prompt)
        cases[case["name"]] = result
    return {
        "library": kernel_library.loaded(),
        "prefix_caching": llm.llm_engine.vllm_config.cache_config.enable_prefix_caching,
        "patches": {name: st.outcome.value for name, st in REGISTRY.results.items()},
        "cases": cases,
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(json.loads(sys.argv[1]))), flush=True)
