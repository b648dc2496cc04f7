"""Child process: per-position log-probabilities of one model on one kernel path.

    python -m tests.support.kernel_path_runner SPEC_JSON

SPEC: {"model_dir", "library": "native"|"avx512"|"avx2", "emulate": path or null,
"perturb": {"op": name, "factor": f} or null, "engine": {extra engine kwargs},
"prompts": [...], "max_tokens": n, "k": MTP draft tokens (0 = none),
"prompt_logprobs": n (optional: also each prompt position's top-n distribution; -1 = the
whole vocabulary, which needs engine {"max_logprobs": -1}), "facts": bool (optional: also
what the engine runs, tests/support/engine_facts.py)}.

Prints ``RESULT {...}``: per prompt the teacher-forced log-probability of every prompt
token after the first (prefill: chunked prefill, compression, the indexer) and the
greedy continuation with its log-probabilities and each step's runner-up's (decode), the
prompt's token ids, plus the kernel library this process loaded and the patch outcomes. Set
DSV4_OVERRIDES_DISABLE in the child's environment to run with a patch off.
"""

import ctypes
import json
import os
import sys


def _perturb(op_name: str, factor: float) -> None:
    """Scale one eager op's output (tests only): the comparison must notice."""
    from dataclasses import replace

    from model_overrides.kernels import cpu_ops

    for group in cpu_ops.GROUPS:
        module = __import__(f"model_overrides.kernels.cpu_ops.{group}", fromlist=["OPS"])
        ops = []
        for op in module.OPS:
            if op.name == op_name:
                original = op.impl

                def scaled(*args, _original=original):
                    result = _original(*args)
                    if result is None:
                        args[0].mul_(factor)  # an in-place op: its output argument
                        return None
                    return result.mul_(factor)

                op = replace(op, impl=scaled)
            ops.append(op)
        module.OPS = tuple(ops)


def _substitute(groups: list[str]) -> None:
    """Run our eager versions of these groups in place of the native ops (diagnosis)."""
    import torch
    import vllm._custom_ops  # noqa: F401 - load the native library first

    from model_overrides.kernels.cpu_ops import groups as all_groups

    global _IMPL_LIBRARY
    _IMPL_LIBRARY = torch.library.Library("_C", "IMPL")
    for group in groups:
        for op in all_groups()[group]:
            _IMPL_LIBRARY.impl(op.name, op.impl, "CPU")


_IMPL_LIBRARY = None


def main(spec: dict) -> dict:
    if spec.get("emulate"):
        ctypes.CDLL(spec["emulate"])  # before torch: native `_C` on a CPU without bf16
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine and worker here
    if spec["library"] != "native":
        os.environ["DSV4_CPU_KERNEL_LIBRARY"] = spec["library"]
    if spec.get("perturb"):
        _perturb(spec["perturb"]["op"], spec["perturb"]["factor"])

    if spec.get("substitute"):
        _substitute(spec["substitute"])
    from vllm import LLM, SamplingParams

    from model_overrides.kernels import kernel_library
    from model_overrides.registry import REGISTRY
    from serving.golden.golden_engine import golden_engine_kwargs, mtp_config

    kwargs = golden_engine_kwargs(spec["model_dir"], **spec.get("engine", {}))
    if spec.get("k"):
        kwargs["speculative_config"] = mtp_config(spec["k"])
    llm = LLM(**kwargs)
    top = spec.get("prompt_logprobs", 0)
    params = SamplingParams(
        temperature=0.0, max_tokens=spec["max_tokens"], logprobs=2, prompt_logprobs=top
    )
    results = []
    for out in llm.generate(spec["prompts"], params, use_tqdm=False):
        ids = out.prompt_token_ids
        prompt_lp = [d[t].logprob for d, t in zip(out.prompt_logprobs[1:], ids[1:], strict=True)]
        gen = out.outputs[0]
        gen_lp = [d[t].logprob for d, t in zip(gen.logprobs, gen.token_ids, strict=True)]
        # The best other token at each decode step: how near a tie greedy decode was.
        runner_up = [
            max((lp.logprob for u, lp in d.items() if u != t), default=None)
            for d, t in zip(gen.logprobs, gen.token_ids, strict=True)
        ]
        result = {
            "prompt_logprobs": prompt_lp,
            "prompt_token_ids": list(ids),
            "text": gen.text,
            "token_ids": list(gen.token_ids),
            "logprobs": gen_lp,
            "runner_up_logprobs": runner_up,
        }
        if top:  # {token id: log p} per prompt position after the first
            result["prompt_distributions"] = [
                {t: lp.logprob for t, lp in d.items()} for d in out.prompt_logprobs[1:]
            ]
        results.append(result)
    facts = {}
    if spec.get("facts"):
        from tests.support.engine_facts import engine_facts

        facts["engine"] = engine_facts(llm)
    return {
        **facts,
        "library": kernel_library.loaded(),
        "patches": {name: st.outcome.value for name, st in REGISTRY.results.items()},
        "results": results,
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(json.loads(sys.argv[1]))))
