"""Which of vLLM's three x86 CPU kernel libraries a process loads, and forcing a lower one.

vLLM's ``CpuPlatform.import_kernels`` picks ``_C`` (AVX-512 BF16), ``_C_AVX512``
(AVX-512 without BF16) or ``_C_AVX2`` from ``torch.cpu``'s ISA checks. All three
register the ``_C`` op namespace, so a process can hold only one of them.

``DSV4_CPU_KERNEL_LIBRARY=avx512|avx2`` makes this process (and, through the
environment, every vLLM process it starts) report a smaller ISA to vLLM, so that
vLLM loads the lower library on a machine that could run a higher one. It has to
act before the first ``import_kernels``: the plugin calls ``force_if_requested``
first thing, and ``loaded()`` tells afterwards what really happened.
"""

import os
from pathlib import Path

import torch

FORCE_ENV = "DSV4_CPU_KERNEL_LIBRARY"
# Highest first: an ISA name and the library vLLM loads for it.
LIBRARIES = {"avx512_bf16": "_C", "avx512": "_C_AVX512", "avx2": "_C_AVX2"}
ORDER = list(LIBRARIES)

# Captured at import, before any forcing, so "what the hardware can run" stays true.
_HW_AVX512 = torch.cpu._is_avx512_supported()
_HW_AVX512_BF16 = torch.cpu._is_avx512_bf16_supported()


def hardware_isa() -> str:
    """The highest of the three ISAs this CPU runs natively."""
    if _HW_AVX512 and _HW_AVX512_BF16:
        return "avx512_bf16"
    return "avx512" if _HW_AVX512 else "avx2"


def requested_isa() -> str | None:
    """The ISA asked for in the environment; None when unset or "auto"."""
    value = os.environ.get(FORCE_ENV, "").strip().lower()
    return None if value in ("", "auto", "native") else value


class ForceError(ValueError):
    pass


def check_request(isa: str) -> None:
    if isa not in LIBRARIES:
        raise ForceError(f"{FORCE_ENV}={isa!r}: use auto, {', '.join(ORDER)}")
    if ORDER.index(isa) < ORDER.index(hardware_isa()):
        raise ForceError(
            f"{FORCE_ENV}={isa}: this CPU runs at most {hardware_isa()}; "
            "only a lower library can be forced"
        )


def force(isa: str) -> None:
    """Make torch.cpu report no more than ``isa`` in this process."""
    check_request(isa)
    if isa != "avx512_bf16":
        torch.cpu._is_avx512_bf16_supported = lambda: False
        # AMX implies AVX-512 BF16; vLLM keys AMX paths on these.
        torch.cpu._is_amx_tile_supported = lambda: False
        torch.cpu._is_amx_fp16_supported = lambda: False
    if isa == "avx2":
        torch.cpu._is_avx512_supported = lambda: False


def force_if_requested() -> str | None:
    isa = requested_isa()
    if isa is not None:
        force(isa)
    return isa


def expected_library() -> str:
    return LIBRARIES[requested_isa() or hardware_isa()]


def loaded() -> str | None:
    """The vLLM kernel library mapped into this process (None before import_kernels)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for name in sorted(LIBRARIES.values(), key=len, reverse=True):
        if f"/vllm/{name}.abi3.so" in maps:
            return name
    return None
