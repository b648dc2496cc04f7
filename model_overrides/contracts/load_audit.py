"""Optional weight-load audit: which parameters a DSV4 checkpoint did and did not write.

vLLM does not report missing weights of modules with a quant method (linears,
embeddings, experts) for unquantized checkpoints: they silently keep uninitialised
memory. With ``DSV4_LOAD_AUDIT=<dir>`` set, every DSV4 model class's ``load_weights``
records, per process, the parameters that existed before loading, the ones the
loader reported loaded and the checkpoint names it consumed, as JSON in that dir.
"""

import functools
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

AUDIT_ENV = "DSV4_LOAD_AUDIT"


def _wrap(cls: type) -> None:
    original = cls.load_weights
    if getattr(original, "_dsv4_audited", False):
        return

    @functools.wraps(original)
    def load_weights(self: Any, weights: Iterable[tuple[str, Any]]) -> set[str]:
        params = sorted(name for name, _ in self.named_parameters())
        consumed: list[str] = []

        def tap() -> Iterable[tuple[str, Any]]:
            for name, tensor in weights:
                consumed.append(name)
                yield name, tensor

        loaded = original(self, tap())
        report = {
            "class": cls.__name__,
            "parameters": params,
            "loaded": sorted(loaded or ()),
            "consumed": sorted(consumed),
        }
        out = Path(os.environ[AUDIT_ENV]) / f"{cls.__name__}-{os.getpid()}.json"
        out.write_text(json.dumps(report))
        return loaded

    load_weights._dsv4_audited = True  # type: ignore[attr-defined]
    cls.load_weights = load_weights


def install_if_requested() -> None:
    if not os.environ.get(AUDIT_ENV):
        return
    Path(os.environ[AUDIT_ENV]).mkdir(parents=True, exist_ok=True)
    import vllm.models.deepseek_v4 as dsv4

    from model_overrides.models.dsv4_mtp_cpu import CpuDeepSeekV4MTP

    _wrap(dsv4.DeepseekV4ForCausalLM)
    if dsv4.DeepSeekV4MTP.__module__.startswith("vllm.models.deepseek_v4.cpu"):
        _wrap(CpuDeepSeekV4MTP)
