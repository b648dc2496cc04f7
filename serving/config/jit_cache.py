"""One cache volume for every JIT and compile cache a DSV4 engine fills at start.

A fresh engine compiles its kernels before it serves: DeepGEMM's FP8 GEMMs (minutes on a
fresh H200 at real width), TileLang's mHC kernels, Triton's, CuTe DSL's, the driver's PTX
JIT and vLLM's own compile cache. Each keeps its output in a directory of its own,
mostly under $HOME, which a container loses on restart. Pointing all of them into one
directory that outlives the pod (the chart's cache volume, ``jitCache`` in values.yaml)
makes a restart load what the first start compiled.

    python -m serving.config.jit_cache exports DIR   # shell lines that set them (images, scripts)
"""

from __future__ import annotations

import shlex
import sys
from pathlib import PurePosixPath

# Where the images and the chart mount the volume.
DEFAULT_ROOT = "/var/cache/dsv4"

# Each tool's variable and its directory under the root. Sources (read 2026-12-05):
# vLLM (vllm/envs.py VLLM_CACHE_ROOT: torch.compile and its own caches), DeepGEMM
# (vllm/utils/deep_gemm.py sets DG_JIT_CACHE_DIR under VLLM_CACHE_ROOT when unset: set
# explicitly so an image's own value cannot send it elsewhere), Triton, TileLang
# (tilelang/env.py), CUTLASS's CuTe DSL, TVM-FFI (TileLang's runtime), torch inductor, the
# CUDA driver's PTX JIT, FlashInfer's JIT and downloaded cubins (FLASHINFER_WORKSPACE_BASE,
# flashinfer/jit/env.py; default under $HOME) and XDG_CACHE_HOME for the rest.
CACHE_DIRS: dict[str, str] = {
    "VLLM_CACHE_ROOT": "vllm",
    "DG_JIT_CACHE_DIR": "deep_gemm",
    "TRITON_CACHE_DIR": "triton",
    "TILELANG_CACHE_DIR": "tilelang",
    "CUTE_DSL_CACHE_DIR": "cute_dsl",
    "TVM_FFI_CACHE_DIR": "tvm_ffi",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "CUDA_CACHE_PATH": "cuda",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "XDG_CACHE_HOME": "xdg",
}


# Who reads each variable: the Python package (a folder in site-packages) whose code does,
# or None for the CUDA driver. The chart's tests check every one that is installed on the
# test machine; the GPU-only ones are cited. Seen written on an H200 (vLLM 0.32, a
# V4-Flash bench model): vllm, deep_gemm, triton, tilelang, cuda, xdg, inductor.
READERS: dict[str, str | None] = {
    "VLLM_CACHE_ROOT": "vllm",  # vllm/envs.py
    "DG_JIT_CACHE_DIR": "vllm",  # vllm/utils/deep_gemm.py (DeepGEMM's own JIT reads it too)
    "TRITON_CACHE_DIR": "triton",  # triton/knobs.py
    "TILELANG_CACHE_DIR": "tilelang",  # tilelang/env.py (GPU images only)
    "CUTE_DSL_CACHE_DIR": "cutlass",  # nvidia-cutlass-dsl's cutlass/base_dsl (GPU images only)
    "TVM_FFI_CACHE_DIR": "tvm_ffi",  # tvm_ffi/cpp/extension.py
    "TORCHINDUCTOR_CACHE_DIR": "torch",  # torch/_inductor/runtime/cache_dir_utils.py
    "CUDA_CACHE_PATH": None,  # the CUDA driver's PTX JIT cache (CUDA programming guide)
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",  # flashinfer/jit/env.py (GPU images only)
    "XDG_CACHE_HOME": "huggingface_hub",  # huggingface_hub/constants.py, matplotlib, ...
}


# The root itself, where `dsv4-serve warm` writes the cache's manifest and an engine start
# reads it (model_overrides/jit_pool/manifest.py ROOT_ENV).
ROOT_ENV = "DSV4_JIT_CACHE"


def cache_env(root: str = DEFAULT_ROOT) -> dict[str, str]:
    """The environment that sends every JIT cache under ``root`` (an absolute path)."""
    base = PurePosixPath(root)
    if not base.is_absolute():
        raise ValueError(f"JIT cache root must be an absolute path, got {root!r}")
    return {ROOT_ENV: str(base)} | {name: str(base / sub) for name, sub in CACHE_DIRS.items()}


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or argv[0] != "exports":
        print("usage: python -m serving.config.jit_cache exports [DIR]", file=sys.stderr)
        return 2
    try:
        env = cache_env(argv[1] if len(argv) == 2 else DEFAULT_ROOT)
    except ValueError as exc:
        print(f"serving.config.jit_cache: {exc}", file=sys.stderr)
        return 2
    for name, value in env.items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
