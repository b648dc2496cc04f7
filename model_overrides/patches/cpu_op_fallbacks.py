"""deepseek_v4: eager-torch `_C` ops where the loaded CPU kernel library lacks them.

DSV4's CPU path calls ops (mHC, sparse MLA attention, compressor, indexer, routing,
packed linears) that only vLLM's AVX-512 BF16 library `_C` builds. On `_C_AVX512`
and `_C_AVX2` the same names are defined here, with the native schemas, so every
call site in vLLM runs unchanged. One patch per group of ops; "not needed" where the
native ops exist.
"""

import torch

from model_overrides.kernels.cpu_ops import EagerOp
from model_overrides.kernels.cpu_ops import groups as op_groups
from model_overrides.patches.cpu_kernel_library import load_kernels
from model_overrides.patches.module_attr import is_cpu_platform
from model_overrides.registry import REGISTRY, Need, Patch, Probe

# Kept alive for the life of the process: dropping a Library unregisters its ops.
_LIBRARY: torch.library.Library | None = None
_OURS: set[str] = set()


def _defined(name: str) -> bool:
    """The op exists in `_C` and has a CPU kernel."""
    qualified = f"_C::{name}"
    if qualified not in torch._C._dispatch_get_all_op_names():
        return False
    return torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CPU")


def missing(ops: tuple[EagerOp, ...]) -> list[EagerOp]:
    return [op for op in ops if not _defined(op.name)]


def probe(ops: tuple[EagerOp, ...]) -> Probe:
    if not is_cpu_platform():
        return Probe(Need.NOT_APPLICABLE, "not the CPU platform")
    library = load_kernels()
    if all(op.name in _OURS for op in ops):
        return Probe(Need.ALREADY_APPLIED, "eager versions in place")
    absent = missing(ops)
    if not absent:
        return Probe(Need.NOT_NEEDED, f"native in {library}")
    names = ", ".join(op.name for op in absent)
    return Probe(Need.NEEDED, f"{library} lacks {names}")


def apply(ops: tuple[EagerOp, ...]) -> None:
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("_C", "FRAGMENT")
    for op in missing(ops):
        _LIBRARY.define(op.schema)
        _LIBRARY.impl(op.name, op.impl, "CPU")
        if op.fake is not None:
            torch.library.register_fake(f"_C::{op.name}", op.fake, lib=_LIBRARY)
        _OURS.add(op.name)


def verify(ops: tuple[EagerOp, ...]) -> str | None:
    problems = []
    for op in ops:
        if not _defined(op.name):
            problems.append(f"{op.name} has no CPU kernel")
            continue
        schema = getattr(torch.ops._C, op.name).default._schema
        if str(schema) != str(torch._C.parse_schema(f"_C::{op.schema}")):
            problems.append(f"{op.name} has schema {schema}")
    return "; ".join(problems) or None


for _group, _ops in op_groups().items():
    REGISTRY.add(
        Patch(
            name=f"dsv4-cpu-ops-{_group}",
            override="deepseek_v4",
            summary=f"eager {', '.join(op.name for op in _ops)}",
            probe=lambda ops=_ops: probe(ops),
            apply=lambda ops=_ops: apply(ops),
            verify=lambda ops=_ops: verify(ops),
            gpu_note="CPU only: the GPU variants call CUDA/ROCm kernels",
            upstream=(
                "ours, not reported upstream (vLLM builds DSV4's CPU ops into _C, the "
                "AVX-512 BF16 library, only)"
            ),
            remove_when="_C_AVX512 and _C_AVX2 ship these ops (probe: not needed)",
        )
    )
