"""Import DSV4's model modules off the CPU only the way vLLM itself would.

On CUDA vLLM runs DSV4 with breakable CUDA graphs: ``VllmConfig`` sets
``VLLM_USE_BREAKABLE_CUDAGRAPH=1`` for the architectures in
``DEFAULT_BREAKABLE_CUDAGRAPH_ARCHITECTURES`` (vllm/config/vllm.py), and DSV4's attention
reads that variable once, when its module is imported: ``@eager_break_during_capture``
(vllm/compilation/breakable_cudagraph.py) returns the bare function when it is unset, so the
sparse indexer and FlashMLA get captured into the piecewise graphs with a dummy batch's
metadata. Our plugin loads before that config exists (``EngineArgs.__post_init__``), and an
engine in the same process (``vllm.LLM`` with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, or
``vllm serve``'s forked engine core) then keeps the module as first imported.

So the plugin reads DSV4's model sources instead of importing them off the CPU, and where a
patch must import them (a needed fix, a test switch) it first sets what vLLM would set for DSV4
on this platform. Only DSV4 patches call this: a process that imports DSV4's modules serves DSV4.
"""

import importlib
import os

ENV = "VLLM_USE_BREAKABLE_CUDAGRAPH"
ARCH = "DeepseekV4ForCausalLM"


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def may_import_dsv4_models() -> bool:
    """Whether a probe may import vLLM's DSV4 model modules without this preparation."""
    return _on_cpu()


def prepare_dsv4_import() -> str | None:
    """Set vLLM's own breakable-graph default for DSV4 before importing its modules; returns
    the value set (None when nothing was needed or vLLM has no such default)."""
    if _on_cpu() or ENV in os.environ:
        return None
    config = importlib.import_module("vllm.config.vllm")
    default = getattr(config, "default_breakable_cudagraph_architectures", None)
    if default is None or ARCH not in default():
        return None
    os.environ[ENV] = "1"
    return "1"


def attention_breaks_during_capture() -> bool | None:
    """Whether DSV4's sparse attention is an eager break in CUDA-graph capture (None: not
    imported or not this layout). For the GPU tests' records."""
    import sys

    attention = sys.modules.get("vllm.models.deepseek_v4.attention")
    cls = getattr(attention, "DeepseekV4Attention", None)
    fn = vars(cls).get("_sparse_indexer_and_attn") if cls else None
    return None if fn is None else hasattr(fn, "__wrapped__")
