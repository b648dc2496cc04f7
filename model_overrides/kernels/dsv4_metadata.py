"""Eager-torch versions of the attention-metadata Triton kernels on DSV4's path.

Each function takes the arguments of the matching vLLM kernel object's ``__call__``
and writes the same outputs in place. They run where Triton has no backend (the
CPU); they are written from the kernels' definitions, vectorised over tokens.
"""

from typing import NamedTuple

import torch

PAD_SLOT = -1


class TokenLayout(NamedTuple):
    """Where each query token of a batch sits, from ``query_start_loc``."""

    req: torch.Tensor  # request index of each token
    flat: torch.Tensor  # flat token index
    offset: torch.Tensor  # offset within its request
    query_len: torch.Tensor  # [num_reqs], as the kernels read it (end - start)


def spread_requests(lens: torch.Tensor) -> torch.Tensor:
    """Request index repeated over its ``lens`` entries: [0, 0, 1, 2, 2, 2, ...]."""
    return torch.repeat_interleave(
        torch.arange(lens.numel(), device=lens.device), lens.clamp(min=0)
    )


def token_layout(query_start_loc: torch.Tensor, num_reqs: int) -> TokenLayout:
    qsl = query_start_loc[: num_reqs + 1].to(torch.int64)
    query_len = qsl[1:] - qsl[:-1]
    req = spread_requests(query_len)
    first = int(qsl[0]) if num_reqs else 0
    flat = torch.arange(first, first + req.numel(), device=qsl.device)
    return TokenLayout(req, flat, flat - qsl[req], query_len)


def _paged_slots(
    block_table: torch.Tensor,
    req: torch.Tensor,
    logical: torch.Tensor,
    valid: torch.Tensor,
    block_size: int,
) -> torch.Tensor:
    """Global slot of logical position ``logical`` of request ``req``; PAD where invalid."""
    safe = torch.where(valid, logical, torch.zeros_like(logical))
    blocks = block_table[req, torch.div(safe, block_size, rounding_mode="floor")].to(torch.int64)
    slots = blocks * block_size + safe % block_size
    return torch.where(valid, slots, torch.full_like(slots, PAD_SLOT))


