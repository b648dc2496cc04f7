"""Eager-torch versions of the `_C` CPU ops DSV4 calls that only vLLM's AVX-512 BF16
library (`_C`) builds; `_C_AVX512` and `_C_AVX2` lack them.

Each op keeps the native op's schema (so every `torch.ops._C.<name>` call site in
vLLM works unchanged) and its semantics, read from vLLM's `csrc/cpu` sources and
tested against the native op (tests/model_overrides/kernels/test_cpu_ops_*.py). The patch
`patches/cpu_op_fallbacks.py` registers them only where the loaded library lacks them.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EagerOp:
    name: str  # the op's name in the `_C` namespace
    schema: str  # the native schema, without the namespace
    impl: Callable[..., Any]
    fake: Callable[..., Any] | None = None  # shapes only, for torch.compile tracing


GROUPS = ("mhc", "routing", "linear", "attention", "compressor", "indexer")


def groups() -> dict[str, tuple[EagerOp, ...]]:
    """Every group's ops, by group name (the modules of this package)."""
    import importlib

    return {g: importlib.import_module(f"{__name__}.{g}").OPS for g in GROUPS}
