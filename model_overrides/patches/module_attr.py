"""A patch that swaps a module-level object for ours, recognising what it replaces."""

import importlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from model_overrides.registry import Need, Probe


def import_optional(module: str) -> ModuleType | None:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def is_cpu_platform() -> bool:
    platforms = import_optional("vllm.platforms")
    return bool(platforms and platforms.current_platform.is_cpu())


@dataclass
class EagerKernel:
    """Stands in for a Triton kernel object; called exactly like the original."""

    fn: Callable[..., None]
    original: Any

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.fn(*args, **kwargs)

    def register_warmup(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to compile: the eager version needs no JIT warm-up."""


def call_parameters(obj: Any) -> list[str]:
    return [p for p in inspect.signature(type(obj).__call__).parameters if p != "self"]


@dataclass(frozen=True)
class KernelSwap:
    """Replace ``module.attr`` (a Triton kernel object) with an eager function."""

    module: str
    attr: str
    class_name: str
    replacement: Callable[..., None]

    def expected_parameters(self) -> list[str]:
        return list(inspect.signature(self.replacement).parameters)

    def current(self) -> Any:
        mod = import_optional(self.module)
        return getattr(mod, self.attr, None) if mod else None

    def probe(self, applicable: Callable[[], str | None]) -> Probe:
        mod = import_optional(self.module)
        if mod is None:
            return Probe(Need.NOT_APPLICABLE, f"{self.module} is not in this vLLM")
        obj = getattr(mod, self.attr, None)
        if obj is None:
            return Probe(Need.NOT_APPLICABLE, f"{self.module}.{self.attr} is not in this vLLM")
        if isinstance(obj, EagerKernel):
            return Probe(Need.ALREADY_APPLIED, "eager version in place")
        if type(obj).__name__ != self.class_name:
            return Probe(
                Need.UNRECOGNISED,
                f"{self.attr} is a {type(obj).__name__}, expected {self.class_name}",
            )
        found = call_parameters(obj)
        if found != self.expected_parameters():
            return Probe(Need.UNRECOGNISED, f"{self.class_name}.__call__ takes {found}")
        reason = applicable()
        if reason:
            return Probe(Need.NOT_NEEDED, reason)
        return Probe(Need.NEEDED, f"{self.class_name} -> eager torch")

    def apply(self) -> None:
        mod = importlib.import_module(self.module)
        setattr(mod, self.attr, EagerKernel(self.replacement, getattr(mod, self.attr)))

    def verify(self) -> str | None:
        obj = self.current()
        if not isinstance(obj, EagerKernel) or obj.fn is not self.replacement:
            return f"{self.module}.{self.attr} is not the eager version"
        return None


@dataclass(frozen=True)
class FunctionSwap:
    """Replace a module-level function everywhere it was imported by name."""

    module: str
    attr: str
    replacement: Callable[..., Any]

    def _holders(self, target: Any) -> list[ModuleType]:
        return [
            mod
            for name, mod in list(sys.modules.items())
            if name.startswith("vllm") and getattr(mod, self.attr, None) is target
        ]

    def probe(self, applicable: Callable[[], str | None]) -> Probe:
        mod = import_optional(self.module)
        fn = getattr(mod, self.attr, None) if mod else None
        if fn is None:
            return Probe(Need.NOT_APPLICABLE, f"{self.module}.{self.attr} is not in this vLLM")
        if fn is self.replacement:
            return Probe(Need.ALREADY_APPLIED, "eager version in place")
        found = list(inspect.signature(fn).parameters)
        expected = list(inspect.signature(self.replacement).parameters)
        if found != expected:
            return Probe(Need.UNRECOGNISED, f"{self.attr} takes {found}, expected {expected}")
        reason = applicable()
        if reason:
            return Probe(Need.NOT_NEEDED, reason)
        return Probe(Need.NEEDED, f"{self.attr} -> eager torch")

    def apply(self) -> None:
        original = getattr(importlib.import_module(self.module), self.attr)
        for mod in self._holders(original):
            setattr(mod, self.attr, self.replacement)

    def verify(self) -> str | None:
        mod = importlib.import_module(self.module)
        if getattr(mod, self.attr) is not self.replacement:
            return f"{self.module}.{self.attr} is not the eager version"
        stale = [
            name
            for name, m in list(sys.modules.items())
            if name.startswith("vllm")
            and callable(getattr(m, self.attr, None))
            and getattr(m, self.attr) is not self.replacement
            and getattr(getattr(m, self.attr), "__module__", "") == self.module
        ]
        return f"still bound to the Triton version in {stale}" if stale else None
