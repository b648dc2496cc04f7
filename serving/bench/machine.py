"""Where the bench ran (for local targets, also where they ran): figures from two
machines of a pool differ more than any setting does."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

GIB = 1 << 30


def _cpu_model() -> str | None:
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def _isa() -> str | None:
    try:
        from model_overrides.kernels.kernel_library import hardware_isa

        return hardware_isa()
    except Exception:  # a machine whose CPU flags cannot be read: still bench
        return None


def gpu_info() -> dict | None:
    """The first CUDA device as torch names it (None without one)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        props = torch.cuda.get_device_properties(0)
        return {
            "name": torch.cuda.get_device_name(0),
            "count": torch.cuda.device_count(),
            "memory_gib": round(props.total_memory / GIB, 1),
            "capability": f"{props.major}.{props.minor}",
            "cuda": torch.version.cuda,
        }
    except Exception as exc:  # a broken driver is worth a line in the report, not a crash
        return {"name": None, "error": f"{type(exc).__name__}: {exc}"}


def _version(module: str) -> str | None:
    try:
        return getattr(importlib.import_module(module), "__version__", None)
    except Exception:  # not installed, or broken: the report says so by its absence
        return None


def client_machine() -> dict:
    return {
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count(),
        "isa": _isa(),
        "gpu": gpu_info(),
        "software": {name: _version(name) for name in ("vllm", "torch", "ray")},
    }
