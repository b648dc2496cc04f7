"""Registry entries. Importing this package registers every patch, in order."""

# cpu_kernel_library first (every later probe may load vLLM's kernels), then the
# eager ops the loaded library lacks.
from model_overrides.patches import cpu_kernel_library, cpu_op_fallbacks  # noqa: F401, I001
from model_overrides.patches import (  # noqa: F401 - imported for registration
    cpu_expand_kernel,
    cpu_moe_swiglu_clamp,
    draft_token_request_cache,
    dsv4_cpu_chunked_prefill,
    dsv4_cpu_prefix_caching,
    dsv4_cpu_hc_path,
    dsv4_cpu_indexer_last_request,
    dsv4_cpu_metadata_kernels,
    dsv4_cpu_mtp,
    dsv4_cpu_tile_scheduler,
    dsv4_cuda_hc_path,
    dummy_weights,
    moe_clamp_filter,
    parallel_jit_warmup,
    hc_state_fixes,
    spec_guard,
)

REGISTRY_READY = True
