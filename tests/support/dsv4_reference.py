"""A plain-torch statement of DeepSeek-V4's forward, for golden checkpoints whose attention
is silent (every ``wo_b`` zero): the oracle for vLLM's MoE and its SwiGLU clamp.

Read straight from the checkpoint's safetensors (DeepSeek naming). Per token ``t``:

    h = [embed[t]] * hc_mult                                  (hc_mult residual streams)
    per layer, per sublayer (attn, then ffn):
        pre, post, comb = gates of h (fn, base, scale; comb made doubly stochastic by Sinkhorn)
        x = sum_i pre_i * h_i
        y = attn(attn_norm(x)) = 0 (silent)  |  ffn(ffn_norm(x))
        h_j = post_j * y + sum_i comb_ij * h_i
    y = sum_i head_gate_i * h_i;  logits = head(norm(y))

    ffn(x) = sum_k w_k * expert_{e_k}(x) + shared(x),   expert(x) = w2 @ swiglu(w1 x, w3 x)
    swiglu(g, u) = silu(min(g, L)) * clamp(u, -L, L)          (L = swiglu_limit)
    score_e = sqrt(softplus(gate_e . x))                      (fp32)
    experts e_k: hash layers tid2eid[t]; others top-k of score + bias (bias selects only)
    w_k = routed_scaling_factor * score_{e_k} / sum_k score_{e_k}

The MoE (routing, clamped SwiGLU, shared expert, combination) is written here from that
definition. The hyper-connection gates and the post mix use vLLM's plain-torch mHC
reference (vllm/model_executor/kernels/mhc/torch.py), loaded without vLLM's kernels.

Everything runs in fp32 by default. ``bf16_activations`` rounds, to bf16, the tensors a
bf16 DSV4 keeps between ops (residual streams, sublayer inputs and outputs, expert hidden
activations, final hidden state, logits): the gap between the two is the noise of running
the same model in bf16.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open

from model_overrides.kernels.cpu_ops.mhc import _reference as vllm_mhc_reference

_F32 = torch.float32
# DSV4's post gate is 2 * sigmoid(...) (vLLM: DeepseekV4DecoderLayer.hc_post_alpha).
HC_POST_MULT = 2.0


class AttentionNotSilent(AssertionError):
    """The checkpoint's attention can write into the residual stream: this oracle does not
    model attention, so it must not be used."""


@dataclass(frozen=True)
class Options:
    routed_clamp: bool = True  # False: routed experts unclamped (vLLM's CPU bf16 experts)
    shared_clamp: bool = True
    bf16_activations: bool = False


@dataclass
class ClampCounts:
    """Routed pre-activations beyond the limit, over every (token, layer, routed slot, unit)."""

    elements: int = 0
    up_beyond: int = 0  # |up| > limit
    gate_beyond: int = 0  # gate > limit
    tokens_hit: int = 0  # (token, layer) pairs with at least one clamped element

    def __add__(self, other: "ClampCounts") -> "ClampCounts":
        fields = ("elements", "up_beyond", "gate_beyond", "tokens_hit")
        return ClampCounts(*(getattr(self, f) + getattr(other, f) for f in fields))

    @property
    def up_rate(self) -> float:
        return self.up_beyond / max(self.elements, 1)

    @property
    def gate_rate(self) -> float:
        return self.gate_beyond / max(self.elements, 1)


@dataclass
class Forward:
    logprobs: torch.Tensor  # [T, V] fp32: log p(next token | position)
    clamp: ClampCounts = field(default_factory=ClampCounts)

    def token_logprobs(self, ids: list[int]) -> list[float]:
        """Teacher-forced log p(ids[p] | ids[:p]) for p >= 1."""
        rows = torch.arange(len(ids) - 1)
        return self.logprobs[rows, torch.tensor(ids[1:])].tolist()


class Checkpoint:
    """A golden checkpoint's config and tensors, read lazily from its safetensors shards."""

    def __init__(self, model_dir: str | Path) -> None:
        root = Path(model_dir)
        self.config = json.loads((root / "config.json").read_text())
        weight_map = json.loads((root / "model.safetensors.index.json").read_text())["weight_map"]
        self._shard = {name: root / shard for name, shard in weight_map.items()}
        self._handles: dict[Path, object] = {}

    @property
    def names(self) -> list[str]:
        return sorted(self._shard)

    def raw(self, name: str) -> torch.Tensor:
        path = self._shard[name]
        if path not in self._handles:
            self._handles[path] = safe_open(str(path), framework="pt")
        return self._handles[path].get_tensor(name)

    def f32(self, name: str) -> torch.Tensor:
        return self.raw(name).to(_F32)


