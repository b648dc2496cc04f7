"""deepseek_v4: the CPU SWA metadata builder's tile-scheduler sentinel misses layer types.

``DeepseekV4CPUSparseSWAMetadataBuilder.build_tile_scheduler`` returns ``None`` for
swaonly/c4a/c128a only, but the shared builder also reads the v4.1 types (c1a, c2a):
``KeyError: 'c1a'`` on the first decode step. The CPU never runs FlashMLA's planner,
so every layer type the shared builder knows maps to ``None``.
"""

from typing import Any

from model_overrides.patches.module_attr import import_optional, is_cpu_platform
from model_overrides.registry import REGISTRY, Need, Patch, Probe

_SHARED = "vllm.v1.attention.backends.mla.sparse_swa"
_CPU = "vllm.models.deepseek_v4.cpu.cpu_mla"
_CLASS = "DeepseekV4CPUSparseSWAMetadataBuilder"


def shared_layer_types() -> set[str]:
    mod = import_optional(_SHARED)
    if mod is None:
        return set()
    return {v for k, v in vars(mod).items() if k.startswith("_LAYER_TYPE_") and isinstance(v, str)}


def _cpu_builder() -> Any:
    mod = import_optional(_CPU)
    return getattr(mod, _CLASS, None) if mod else None


def all_types_unplanned(self: Any, num_decode_tokens: int) -> dict[str, None]:
    """The CPU never plans FlashMLA tiles: every layer type gets the ``None`` sentinel."""
    return dict.fromkeys(sorted(shared_layer_types()))


def _missing_types() -> set[str]:
    returned = _cpu_builder().build_tile_scheduler(None, 1)
    return shared_layer_types() - set(returned)


def probe() -> Probe:
    if not is_cpu_platform():  # and never import DSV4's modules early there (breakable_graphs)
        return Probe(Need.NOT_APPLICABLE, "CPU only")
    builder = _cpu_builder()
    if builder is None:
        return Probe(Need.NOT_APPLICABLE, f"{_CPU}.{_CLASS} is not in this vLLM")
    if not shared_layer_types():
        return Probe(Need.UNRECOGNISED, f"no _LAYER_TYPE_* constants in {_SHARED}")
    if builder.build_tile_scheduler is all_types_unplanned:
        return Probe(Need.ALREADY_APPLIED, "sentinel covers every layer type")
    missing = _missing_types()
    if not missing:
        return Probe(Need.NOT_NEEDED, "CPU sentinel already covers every layer type")
    return Probe(Need.NEEDED, f"CPU sentinel lacks {sorted(missing)}")


def apply() -> None:
    _cpu_builder().build_tile_scheduler = all_types_unplanned


def verify() -> str | None:
    missing = _missing_types()
    return f"still lacks {sorted(missing)}" if missing else None


REGISTRY.add(
    Patch(
        name="dsv4-cpu-tile-scheduler-keys",
        override="deepseek_v4",
        summary="CPU tile-scheduler sentinel covers every DSV4 layer type",
        probe=probe,
        apply=apply,
        verify=verify,
        gpu_note="CPU builder only; GPU builders allocate one plan per present type",
        upstream="ours, not reported upstream",
        remove_when="the CPU tile-scheduler sentinel lists every layer type (probe: not needed)",
    )
)
