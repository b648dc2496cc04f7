"""Eager torch for vLLM's rejection-sampler helper kernels, any dtype."""

import torch


def expand_to_tokens(
    output: torch.Tensor,
    input_val: torch.Tensor,
    cu_num_tokens: torch.Tensor,
    replace_from: float | int,
    replace_to: float | int,
    MAX_NUM_TOKENS: int | None = None,  # noqa: N803 - the kernel's argument name
) -> None:
    """Write request r's value (``replace_from`` mapped to ``replace_to``) over its tokens."""
    ends = cu_num_tokens.to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    values = torch.where(
        input_val == replace_from, torch.full_like(input_val, replace_to), input_val
    ).to(output.dtype)
    total = int(ends[-1]) if ends.numel() else 0
    output[:total] = torch.repeat_interleave(values[: counts.numel()], counts)
