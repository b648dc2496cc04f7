"""Routed experts with DeepSeek-V4's clamped SwiGLU, in eager torch (CPU).

For each (token, expert) pair the token was routed to:
    gate, up = x @ w13[e].T          (w13 = [w1; w3]: gate rows, then up rows)
    gate = min(gate, limit);  up = clamp(up, -limit, limit)
    y   += weight * (silu(gate) * up) @ w2[e].T
Products are taken in bf16 with fp32 accumulation and the activation in fp32, rounded
once to bf16 before the down projection, as vLLM's bf16 CPU experts do.
"""

import torch

# Gather the experts' weights per (token, expert) pair only while that stays small;
# beyond, loop over the experts that received tokens.
GATHER_BYTES = 64 << 20


def clamped_swiglu(gate_up: torch.Tensor, limit: float) -> torch.Tensor:
    """silu(min(gate, limit)) * clamp(up, -limit, limit), in fp32."""
    half = gate_up.shape[-1] // 2
    gate = gate_up[..., :half].float().clamp(max=limit)
    up = gate_up[..., half:].float().clamp(min=-limit, max=limit)
    return torch.nn.functional.silu(gate) * up


def _pairs_gathered(
    x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, ids: torch.Tensor, limit: float
) -> torch.Tensor:
    """[T*K, H]: every pair's expert output, the weights gathered per pair (small T)."""
    tokens = x.repeat_interleave(ids.shape[1], dim=0)  # [T*K, H]
    flat = ids.reshape(-1).long()
    gate_up = torch.bmm(w13[flat], tokens.unsqueeze(-1)).squeeze(-1)  # [T*K, 2I]
    act = clamped_swiglu(gate_up, limit).to(x.dtype)
    return torch.bmm(w2[flat], act.unsqueeze(-1)).squeeze(-1)  # [T*K, H]


def _pairs_by_expert(
    x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, ids: torch.Tensor, limit: float
) -> torch.Tensor:
    """The same, one matmul pair per expert that received tokens (large T)."""
    k = ids.shape[1]
    flat = ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=w13.shape[0]).tolist()
    out = torch.empty(flat.numel(), x.shape[1], dtype=x.dtype)
    start = 0
    for expert, count in enumerate(counts):
        if not count:
            continue
        rows = order[start : start + count]
        start += count
        tokens = x[rows // k]
        act = clamped_swiglu(tokens @ w13[expert].T, limit).to(x.dtype)
        out[rows] = act @ w2[expert].T
    return out


def clamped_experts(
    output: torch.Tensor,
    hidden_states: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    limit: float,
    apply_router_weight_on_input: bool = False,
) -> None:
    """``output`` [T, H] = sum over each token's experts of weight * expert(x)."""
    t, k = topk_ids.shape
    if t == 0:
        return
    per_pair = (w13.shape[1] * w13.shape[2] + w2.shape[1] * w2.shape[2]) * w13.element_size()
    compute = _pairs_gathered if t * k * per_pair <= GATHER_BYTES else _pairs_by_expert
    pairs = compute(hidden_states, w13, w2, topk_ids, limit).float().view(t, k, -1)
    if apply_router_weight_on_input:  # already applied to the input (top-1 only)
        combined = pairs.sum(dim=1)
    else:
        combined = (pairs * topk_weights.float().unsqueeze(-1)).sum(dim=1)
    output.copy_(combined.to(output.dtype))
