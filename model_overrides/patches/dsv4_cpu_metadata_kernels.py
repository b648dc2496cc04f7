"""deepseek_v4: eager-torch stand-ins for the Triton metadata kernels on DSV4's path.

Needed wherever vLLM runs with Triton disabled (no backend for the device, as on
the CPU): these kernels are launched while building attention metadata, before any
model code runs, and fail with "Cannot inspect kernel parameters".

Through vLLM's kernel dispatcher (``register_kernels``) where the kernel's launch
arguments carry all it needs. The dispatcher calls a replacement once per launch with
the kernel's arguments but not its grid (vllm/triton_utils/dispatcher.py,
``KernelOverride.__getitem__``), so the four kernels whose grid holds a size none of
their arguments give (``num_decode_tokens``, ``num_reqs``, ``num_tokens``: see each
owner's ``__call__`` in vllm/v1/attention/backends/mla/) are replaced at the owner,
whose call has it. Registering the owner object itself does not fit either: vLLM calls
``register_warmup`` on it (vllm/model_executor/layers/attention/mla_attention.py).
"""

from model_overrides.kernels import dsv4_metadata as eager
from model_overrides.patches.module_attr import DispatchedKernel, KernelSwap, import_optional
from model_overrides.registry import REGISTRY, Patch

_MLA = "vllm.v1.attention.backends.mla"
_GPU_NOTE = "GPU variants launch the same kernels through Triton; the patch is CPU-only"

SWAPS: dict[str, KernelSwap | DispatchedKernel] = {
    "dsv4-cpu-compressed-slot-mapping": DispatchedKernel(
        f"{_MLA}.compressor_utils.CompressedSlotMappingKernel.kernel",
        eager.compressed_slot_mapping_kernel,
    ),
    "dsv4-cpu-prepare-uniform-decode": KernelSwap(
        f"{_MLA}.indexer",
        "_PREPARE_UNIFORM_DECODE_KERNEL",
        "PrepareUniformDecodeKernel",
        eager.prepare_uniform_decode,
    ),
    "dsv4-cpu-prefill-chunk-metadata": KernelSwap(
        f"{_MLA}.indexer",
        "_BUILD_PREFILL_CHUNK_METADATA_KERNEL",
        "BuildPrefillChunkMetadataKernel",
        eager.build_prefill_chunk_metadata,
    ),
    "dsv4-cpu-swa-prefill-metadata": DispatchedKernel(
        f"{_MLA}.sparse_swa.ComputePrefillMetadataKernel.kernel",
        eager.prefill_metadata_kernel,
    ),
    "dsv4-cpu-swa-indices-and-lens": KernelSwap(
        f"{_MLA}.sparse_swa",
        "_COMPUTE_SWA_INDICES_AND_LENS_KERNEL",
        "ComputeSWAIndicesAndLensKernel",
        eager.swa_indices_and_lens,
    ),
    "dsv4-cpu-dspark-noncausal-swa-indices": KernelSwap(
        f"{_MLA}.sparse_swa",
        "_COMPUTE_DSPARK_NONCAUSAL_SWA_INDICES_KERNEL",
        "ComputeDSparkNoncausalSWAIndicesKernel",
        eager.dspark_noncausal_swa_indices,
    ),
    "dsv4-cpu-token-to-req-indices": DispatchedKernel(
        "vllm.v1.attention.ops.metadata.compute_token_to_req_indices",
        eager.token_to_req_indices,
    ),
}


def triton_has_no_backend() -> str | None:
    """None when Triton cannot run here (so the eager versions are needed)."""
    triton_utils = import_optional("vllm.triton_utils")
    if triton_utils is None:
        return "vllm.triton_utils not found"
    if getattr(triton_utils, "HAS_TRITON", True):
        return "Triton has a backend on this platform"
    return None


for _name, _swap in SWAPS.items():
    REGISTRY.add(
        Patch(
            name=_name,
            override="deepseek_v4",
            summary=f"{_swap.label} as eager torch",
            probe=lambda s=_swap: s.probe(triton_has_no_backend),
            apply=_swap.apply,
            verify=_swap.verify,
            gpu_note=_GPU_NOTE,
            upstream=(
                "ours, not reported upstream (vllm/platforms/cpu.py registers CPU "
                "fallbacks for other Triton kernels, not these)"
            ),
            remove_when="vLLM registers CPU implementations of these kernels (probe: not needed)",
        )
    )