def check_config(cfg: dict) -> None:
    """The definition stated here is DSV4's MoE as configured; anything else fails loudly."""
    expected = {
        "scoring_func": "sqrtsoftplus",
        "topk_method": "noaux_tc",
        "norm_topk_prob": True,
        "n_shared_experts": 1,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    }
    wrong = {k: cfg.get(k) for k, v in expected.items() if cfg.get(k) != v}
    assert not wrong, f"this reference states DSV4 with {expected}; checkpoint has {wrong}"


def assert_attention_silent(ckpt: Checkpoint, layer: int) -> None:
    """Attention reaches the residual stream only through ``wo_b``: zero weight, no bias and
    finite inputs (0 * NaN is NaN) make its output exactly zero."""
    prefix = f"layers.{layer}.attn."
    names = [n for n in ckpt.names if n.startswith(prefix)]
    if prefix + "wo_b.weight" not in names:
        raise AttentionNotSilent(f"{prefix}wo_b.weight missing")
    nonzero = int(ckpt.raw(prefix + "wo_b.weight").count_nonzero())
    if nonzero:
        raise AttentionNotSilent(f"{prefix}wo_b.weight has {nonzero} non-zero entries")
    if prefix + "wo_b.bias" in names:
        raise AttentionNotSilent(f"{prefix}wo_b.bias exists")
    for name in names:
        if not torch.isfinite(ckpt.f32(name)).all():
            raise AttentionNotSilent(f"{name} is not finite: NaN would pass through wo_b = 0")


# ---------------------------------------------------------------- the definition's pieces


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * weight


