"""speculative decoding: the CPU override of the rejection sampler's expand kernel.

vLLM 0.32's CPU fallback for ``rejection_sampler.expand_kernel`` converts its output
to an int64 copy and never writes the copy back. The kernel expands per-request
temperatures (float32) to per-token values, so with any temperature > 0 the
verifier divides the target logits by uninitialised memory: accepted drafts and
recovered tokens become random. Not DSV4-specific (ngram drafts show it too).
"""

import inspect
from typing import Any

import torch

from model_overrides.kernels.sampling import expand_to_tokens
from model_overrides.patches.module_attr import has_module, import_optional, is_cpu_platform
from model_overrides.registry import REGISTRY, Need, Patch, Probe

_CPU_IMPLS = "vllm.utils.cpu_triton_utils"
_SAMPLER = "vllm.v1.sample.rejection_sampler"
_KERNEL = f"{_SAMPLER}.expand_kernel"


def expands_floats(impl: Any) -> bool:
    out = torch.zeros(3, dtype=torch.float32)
    impl(out, torch.tensor([0.5, -1.0]), torch.tensor([1, 3]), -1.0, 1.0)
    return out.tolist() == [0.5, 1.0, 1.0]


def _writes_back(source: str) -> bool:
    """True when the implementation copies its int64 result back into ``output``."""
    return "output.copy_(" in source or "output[" in source


def probe() -> Probe:
    if not is_cpu_platform():
        return Probe(Need.NOT_APPLICABLE, "not the CPU platform: the Triton expand_kernel runs")
    impls = import_optional(_CPU_IMPLS)
    current = getattr(impls, "_expand_kernel_impl", None) if impls else None
    if current is None:
        if not has_module(_SAMPLER):  # vLLM 0.34: Model Runner V1 and its sampler are gone
            return Probe(Need.NOT_NEEDED, f"no {_SAMPLER} (V1) and no CPU expand fallback")
        return Probe(Need.NOT_APPLICABLE, f"no {_CPU_IMPLS}._expand_kernel_impl in this vLLM")
    if current is expand_to_tokens:
        return Probe(Need.ALREADY_APPLIED, "dtype-preserving expand in place")
    try:
        source = inspect.getsource(current)
    except OSError:
        return Probe(Need.UNRECOGNISED, "cannot read the CPU expand implementation")
    if "_ensure_int64(output)" not in source:
        return Probe(Need.UNRECOGNISED, "the CPU expand implementation has changed shape")
    if _writes_back(source):
        return Probe(Need.NOT_NEEDED, "the CPU expand copies its int64 result back")
    return Probe(Need.NEEDED, "CPU expand drops its result for non-int64 outputs (temperatures)")


def _registered_kernel() -> Any:
    """The dispatcher's stand-in for expand_kernel, once the CPU platform registered it
    (vllm/platforms/cpu.py, register_triton_kernel_overrides); else None."""
    dispatcher = import_optional("vllm.triton_utils.dispatcher")
    sampler = import_optional(_SAMPLER)
    kernel = getattr(sampler, "expand_kernel", None)
    override = getattr(dispatcher, "KernelOverride", None)
    return kernel if override is not None and isinstance(kernel, override) else None


def apply() -> None:
    impls = import_optional(_CPU_IMPLS)
    # The CPU platform registers this attribute with vLLM's kernel dispatcher when the
    # model runner starts; if that has happened already, register ours the same way.
    impls._expand_kernel_impl = expand_to_tokens
    if _registered_kernel() is not None:
        from vllm.triton_utils.dispatcher import register_kernels

        register_kernels({_KERNEL: expand_to_tokens})


def verify() -> str | None:
    impls = import_optional(_CPU_IMPLS)
    if impls._expand_kernel_impl is not expand_to_tokens:
        return "CPU expand implementation unchanged"
    if not expands_floats(expand_to_tokens):
        return "the replacement does not expand float values"
    kernel = _registered_kernel()
    if kernel is not None and kernel.func is not expand_to_tokens:
        return "the registered expand_kernel override is still upstream's"
    return None


REGISTRY.add(
    Patch(
        name="cpu-rejection-expand-dtype",
        override="deepseek_v4_mtp",
        summary="CPU rejection sampler expands float temperatures correctly",
        probe=probe,
        apply=apply,
        verify=verify,
        gpu_note="CPU fallback only; GPUs run the Triton expand_kernel",
        upstream="ours, not reported upstream",
        remove_when=(
            "vllm/utils/cpu_triton_utils.py's expand fallback copies its int64 "
            "result back (probe: not needed)"
        ),
    )
)
