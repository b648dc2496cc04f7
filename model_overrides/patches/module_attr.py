"""Patches that swap a kernel for ours, recognising what they replace: through vLLM's
kernel dispatcher where the kernel's launch arguments carry everything it needs
(``DispatchedKernel``), else by replacing the JIT warm-up owner (``KernelSwap``)."""

import importlib
import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from model_overrides.compat.vllm_source import source_of
from model_overrides.registry import Need, Probe


def import_optional(module: str) -> ModuleType | None:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def _spec(module: str) -> Any:
    """``module``'s import spec, found without importing it; None when it is missing."""
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None


def has_module(module: str) -> bool:
    """Whether this vLLM has ``module``, without importing it."""
    return _spec(module) is not None


def source_without_import(module: str, qualname: str) -> str | None:
    """The source of ``module.qualname`` (a function or ``Class.method``) read from the
    module's file, without importing the module (compat/vllm_source.py). None when the
    module or the name is missing."""
    return source_of(module, qualname)


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


def takes_the_same_call(found: list[str], replacement: Callable[..., Any]) -> bool:
    """Whether a kernel launched with parameters ``found`` can be replaced: the same
    names, or, for an older vLLM, the same less trailing ones a later vLLM added and
    the replacement defaults."""
    params = list(inspect.signature(replacement).parameters.values())
    names = [p.name for p in params]
    if names[: len(found)] != found:
        return False
    return all(p.default is not inspect.Parameter.empty for p in params[len(found) :])


@dataclass(frozen=True)
class KernelSwap:
    """Replace ``module.attr`` (a Triton kernel object) with an eager function."""

    module: str
    attr: str
    class_name: str
    replacement: Callable[..., None]

    @property
    def label(self) -> str:
        return self.class_name

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
        if not takes_the_same_call(found, self.replacement):
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


def kernel_parameters(kernel: Any) -> list[str]:
    """A Triton kernel's launch arguments; the plain function's parameters where vLLM's
    Triton placeholder left the undecorated function (no Triton backend)."""
    names = getattr(kernel, "arg_names", None)
    if names is not None:
        return list(names)
    return list(inspect.signature(getattr(kernel, "func", kernel)).parameters)


@dataclass(frozen=True)
class DispatchedKernel:
    """Replace a Triton kernel (``module.kernel``, or ``module.Owner.kernel`` for a JIT
    warm-up owner) or a launching function through vLLM's kernel dispatcher
    (``vllm.triton_utils.dispatcher.register_kernels``, which vllm/platforms/cpu.py uses
    for its own CPU fallbacks). The dispatcher rebinds every module that imported the
    original; the replacement takes the kernel's launch arguments, by name."""

    name: str
    replacement: Callable[..., Any]

    @property
    def label(self) -> str:
        """The owner class of a ``.kernel``, else the function's name."""
        *_, owner, attr = self.name.rsplit(".", 2)
        return owner if attr == "kernel" else attr

    def _dispatcher(self) -> ModuleType | None:
        dispatcher = import_optional("vllm.triton_utils.dispatcher")
        return dispatcher if hasattr(dispatcher, "register_kernels") else None

    def current(self) -> Any:
        """What ``name`` points at now; None when vLLM has no such kernel."""
        path, attr = self.name.rsplit(".", 1)
        mod_path, _, owner = path.rpartition(".")
        if owner[:1].isupper():
            host = getattr(import_optional(mod_path), owner, None)
        else:
            host = import_optional(path)
        return getattr(host, attr, None) if host is not None else None

    def _is_ours(self, obj: Any) -> bool:
        dispatcher = self._dispatcher()
        override = getattr(dispatcher, "KernelOverride", None)
        return override is not None and isinstance(obj, override) and obj.func is self.replacement

    def probe(self, applicable: Callable[[], str | None]) -> Probe:
        if self._dispatcher() is None:
            return Probe(Need.NOT_APPLICABLE, "this vLLM has no Triton kernel dispatcher")
        obj = self.current()
        if obj is None:
            return Probe(Need.NOT_APPLICABLE, f"{self.name} is not in this vLLM")
        if self._is_ours(obj):
            return Probe(Need.ALREADY_APPLIED, "eager version registered")
        found = kernel_parameters(obj)
        expected = list(inspect.signature(self.replacement).parameters)
        if found != expected:
            return Probe(Need.UNRECOGNISED, f"{self.name} takes {found}, expected {expected}")
        reason = applicable()
        if reason:
            return Probe(Need.NOT_NEEDED, reason)
        return Probe(Need.NEEDED, f"{self.label} -> eager torch")

    def apply(self) -> None:
        self._dispatcher().register_kernels({self.name: self.replacement})

    def verify(self) -> str | None:
        if not self._is_ours(self.current()):
            return f"{self.name} is not the registered eager version"
        return None
