"""Designed weights for the golden DSV4, in DeepSeek's original checkpoint naming.

Everything that feeds the output is exact (one-hot embeddings, a successor head,
zero output projections, neutral hyper-connections). Everything inside attention
and routing gets small seeded values, so the real kernels run on non-trivial data
and any NaN they produce still reaches the output (0 * NaN = NaN).

The "numeric" and "clamp" variants (``design.py``) turn some of the zeros into
seeded values of the magnitudes below, so those parts' numerics reach the logits.
"""

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from serving.golden.architecture import golden_config
from serving.golden.design import HEAD_INPUT_SCALE, HIDDEN_SIZE, VOCAB_SIZE, GoldenDesign

Tensors = dict[str, torch.Tensor]
_BF16 = torch.bfloat16
_F32 = torch.float32


class _Filler:
    def __init__(self, seed: int) -> None:
        self._gen = torch.Generator().manual_seed(seed)

    def small(self, *shape: int, dtype: torch.dtype = _BF16, scale: float = 0.05) -> torch.Tensor:
        return (torch.randn(*shape, generator=self._gen) * scale).to(dtype)

    def maybe(self, scale: float, *shape: int, dtype: torch.dtype = _BF16) -> torch.Tensor:
        """Zeros at scale 0 (drawing nothing), else seeded values."""
        if scale == 0.0:
            return torch.zeros(*shape, dtype=dtype)
        return self.small(*shape, dtype=dtype, scale=scale)

    def ints(self, high: int, *shape: int) -> torch.Tensor:
        return torch.randint(0, high, shape, generator=self._gen, dtype=torch.int32)


@dataclass(frozen=True)
class Magnitudes:
    """Standard deviations of the seeded weights; 0 keeps a part silent or neutral."""

    attn_out: float = 0.0  # wo_b
    expert_in: float = 0.05  # routed w1/w3
    expert_out: float = 0.0  # routed and shared w2
    hc: float = 0.0  # hyper-connection fn and base
    head: float = 1.0  # the successor head's entries: larger = peakier next-token logits
    # One set of routed-expert weights for all experts: which experts a token is routed
    # to (a top-k that bf16 noise can flip) then cannot change the output.
    identical_experts: bool = False


def magnitudes(design: GoldenDesign) -> Magnitudes:
    if design.variant == "numeric":
        return Magnitudes(attn_out=0.05, expert_out=0.05, hc=0.05, head=4.0, identical_experts=True)
    if design.variant == "clamp":
        # Rows of the normed residual are ~16 at the token's one-hot entries at first,
        # so w1/w3 entries of std 0.25 put about 1% of pre-activations beyond 10.
        return Magnitudes(
            expert_in=0.25, expert_out=0.02, hc=0.05, head=4.0, identical_experts=True
        )
    return Magnitudes()


def _hc(prefix: str, fill: _Filler, cfg: dict, mag: Magnitudes) -> Tensors:
    """Neutral at magnitude 0 (fn = 0, base = 0, scale = 1: pre = 0.5, post = 1, comb
    exactly uniform); seeded fn and base otherwise."""
    hc, dim = cfg["hc_mult"], cfg["hidden_size"]
    mix = (2 + hc) * hc
    out: Tensors = {}
    for site in ("attn", "ffn"):
        out[f"{prefix}hc_{site}_fn"] = fill.maybe(mag.hc, mix, hc * dim, dtype=_F32)
        out[f"{prefix}hc_{site}_base"] = fill.maybe(mag.hc, mix, dtype=_F32)
        out[f"{prefix}hc_{site}_scale"] = torch.ones(3, dtype=_F32)
    return out


def _hc_head(prefix: str, cfg: dict) -> Tensors:
    hc, dim = cfg["hc_mult"], cfg["hidden_size"]
    return {
        f"{prefix}hc_head_fn": torch.zeros(hc, hc * dim, dtype=_F32),
        f"{prefix}hc_head_base": torch.zeros(hc, dtype=_F32),
        f"{prefix}hc_head_scale": torch.ones(1, dtype=_F32),
    }


