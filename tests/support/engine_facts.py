"""What a running vLLM engine executes, read from its own objects (for the GPU tests' records).

Called in the engine's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): the MoE method and
expert kernel class, the attention class, the DSV4 decoder's HC path (ours when the
dsv4-cuda-hc-path switch is on), the CUDA graph and compilation modes, the KV dtype.
"""


def engine_facts(llm) -> dict:
    """Facts from the worker (its model) and from the engine config."""

    def facts(worker) -> dict:
        model = worker.model_runner.model
        out: dict = {"device": str(next(model.parameters()).device)}
        for module in model.modules():
            # The routed experts (FusedMoE holds w13_weight), not the shared expert's linears.
            if "moe" not in out and hasattr(module, "w13_weight"):
                method = module.quant_method
                out["moe"] = type(method).__name__
                kernel = getattr(method, "moe_kernel", None) or getattr(module, "moe_kernel", None)
                experts = getattr(kernel, "fused_experts", None)
                if experts is not None:
                    out["moe_experts"] = type(experts).__name__
            if "attention" not in out and type(module).__name__.endswith("Attention"):
                impl = getattr(module, "impl", None) or getattr(module, "mla_attn", None)
                out["attention"] = type(module).__name__ + (
                    f"/{type(impl).__name__}" if impl is not None else ""
                )
            if "decoder_forward" not in out and type(module).__name__ == "DeepseekV4DecoderLayer":
                fwd = type(module).forward
                out["decoder_forward"] = (
                    "inline" if getattr(fwd, "_dsv4_inline_hc", 0) else ("deferred")
                )
        return out

    def breaks(worker) -> bool | None:
        from model_overrides.compat.breakable_graphs import attention_breaks_during_capture

        return attention_breaks_during_capture()

    def config() -> dict:
        cfg = llm.llm_engine.vllm_config
        return {
            "cudagraph_mode": str(cfg.compilation_config.cudagraph_mode),
            "compilation_mode": str(cfg.compilation_config.mode),
            "enforce_eager": cfg.model_config.enforce_eager,
            "kv_cache_dtype": cfg.cache_config.cache_dtype,
        }

    # A record, not a check: a fact that cannot be read says why instead of failing the run.
    result: dict = {}
    for key, read in (
        ("worker", lambda: llm.collective_rpc(facts)[0]),
        ("attention_breaks_during_capture", lambda: llm.collective_rpc(breaks)[0]),
        ("config", config),
    ):
        try:
            value = read()
        except Exception as exc:  # noqa: BLE001 - recorded for the report
            result[f"{key}_error"] = f"{type(exc).__name__}: {exc}"
            continue
        if isinstance(value, dict):
            result |= value
        else:
            result[key] = value
    return result
