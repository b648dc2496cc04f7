"""Child process: a golden checkpoint (the FP8 one, or any) with MTP in one engine, one JSON line.

    python -m tests.support.fp8_runner MODEL_DIR ['{"enforce_eager": true}']

The engine takes golden_engine_kwargs (the preset DSV4_GOLDEN_PRESET names) with MTP k=2,
then the JSON overrides. It decodes the 8 MTP prompts greedily and records the texts,
whether each is the designed one, how the spec-decode counters moved and what the design
expects, and which quantization vLLM really runs, read from the engine's own modules: the
quant config, the linear method and kernel of an attention projection, a shared expert and
the MTP e_proj, and the routed experts' MoE method, backend and kernel. So a test can
assert the FP8 path was used rather than a bf16 one. A failing step records its error and
the rest still runs; the RESULT line is always printed. Writes nothing.
"""

import dataclasses
import json
import os
import sys
import time
import traceback

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine and worker in this process

from serving.golden.golden_engine import golden_engine_kwargs, mtp_config  # noqa: E402
from serving.golden.writer import read_design  # noqa: E402
from tests.support.golden_prompts import (  # noqa: E402
    MTP_MAX_TOKENS,
    expected_counters,
    mtp_prompts,
)
from tests.support.mtp_runner import counters, delta  # noqa: E402

K = 2
BATCH = 8
# Module name suffix -> what it stands for, first match in each model.
_LINEARS = {
    "attn.fused_wqa_wkv": "attention_linear",
    "shared_experts.gate_up_proj": "shared_expert_linear",
    "e_proj": "mtp_e_proj",
}


def _progress(message: str) -> None:
    print(f"[fp8_runner] {message}", file=sys.stderr, flush=True)


def _error() -> str:
    return traceback.format_exc(limit=-3)[-2000:]


def _cls(value: object) -> str | None:
    """The class name of an instance (or of a class itself), None for None."""
    if value is None:
        return None
    return value.__name__ if isinstance(value, type) else type(value).__name__


def _tensor(module, attr: str) -> dict | None:
    tensor = getattr(module, attr, None)
    if tensor is None:
        return None
    return {"dtype": str(tensor.dtype), "shape": list(tensor.shape)}


def _linear(module) -> dict:
    method = module.quant_method
    return {
        "method": type(method).__name__,
        "kernel": _cls(getattr(method, "fp8_linear", None)),
        "use_deep_gemm": getattr(method, "use_deep_gemm", None),
        "weight": _tensor(module, "weight"),
        "weight_scale_inv": _tensor(module, "weight_scale_inv"),
    }


def _experts(module) -> dict:
    method = module.quant_method
    kernel = getattr(method, "moe_kernel", None)
    return {
        "method": type(method).__name__,
        "backend": getattr(getattr(method, "fp8_backend", None), "value", None),
        "experts_cls": _cls(getattr(method, "experts_cls", None)),
        "fused_experts": _cls(getattr(kernel, "fused_experts", None)),
        "block_shape": getattr(method, "moe_block_shape", None),
        "w13_weight": _tensor(module, "w13_weight"),
        "w13_weight_scale_inv": _tensor(module, "w13_weight_scale_inv"),
    }


def quant_facts(worker) -> dict:
    """What the worker's target and MTP draft models run, module by module (in the worker)."""
    from vllm.config import set_current_vllm_config

    runner = worker.model_runner
    quant = runner.vllm_config.quant_config
    out: dict = {
        "quant_config": None if quant is None else type(quant).__name__,
        # vLLM turns DeepGEMM's ue8m0 path on from the checkpoint's scale_fmt.
        "VLLM_USE_DEEP_GEMM_E8M0": os.environ.get("VLLM_USE_DEEP_GEMM_E8M0"),
    }
    if quant is not None:
        with set_current_vllm_config(runner.vllm_config):  # expert_dtype reads hf_config
            out |= {
                "quant_method": quant.get_name(),
                "expert_dtype": getattr(quant, "expert_dtype", None),
                "is_scale_e8m0": getattr(quant, "is_scale_e8m0", None),
                "weight_block_size": getattr(quant, "weight_block_size", None),
            }
    # Model Runner V1 holds the MTP proposer as `drafter`; V2 (vLLM >= 0.34) as
    # `speculator` (vllm/v1/worker/gpu/model_runner.py, spec_decode/speculator.py).
    drafter = getattr(runner, "drafter", None) or getattr(runner, "speculator", None)
    models = {"target": runner.model, "draft": getattr(drafter, "model", None)}
    for role, model in models.items():
        if model is None:
            continue
        facts: dict = {}
        for name, module in model.named_modules():
            for suffix, key in _LINEARS.items():
                if key not in facts and name.endswith(suffix) and hasattr(module, "quant_method"):
                    facts[key] = {"module": name, **_linear(module)}
            if "experts" not in facts and hasattr(module, "w13_weight"):
                facts["experts"] = {"module": name, **_experts(module)}
        out[role] = facts
    return out


def main(model_dir: str, overrides: dict) -> dict:
    from vllm import LLM, SamplingParams

    design = read_design(model_dir)
    kwargs = {"speculative_config": mtp_config(K), "disable_log_stats": False} | overrides
    k = (kwargs.get("speculative_config") or {}).get("num_speculative_tokens", 0)
    result: dict = {
        "model_dir": model_dir,
        "design": dataclasses.asdict(design),
        "k": k,
        "errors": {},
    }
    _progress(f"starting the engine on {model_dir} (k={k}, overrides {overrides})")
    started = time.monotonic()
    try:
        llm = LLM(**golden_engine_kwargs(model_dir, **kwargs))
    except Exception:
        result["errors"]["engine"] = _error()
        return result
    result["start_seconds"] = round(time.monotonic() - started, 1)
    _progress(f"engine up in {result['start_seconds']} s; reading what it runs")
    try:
        facts = llm.collective_rpc(quant_facts)  # one per tensor-parallel rank
        result["quant"], result["ranks"] = facts[0], len(facts)
    except Exception:
        result["errors"]["quant"] = _error()
    prompts = mtp_prompts(design, BATCH)
    params = SamplingParams(temperature=0, max_tokens=MTP_MAX_TOKENS, ignore_eos=True)
    _progress(f"decoding {len(prompts)} prompts, {MTP_MAX_TOKENS} tokens each")
    try:
        before, started = counters(llm), time.monotonic()
        outs = llm.generate(prompts, params, use_tqdm=False)
        result["generate_seconds"] = round(time.monotonic() - started, 2)
        texts = [o.outputs[0].text for o in outs]
        result["texts"] = texts
        result["texts_ok"] = [
            t == design.continuation(p, MTP_MAX_TOKENS) for t, p in zip(texts, prompts, strict=True)
        ]
        result["counters"] = delta(counters(llm), before)
        result["expected_counters"] = expected_counters(design, prompts, k) if k else {}
    except Exception:
        result["errors"]["generate"] = _error()
    _progress(f"done: texts_ok {result.get('texts_ok')}, errors {sorted(result['errors'])}")
    return result


if __name__ == "__main__":
    overrides = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    result = main(sys.argv[1], overrides)
    print("RESULT " + json.dumps(result), flush=True)
    sys.exit(1 if result["errors"] else 0)