def _compressor(prefix: str, fill: _Filler, dim: int, head_dim: int, ratio: int) -> Tensors:
    coff = 2 if ratio == 4 else 1  # ratio-4 compressors overlap windows
    return {
        f"{prefix}wkv.weight": fill.small(coff * head_dim, dim),
        f"{prefix}wgate.weight": fill.small(coff * head_dim, dim),
        f"{prefix}ape": fill.small(ratio, coff * head_dim, dtype=_F32),
        f"{prefix}norm.weight": torch.ones(head_dim, dtype=_BF16),
    }


def _attention(prefix: str, fill: _Filler, cfg: dict, ratio: int, mag: Magnitudes) -> Tensors:
    dim, heads, head_dim = cfg["hidden_size"], cfg["num_attention_heads"], cfg["head_dim"]
    q_lora, groups, o_lora = cfg["q_lora_rank"], cfg["o_groups"], cfg["o_lora_rank"]
    out: Tensors = {
        f"{prefix}wq_a.weight": fill.small(q_lora, dim),
        f"{prefix}wkv.weight": fill.small(head_dim, dim),
        f"{prefix}q_norm.weight": torch.ones(q_lora, dtype=_BF16),
        f"{prefix}kv_norm.weight": torch.ones(head_dim, dtype=_BF16),
        f"{prefix}wq_b.weight": fill.small(heads * head_dim, q_lora),
        f"{prefix}wo_a.weight": fill.small(groups * o_lora, heads * head_dim // groups),
        # Zero by design: attention adds nothing to the residual stream.
        f"{prefix}wo_b.weight": fill.maybe(mag.attn_out, dim, groups * o_lora),
        f"{prefix}attn_sink": fill.small(heads, dtype=_F32),
    }
    if ratio > 1:
        out |= _compressor(f"{prefix}compressor.", fill, dim, head_dim, ratio)
    if ratio == 4:
        idx_heads, idx_dim = cfg["index_n_heads"], cfg["index_head_dim"]
        out |= {
            f"{prefix}indexer.wq_b.weight": fill.small(idx_heads * idx_dim, q_lora),
            f"{prefix}indexer.weights_proj.weight": fill.small(idx_heads, dim),
        }
        out |= _compressor(f"{prefix}indexer.compressor.", fill, dim, idx_dim, ratio)
    return out


def _moe(prefix: str, fill: _Filler, cfg: dict, hash_routed: bool, mag: Magnitudes) -> Tensors:
    dim, inter, experts = cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["n_routed_experts"]
    shared_inter = inter * cfg["n_shared_experts"]
    out: Tensors = {f"{prefix}gate.weight": fill.small(experts, dim)}
    if hash_routed:
        out[f"{prefix}gate.tid2eid"] = fill.ints(
            experts, cfg["vocab_size"], cfg["num_experts_per_tok"]
        )
    else:
        out[f"{prefix}gate.bias"] = fill.small(experts, dtype=_F32)
    if mag.identical_experts:
        one = {
            "w1": fill.small(inter, dim, scale=mag.expert_in),
            "w3": fill.small(inter, dim, scale=mag.expert_in),
            "w2": fill.maybe(mag.expert_out, dim, inter),
        }
    for e in range(experts):
        if mag.identical_experts:
            out |= {f"{prefix}experts.{e}.{w}.weight": t.clone() for w, t in one.items()}
            continue
        out[f"{prefix}experts.{e}.w1.weight"] = fill.small(inter, dim, scale=mag.expert_in)
        out[f"{prefix}experts.{e}.w3.weight"] = fill.small(inter, dim, scale=mag.expert_in)
        # Zero by design: experts add nothing to the residual stream.
        out[f"{prefix}experts.{e}.w2.weight"] = fill.maybe(mag.expert_out, dim, inter)
    out[f"{prefix}shared_experts.w1.weight"] = fill.small(shared_inter, dim)
    out[f"{prefix}shared_experts.w3.weight"] = fill.small(shared_inter, dim)
    out[f"{prefix}shared_experts.w2.weight"] = fill.maybe(mag.expert_out, dim, shared_inter)
    return out


def _block(
    prefix: str, fill: _Filler, cfg: dict, layer: int, ratio: int, mag: Magnitudes
) -> Tensors:
    dim = cfg["hidden_size"]
    out = {
        f"{prefix}attn_norm.weight": torch.ones(dim, dtype=_BF16),
        f"{prefix}ffn_norm.weight": torch.ones(dim, dtype=_BF16),
    }
    out |= _hc(prefix, fill, cfg, mag)
    out |= _attention(f"{prefix}attn.", fill, cfg, ratio, mag)
    out |= _moe(f"{prefix}ffn.", fill, cfg, layer < cfg["num_hash_layers"], mag)
    return out


def one_hot_rows(targets: list[int]) -> torch.Tensor:
    """Row i is the one-hot direction of token targets[i] (as a [V, H] matrix)."""
    rows = torch.zeros(len(targets), HIDDEN_SIZE, dtype=_BF16)
    rows[torch.arange(len(targets)), torch.tensor(targets)] = 1.0
    return rows


def _successor_head(design: GoldenDesign) -> torch.Tensor:
    """Logit of token j is high where the hidden state is the direction of a predecessor of j."""
    head = torch.zeros(VOCAB_SIZE, HIDDEN_SIZE, dtype=_BF16)
    for token in range(VOCAB_SIZE):
        if design.spread:  # the design's logits, exact in bf16 (design.py)
            for choice, logit in design.next_token_logits(token).items():
                head[choice, token] = logit / HEAD_INPUT_SCALE
        else:
            head[design.successor(token), token] = magnitudes(design).head
    return head


def _mtp(index: int, design: GoldenDesign, fill: _Filler, cfg: dict) -> Tensors:
    prefix, dim = f"mtp.{index}.", cfg["hidden_size"]
    # e_proj: column t holds the direction the draft treats token t as.
    e_proj = one_hot_rows([design.draft_input_map(t) for t in range(VOCAB_SIZE)]).T.contiguous()
    out: Tensors = {
        f"{prefix}enorm.weight": torch.ones(dim, dtype=_BF16),
        f"{prefix}hnorm.weight": torch.ones(dim, dtype=_BF16),
        f"{prefix}e_proj.weight": e_proj,
        # Zero: the draft ignores the target's hidden state.
        f"{prefix}h_proj.weight": torch.zeros(dim, dim, dtype=_BF16),
        # The norm before the shared head: draft_logit_scale (1 but for a spread design).
        f"{prefix}norm.weight": torch.full((dim,), design.draft_logit_scale, dtype=_BF16),
    }
    out |= _hc_head(prefix, cfg)
    layer = cfg["num_hidden_layers"] + index
    out |= _block(prefix, fill, cfg, layer, ratio=1, mag=magnitudes(design))
    return out


def golden_tensors(design: GoldenDesign) -> Iterator[Tensors]:
    """The checkpoint, one shard-sized group at a time (top level, then each layer)."""
    cfg = golden_config()
    fill = _Filler(design.seed)
    top: Tensors = {
        "embed.weight": one_hot_rows(list(range(VOCAB_SIZE))),
        "head.weight": _successor_head(design),
        "norm.weight": torch.ones(cfg["hidden_size"], dtype=_BF16),
    }
    yield top | _hc_head("", cfg)
    for layer, ratio in enumerate(cfg["compress_ratios"][: cfg["num_hidden_layers"]]):
        yield _block(f"layers.{layer}.", fill, cfg, layer, ratio, magnitudes(design))
    for index in range(cfg["num_nextn_predict_layers"]):
        yield _mtp(index, design, fill, cfg)