def hc_gates(
    h: torch.Tensor, fn: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, cfg: dict
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """pre [T, hc], post [T, hc, 1], comb [T, hc, hc] of streams h [T, hc, D], from
    vLLM's plain-torch mHC: sigmoid gates of the RMS-normalised flat residual, comb by
    Sinkhorn; DSV4 uses one hc_eps for the pre gate and Sinkhorn."""
    eps = cfg["hc_eps"]
    post, comb, _, pre = vllm_mhc_reference().mhc_pre_delayed_torch(
        h, fn, scale, base, cfg["rms_norm_eps"], eps, eps, HC_POST_MULT, cfg["hc_sinkhorn_iters"]
    )
    return pre, post, comb


def hc_collapse(h: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """sum_i gate_i * h_i: [T, hc, D] -> [T, D]."""
    return (gate.unsqueeze(-1) * h).sum(dim=1)


def hc_post(
    y: torch.Tensor, h: torch.Tensor, post: torch.Tensor, comb: torch.Tensor
) -> torch.Tensor:
    """h'_j = post_j * y + sum_i comb_ij * h_i (vLLM's plain-torch mHC post)."""
    return vllm_mhc_reference().mhc_post_torch(y, h, post, comb)


def hc_head(
    h: torch.Tensor, fn: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, cfg: dict
) -> torch.Tensor:
    """The final collapse: gates sigmoid(mixes * scale + base) + hc_eps."""
    flat = h.flatten(1)
    inv_rms = torch.rsqrt(flat.square().mean(-1, keepdim=True) + cfg["rms_norm_eps"])
    gate = torch.sigmoid((flat @ fn.T) * inv_rms * scale + base) + cfg["hc_eps"]
    return hc_collapse(h, gate)


def route(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    cfg: dict,
    bias: torch.Tensor | None = None,
    hashed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights [T, k] fp32, experts [T, k]): experts are ``hashed`` (tid2eid rows of the
    tokens) or the top-k of score + bias; weights are the unbiased scores, renormalised and
    times routed_scaling_factor."""
    scores = F.softplus(x.float() @ gate_weight.float().T).sqrt()
    if hashed is not None:
        experts = hashed.long()
    else:
        assert bias is not None, "a learned-routing layer needs its selection bias"
        experts = (scores + bias).topk(cfg["num_experts_per_tok"], dim=-1).indices
    weights = scores.gather(1, experts)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights * cfg["routed_scaling_factor"], experts


def swiglu(gate: torch.Tensor, up: torch.Tensor, limit: float | None) -> torch.Tensor:
    """silu(min(gate, limit)) * clamp(up, -limit, limit); unclamped when limit is None."""
    if limit is not None:
        gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
    return F.silu(gate) * up


# ---------------------------------------------------------------- the model


class Reference:
    def __init__(self, model_dir: str | Path, options: Options | None = None) -> None:
        self.ckpt = Checkpoint(model_dir)
        self.cfg = self.ckpt.config
        self.opt = options or Options()
        check_config(self.cfg)
        for layer in range(self.cfg["num_hidden_layers"]):
            assert_attention_silent(self.ckpt, layer)
        self.clamp = ClampCounts()

    def _keep(self, t: torch.Tensor) -> torch.Tensor:
        """A tensor DSV4 stores between ops: bf16 in bf16 mode, else exact fp32."""
        return t.bfloat16().float() if self.opt.bf16_activations else t

    def _norm(self, x: torch.Tensor, weight_name: str) -> torch.Tensor:
        return self._keep(rms_norm(x, self.ckpt.f32(weight_name), self.cfg["rms_norm_eps"]))

    def _sublayer(self, h: torch.Tensor, prefix: str, body) -> torch.Tensor:
        """One hyper-connected sublayer: h [T, hc, D] -> h with body(pre-mixed h) added."""
        fn, scale, base = (self.ckpt.f32(f"{prefix}_{w}") for w in ("fn", "scale", "base"))
        pre, post, comb = hc_gates(h, fn, scale, base, self.cfg)
        y = self._keep(body(self._keep(hc_collapse(h, pre))))
        return self._keep(hc_post(y, h, post, comb))

    # ---------------------------------------------------------------- MoE

    def route(
        self, x: torch.Tensor, tokens: torch.Tensor, layer: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        prefix = f"layers.{layer}.ffn.gate."
        if layer < self.cfg["num_hash_layers"]:
            hashed = self.ckpt.raw(prefix + "tid2eid")[tokens]
            return route(x, self.ckpt.f32(prefix + "weight"), self.cfg, hashed=hashed)
        bias = self.ckpt.f32(prefix + "bias")
        return route(x, self.ckpt.f32(prefix + "weight"), self.cfg, bias=bias)

    def _expert(
        self, x: torch.Tensor, prefix: str, clamp: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(output, gate, up) of one expert's SwiGLU MLP."""
        gate = self._keep(x @ self.ckpt.f32(prefix + "w1.weight").T)
        up = self._keep(x @ self.ckpt.f32(prefix + "w3.weight").T)
        act = self._keep(swiglu(gate, up, self.cfg["swiglu_limit"] if clamp else None))
        return self._keep(act @ self.ckpt.f32(prefix + "w2.weight").T), gate, up

    def _count(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """Tally routed pre-activations beyond the limit; rows with any."""
        limit = self.cfg["swiglu_limit"]
        up_beyond, gate_beyond = up.abs() > limit, gate > limit
        self.clamp.elements += up.numel()
        self.clamp.up_beyond += int(up_beyond.sum())
        self.clamp.gate_beyond += int(gate_beyond.sum())
        return (up_beyond | gate_beyond).any(dim=-1)

    def _routed(self, x: torch.Tensor, tokens: torch.Tensor, layer: int) -> torch.Tensor:
        weights, experts = self.route(x, tokens, layer)
        out = torch.zeros_like(x)
        hit = torch.zeros(x.shape[0], dtype=torch.bool)
        for e in experts.unique().tolist():
            rows, slots = (experts == e).nonzero(as_tuple=True)
            prefix = f"layers.{layer}.ffn.experts.{e}."
            y, gate, up = self._expert(x[rows], prefix, self.opt.routed_clamp)
            out.index_add_(0, rows, weights[rows, slots, None] * y)
            hit[rows] |= self._count(gate, up)
        self.clamp.tokens_hit += int(hit.sum())
        return self._keep(out)

    def _ffn(self, x: torch.Tensor, tokens: torch.Tensor, layer: int) -> torch.Tensor:
        x = self._norm(x, f"layers.{layer}.ffn_norm.weight")
        prefix = f"layers.{layer}.ffn.shared_experts."
        shared, _, _ = self._expert(x, prefix, self.opt.shared_clamp)
        return self._routed(x, tokens, layer) + shared

    # ---------------------------------------------------------------- forward

    def forward(self, ids: list[int]) -> Forward:
        # Small matmuls: one thread, so that a busy machine's cores do not stall OpenMP.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._forward(torch.tensor(ids))
        finally:
            torch.set_num_threads(threads)

    def _forward(self, tokens: torch.Tensor) -> Forward:
        self.clamp = ClampCounts()
        h = self.ckpt.f32("embed.weight")[tokens]
        h = h.unsqueeze(1).repeat(1, self.cfg["hc_mult"], 1)
        for layer in range(self.cfg["num_hidden_layers"]):
            p = f"layers.{layer}.hc_"
            h = self._sublayer(h, p + "attn", torch.zeros_like)  # silent: asserted on load
            h = self._sublayer(h, p + "ffn", lambda x, n=layer: self._ffn(x, tokens, n))
        head = (self.ckpt.f32(f"hc_head_{w}") for w in ("fn", "scale", "base"))
        y = self._norm(self._keep(hc_head(h, *head, self.cfg)), "norm.weight")
        logits = self._keep(y @ self.ckpt.f32("head.weight").T)
        return Forward(torch.log_softmax(logits, dim=-1), self.clamp)
