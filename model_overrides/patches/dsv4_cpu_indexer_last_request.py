"""deepseek_v4: the CPU indexer's prefill reads one block-table row past the chunk's last.

``SparseAttnIndexer.forward_cpu`` finds each prefill token's request with
``searchsorted(local_cu_seq_lens, cu_seqlen_ks, right=True) - 1`` and gathers
``chunk.block_table[req_idx]``. A request with no compressed entry yet (a prompt shorter
than the compress ratio, 4) ties with the end of the cumulative lengths: when it is the
step's last prefill request, its index is the chunk's request count, one past the block
table, and the gather raises ``IndexError`` in the engine. Any step that prefills such a
prompt after another one (a 3-token prompt beside a long one) ends the engine.

vLLM's comment there holds that those tokens "never dereference page_table" (their
length is 0); only the gather itself fails. The CPU builder's chunks get one more block
table row (a copy of the last) for that index to land on.
"""

import functools
import inspect
from typing import Any

import torch

from model_overrides.patches.module_attr import import_optional, is_cpu_platform
from model_overrides.registry import REGISTRY, Need, Patch, Probe

_CPU = "vllm.models.deepseek_v4.cpu.cpu_mla"
_CLASS = "DeepseekV4CPUIndexerMetadataBuilder"
_INDEXER = "vllm.model_executor.layers.sparse_attn_indexer"
_GATHER = "chunk.block_table[req_idx]"


def _cpu_builder() -> Any:
    mod = import_optional(_CPU)
    return getattr(mod, _CLASS, None) if mod else None


def _is_patched(cls: Any) -> bool:
    return getattr(cls.__dict__.get("build"), "_dsv4_padded_block_table", False)


def pad_block_tables(metadata: Any) -> Any:
    """Each prefill chunk's block table with its last row repeated once."""
    prefill = getattr(metadata, "prefill", None)
    for chunk in getattr(prefill, "chunks", None) or []:
        table = chunk.block_table
        if table.shape[0]:
            chunk.block_table = torch.cat((table, table[-1:]))
    return metadata


def _wrap(build: Any) -> Any:
    @functools.wraps(build)
    def padded_build(self: Any, *args: Any, **kwargs: Any) -> Any:
        return pad_block_tables(build(self, *args, **kwargs))

    padded_build._dsv4_padded_block_table = True  # type: ignore[attr-defined]
    return padded_build


def probe() -> Probe:
    if not is_cpu_platform():  # and never import DSV4's modules early there (breakable_graphs)
        return Probe(Need.NOT_APPLICABLE, "CPU only")
    builder = _cpu_builder()
    indexer = import_optional(_INDEXER)
    cls = getattr(indexer, "SparseAttnIndexer", None) if indexer else None
    if builder is None or cls is None or not hasattr(cls, "forward_cpu"):
        return Probe(Need.NOT_APPLICABLE, f"no {_CLASS} or SparseAttnIndexer.forward_cpu")
    if _is_patched(builder):
        return Probe(Need.ALREADY_APPLIED, "prefill chunks carry one spare block-table row")
    src = inspect.getsource(cls.forward_cpu)
    if _GATHER not in src:
        return Probe(Need.NOT_NEEDED, f"forward_cpu no longer gathers {_GATHER}")
    if "right=True" not in src or "searchsorted" not in src:
        return Probe(Need.UNRECOGNISED, "forward_cpu finds requests another way")
    if "clamp" in src.split(_GATHER)[0].rsplit("searchsorted", 1)[-1]:
        return Probe(Need.NOT_NEEDED, "forward_cpu bounds the request index itself")
    return Probe(Need.NEEDED, "a last prefill request with no compressed entry indexes past it")


def apply() -> None:
    builder = _cpu_builder()
    builder.build = _wrap(builder.build)


def verify() -> str | None:
    return None if _is_patched(_cpu_builder()) else f"{_CLASS}.build unchanged"


REGISTRY.add(
    Patch(
        name="dsv4-cpu-indexer-last-request",
        override="deepseek_v4",
        summary="CPU indexer prefill: a spare block-table row for a last request of length 0",
        probe=probe,
        apply=apply,
        verify=verify,
        gpu_note="CPU indexer only (forward_cpu); the GPU kernels take per-token lengths",
        upstream="ours, not reported upstream",
        remove_when=(
            "forward_cpu bounds the request index it gathers the block table with "
            "(probe: not needed)"
        ),
    )
)