def compressed_slot_mapping(
    compressed_slot_mapping: torch.Tensor,
    slot_mapping: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    compress_ratio: int,
    dcp_world_size: int,
    cp_interleave: int,
) -> None:
    """The last token of every ``compress_ratio`` group gets its state's slot."""
    num_reqs = block_table.shape[0]
    req, flat, offset, query_len = token_layout(query_start_loc, num_reqs)
    if req.numel() == 0:
        return
    pos = (seq_lens[:num_reqs].to(torch.int64) - query_len)[req] + offset
    own_slot = slot_mapping[flat].to(torch.int64)
    valid = ((pos + 1) % compress_ratio == 0) & (own_slot != PAD_SLOT)
    span = cp_interleave * dcp_world_size
    local_pos = pos // span * cp_interleave + pos % cp_interleave
    slots = _paged_slots(block_table, req, local_pos // compress_ratio, valid, block_size)
    compressed_slot_mapping[flat] = slots.to(compressed_slot_mapping.dtype)


def prepare_uniform_decode(
    seq_lens: torch.Tensor,
    decode_seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    expanded_block_table: torch.Tensor,
    decode_lens: torch.Tensor,
    num_decode_tokens: int,
    max_decode_len: int,
) -> None:
    """Expand each request's ``max_decode_len`` tokens into rows of decode length 1."""
    idx = torch.arange(num_decode_tokens, device=seq_lens.device)
    req = idx // max_decode_len
    local = idx % max_decode_len
    per_token = (seq_lens[req].to(torch.int64) - max_decode_len + local + 1).clamp(min=0)
    decode_seq_lens[:num_decode_tokens] = per_token.to(decode_seq_lens.dtype)
    # The kernel copies as many entries as the expanded row is wide.
    width = min(expanded_block_table.shape[1], block_table.shape[1])
    expanded_block_table[:num_decode_tokens, :width] = block_table[req, :width]
    decode_lens[:num_decode_tokens] = 1


def build_prefill_chunk_metadata(
    query_start_loc: torch.Tensor,
    uncompressed_seq_lens: torch.Tensor,
    cu_compressed_seq_lens: torch.Tensor,
    row_start_cu_compressed_seq_lens: torch.Tensor,
    token_to_seq: torch.Tensor,
    cu_compressed_seq_len_ks: torch.Tensor,
    cu_compressed_seq_len_ke: torch.Tensor,
    query_slice_start: int,
    query_slice_stop: int,
    DCP_RANK: int,  # noqa: N803 - mirrors the kernel's argument names
    DCP_WORLD: int,  # noqa: N803
    DCP_INTERLEAVE: int,  # noqa: N803
    *,
    num_reqs: int,
    COMPRESS_RATIO: int,  # noqa: N803
    positions: torch.Tensor | None = None,
) -> None:
    """Per-query-token K row bounds (ks, ke) and the compressed-token → request map.
    ``positions`` (vLLM 0.34+): each query token's position, where a request's tokens
    are not its contiguous last ones; else they are."""
    req, flat, offset, query_len = token_layout(query_start_loc, num_reqs)
    if req.numel():
        start_pos = uncompressed_seq_lens[:num_reqs].to(torch.int64) - query_len
        row_start = row_start_cu_compressed_seq_lens[:num_reqs].to(torch.int64)[req]
        keep = (flat >= query_slice_start) & (flat < query_slice_stop)
        out = flat[keep] - query_slice_start
        if positions is not None:
            context = positions[flat].to(torch.int64) + 1
        else:
            context = start_pos[req] + 1 + offset
        length = context // COMPRESS_RATIO
        if DCP_WORLD > 1:
            base = length // DCP_INTERLEAVE // DCP_WORLD * DCP_INTERLEAVE
            rem = (length - base * DCP_WORLD - DCP_RANK * DCP_INTERLEAVE).clamp(
                min=0, max=DCP_INTERLEAVE
            )
            length = base + rem
        cu_compressed_seq_len_ks[out] = row_start[keep].to(cu_compressed_seq_len_ks.dtype)
        ke = (row_start + length)[keep]
        cu_compressed_seq_len_ke[out] = ke.to(cu_compressed_seq_len_ke.dtype)
    cu = cu_compressed_seq_lens[: num_reqs + 1].to(torch.int64)
    owner = spread_requests(cu[1:] - cu[:-1])
    if owner.numel():
        first = int(cu[0])
        token_to_seq[first : first + owner.numel()] = owner.to(token_to_seq.dtype)


def compute_prefill_metadata(
    prefill_gather_lens: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    replay_start: torch.Tensor,
    num_prefills: int,
    num_decodes: int,
    window_size: int,
) -> None:
    """Window-KV rows each prefill request gathers: its query plus the visible window."""
    rows = slice(num_decodes, num_decodes + num_prefills)
    qsl = query_start_loc.to(torch.int64)
    query_len = qsl[num_decodes + 1 : num_decodes + num_prefills + 1] - qsl[rows]
    prefix_len = seq_lens[rows].to(torch.int64) - query_len
    visible = (prefix_len - replay_start[rows].to(torch.int64)).clamp(min=0)
    gather = query_len + torch.minimum(visible, torch.full_like(visible, window_size - 1))
    prefill_gather_lens[:num_prefills] = gather.to(prefill_gather_lens.dtype)


def _write_window_rows(
    swa_indices: torch.Tensor,
    swa_lens: torch.Tensor,
    valid: torch.Tensor,
    req: torch.Tensor,
    start_pos: torch.Tensor,
    end_pos: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    index_width: int,
) -> None:
    """Row r: slots of positions [start, end) of its request, PAD-filled to index_width."""
    # Not clamped: the kernel stores the raw difference (negative when replay starts past pos).
    span = end_pos - start_pos
    swa_lens[: valid.numel()] = torch.where(valid, span, torch.zeros_like(span)).to(swa_lens.dtype)
    cols = torch.arange(index_width, device=swa_indices.device)
    logical = start_pos.unsqueeze(1) + cols
    in_window = valid.unsqueeze(1) & (cols < span.unsqueeze(1))
    reqs = req.unsqueeze(1).expand_as(logical)
    slots = _paged_slots(block_table, reqs, logical, in_window, block_size)
    # The kernel addresses each row by its stride: inner dims are one flat row.
    rows = swa_indices.view(swa_indices.shape[0], -1)
    rows[: valid.numel(), :index_width] = slots.to(swa_indices.dtype)


def _window_token_view(
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    token_to_req_indices: torch.Tensor,
    is_valid_token: torch.Tensor,
    num_tokens: int,
    token_offset: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(valid, request, position, prefix length) for tokens token_offset + [0, num_tokens)."""
    tokens = torch.arange(token_offset, token_offset + num_tokens, device=seq_lens.device)
    valid = is_valid_token[tokens].to(torch.bool)
    req = torch.where(valid, token_to_req_indices[tokens].to(torch.int64), 0)
    qsl = query_start_loc.to(torch.int64)
    query_len = qsl[req + 1] - qsl[req]
    prefix_len = seq_lens.to(torch.int64)[req] - query_len
    pos = prefix_len + tokens - qsl[req]
    return valid, req, pos, prefix_len


def swa_indices_and_lens(
    swa_indices: torch.Tensor,
    swa_lens: torch.Tensor,
    window_size: int,
    index_width: int,
    left_visible: torch.Tensor,
    right_visible: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    token_to_req_indices: torch.Tensor,
    is_valid_token: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    replay_start: torch.Tensor,
    *,
    num_tokens: int,
    token_offset: int,
    has_image: bool = False,
) -> None:
    """Sliding-window KV slots of each token (causal, widened inside image spans)."""
    valid, req, pos, _ = _window_token_view(
        query_start_loc, seq_lens, token_to_req_indices, is_valid_token, num_tokens, token_offset
    )
    tokens = torch.arange(token_offset, token_offset + num_tokens, device=seq_lens.device)
    if has_image:
        left = left_visible[tokens].to(torch.int64)
        right = right_visible[tokens].to(torch.int64)
    else:
        left = right = torch.zeros_like(pos)
    left_add = (left - (window_size - 1)).clamp(min=0)
    start = (pos - (window_size - 1) - left_add).clamp(min=0)
    start = torch.maximum(start, replay_start.to(torch.int64)[req])
    end = pos + right + 1
    _write_window_rows(
        swa_indices, swa_lens, valid, req, start, end, block_table, block_size, index_width
    )


def dspark_noncausal_swa_indices(
    swa_indices: torch.Tensor,
    swa_lens: torch.Tensor,
    window_size: int,
    index_width: int,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    token_to_req_indices: torch.Tensor,
    is_valid_token: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    *,
    num_tokens: int,
    token_offset: int,
) -> None:
    """DSpark draft block: the request's trailing context window plus every query token."""
    valid, req, _, prefix_len = _window_token_view(
        query_start_loc, seq_lens, token_to_req_indices, is_valid_token, num_tokens, token_offset
    )
    start = (prefix_len - window_size).clamp(min=0)
    end = seq_lens.to(torch.int64)[req]
    _write_window_rows(
        swa_indices, swa_lens, valid, req, start, end, block_table, block_size, index_width
    )


def token_to_req_indices(
    query_start_loc: torch.Tensor,
    out: torch.Tensor,
    num_mapped_tokens: int,
    num_tokens: int,
) -> torch.Tensor:
    """Request of each of the first ``num_tokens`` tokens; 0 past ``num_mapped_tokens``."""
    num_reqs = query_start_loc.shape[0] - 1
    tokens = torch.arange(num_tokens, device=query_start_loc.device)
    ends = query_start_loc[1:].to(torch.int64).contiguous()
    # First request whose end lies past the token; empty (padding) requests are skipped.
    req = torch.searchsorted(ends, tokens, right=True).clamp(max=max(num_reqs - 1, 0))
    req = torch.where(tokens < num_mapped_tokens, req, torch.zeros_like(req))
    out[:num_tokens] = req.to(out.dtype)
    return out[:num_tokens]


# Launch-signature adapters: vLLM's kernel dispatcher calls a replacement with the Triton
# kernel's own arguments (pointers are the tensors), so these take exactly those names.


def compressed_slot_mapping_kernel(
    compressed_slot_mapping_ptr: torch.Tensor,
    slot_mapping_ptr: torch.Tensor,
    query_start_loc_ptr: torch.Tensor,
    seq_lens_ptr: torch.Tensor,
    block_table_ptr: torch.Tensor,
    block_table_stride: int,
    block_size: int,
    dcp_world_size: int,
    cp_interleave: int,
    COMPRESS_RATIO: int,  # noqa: N803 - the kernel's name
    PAD_ID: int,  # noqa: N803
    TRITON_BLOCK_SIZE: int,  # noqa: N803
) -> None:
    """CompressedSlotMappingKernel.kernel; its grid is one program per block-table row."""
    assert PAD_ID == PAD_SLOT, f"pad slot {PAD_ID}, expected {PAD_SLOT}"
    assert block_table_stride == block_table_ptr.stride(0)
    compressed_slot_mapping(
        compressed_slot_mapping_ptr,
        slot_mapping_ptr,
        query_start_loc_ptr,
        seq_lens_ptr,
        block_table_ptr,
        block_size,
        COMPRESS_RATIO,
        dcp_world_size,
        cp_interleave,
    )


def prefill_metadata_kernel(
    prefill_gather_lens_ptr: torch.Tensor,
    seq_lens_ptr: torch.Tensor,
    query_start_loc_ptr: torch.Tensor,
    replay_start_ptr: torch.Tensor,
    num_prefills: int,
    num_decodes: int,
    window_size: int,
    BLOCK_SIZE: int,  # noqa: N803 - the kernel's name
) -> None:
    """ComputePrefillMetadataKernel.kernel; its grid is one program."""
    compute_prefill_metadata(
        prefill_gather_lens_ptr,
        seq_lens_ptr,
        query_start_loc_ptr,
        replay_start_ptr,
        num_prefills,
        num_decodes,
        window_size,
    )
