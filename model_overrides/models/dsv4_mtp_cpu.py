"""DeepSeek-V4 MTP draft for vLLM's CPU backend, on vLLM's CPU DSV4 building blocks.

Upstream's CPU ``DeepSeekV4MTP`` raises NotImplementedError. This one follows the
HC-state contract of vLLM PR #42930: the MTP block is one CPU
``DeepseekV4DecoderLayer``; when it returns deferred HC state (the fused path) the
final ``hc_post`` is applied here, and only then; on the inline path the block has
already applied it and returns ``None`` state. ``compute_logits`` uses the MTP
layer's own ``hc_head`` parameters and ``HCHeadOp``. The embedding and the head are
the target's, shared by vLLM's proposer.
"""

import re
from collections.abc import Iterable

import torch
import torch.nn as nn
from vllm.config import VllmConfig
from vllm.distributed import (
    get_tensor_model_parallel_rank,
    get_tensor_model_parallel_world_size,
)
from vllm.model_executor.layers.fused_moe import fused_moe_make_expert_params_mapping
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.mhc import HCHeadOp
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.deepseek_mtp import SharedHead
from vllm.model_executor.models.utils import maybe_prefix
from vllm.models.deepseek_v4.cpu.model import DeepseekV4DecoderLayer

_MTP_NAME = re.compile(r"^mtp\.(\d+)\.(.+)$")
# Checkpoint name -> attribute of the MTP layer itself (the rest belongs to its block).
_LAYER_OWN = {
    "enorm.weight": "enorm.weight",
    "hnorm.weight": "hnorm.weight",
    "e_proj.weight": "e_proj.weight",
    "h_proj.weight": "h_proj.weight",
    "norm.weight": "shared_head.norm.weight",
    "hc_head_fn": "hc_head_fn",
    "hc_head_base": "hc_head_base",
    "hc_head_scale": "hc_head_scale",
}
# Shared with the target by vLLM's proposer; an MTP copy in the checkpoint is skipped.
_SHARED_WITH_TARGET = ("head.weight", "emb.tok_emb.weight", "embed.weight")
_STACKED = (
    ("attn.fused_wqa_wkv", "attn.wq_a", 0),
    ("attn.fused_wqa_wkv", "attn.wkv", 1),
    ("gate_up_proj", "w1", 0),
    ("gate_up_proj", "w3", 1),
)


def _fp32_param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape, dtype=torch.float32), requires_grad=False)


class CpuDeepSeekV4MTPLayer(nn.Module):
    def __init__(self, vllm_config: VllmConfig, topk_indices_buffer: torch.Tensor, prefix: str):
        super().__init__()
        config = vllm_config.speculative_config.draft_model_config.hf_config
        self.config = config
        self.hidden_size = config.hidden_size
        self.hc_mult = config.hc_mult
        self.hc_eps = config.hc_eps
        self.rms_norm_eps = config.rms_norm_eps
        quant_config = vllm_config.quant_config
        self.enorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.hnorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        # Embedding and target-hidden projections, kept apart as in the checkpoint.
        self.e_proj, self.h_proj = (
            ReplicatedLinear(
                config.hidden_size,
                config.hidden_size,
                bias=False,
                return_bias=False,
                quant_config=quant_config,
                prefix=f"{prefix}.{name}",
            )
            for name in ("e_proj", "h_proj")
        )
        hc_dim = config.hc_mult * config.hidden_size
        self.hc_head_fn = _fp32_param(config.hc_mult, hc_dim)
        self.hc_head_base = _fp32_param(config.hc_mult)
        self.hc_head_scale = _fp32_param(1)
        self.hc_head_op = HCHeadOp()
        self.shared_head = SharedHead(config, prefix, quant_config, defer_lm_head=True)
        self.mtp_block = DeepseekV4DecoderLayer(
            vllm_config, prefix, topk_indices_buffer=topk_indices_buffer
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        previous_hidden_states: torch.Tensor,
        inputs_embeds: torch.Tensor,
    ) -> torch.Tensor:
        # The target's pre-hc_head residual, flat [T, hc * H] -> [T, hc, H].
        previous = previous_hidden_states.view(-1, self.hc_mult, self.hidden_size)
        # Position 0 has no previous token to predict from.
        inputs_embeds = torch.where(positions.unsqueeze(-1) == 0, 0, inputs_embeds)
        x = self.h_proj(self.hnorm(previous)) + self.e_proj(self.enorm(inputs_embeds)).unsqueeze(-2)
        x, residual, post_mix, res_mix = self.mtp_block(
            positions=positions, x=x, input_ids=input_ids
        )
        if residual is not None:
            # Deferred path: the block left the final post-mix to its caller.
            x = self.mtp_block.hc_post(x, residual, post_mix, res_mix)
        # Flat pre-hc_head residual: fed back as the hidden state of the next step.
        return x.flatten(1)

    def logits_input(self, hidden_states: torch.Tensor) -> torch.Tensor:
        streams = hidden_states.view(-1, self.hc_mult, self.hidden_size)
        dense = self.hc_head_op(
            streams,
            self.hc_head_fn,
            self.hc_head_scale,
            self.hc_head_base,
            self.rms_norm_eps,
            self.hc_eps,
        )
        return self.shared_head.norm(dense)


class CpuDeepSeekV4MultiTokenPredictor(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = vllm_config.speculative_config.draft_model_config.hf_config
        self.mtp_start_layer_idx = config.num_hidden_layers
        self.num_mtp_layers = config.num_nextn_predict_layers
        self.topk_indices_buffer = torch.empty(
            vllm_config.scheduler_config.max_num_batched_tokens,
            config.index_topk,
            dtype=torch.int32,
        )
        first = self.mtp_start_layer_idx
        self.layers = nn.ModuleDict(
            {
                str(i): CpuDeepSeekV4MTPLayer(
                    vllm_config, self.topk_indices_buffer, f"{prefix}.layers.{i}"
                )
                for i in range(first, first + self.num_mtp_layers)
            }
        )
        self.logits_processor = LogitsProcessor(config.vocab_size)
        # `embed_tokens` is the target's, attached by vLLM's proposer.

    def layer_for_step(self, spec_step_idx: int) -> CpuDeepSeekV4MTPLayer:
        index = self.mtp_start_layer_idx + spec_step_idx % self.num_mtp_layers
        return self.layers[str(index)]


class CpuDeepSeekV4MTP(nn.Module):
    """Registered as ``DeepSeekV4MTPModel`` on the CPU platform."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        self.config = vllm_config.speculative_config.draft_model_config.hf_config
        self.model = CpuDeepSeekV4MultiTokenPredictor(
            vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model")
        )

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        intermediate_tensors: object = None,
        inputs_embeds: torch.Tensor | None = None,
        spec_step_idx: int = 0,
    ) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.embed_input_ids(input_ids)
        layer = self.model.layer_for_step(spec_step_idx)
        return layer(input_ids, positions, hidden_states, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor, spec_step_idx: int = 0) -> torch.Tensor:
        layer = self.model.layer_for_step(spec_step_idx)
        return self.model.logits_processor(
            layer.shared_head.head, layer.logits_input(hidden_states)
        )

    def _param_name(self, index: int, rest: str) -> str | None:
        layer = f"model.layers.{self.model.mtp_start_layer_idx + index}"
        if rest in _SHARED_WITH_TARGET:
            return None
        if rest in _LAYER_OWN:
            return f"{layer}.{_LAYER_OWN[rest]}"
        rest = rest.replace(".ffn.gate.bias", ".ffn.gate.e_score_correction_bias")
        rest = rest.replace("ffn.gate.bias", "ffn.gate.e_score_correction_bias")
        rest = rest.replace("shared_experts.w2", "shared_experts.down_proj")
        return f"{layer}.mtp_block.{rest}"

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Load ``mtp.{i}.*`` from the whole checkpoint stream; everything else is the target's."""
        params = dict(self.named_parameters())
        experts = fused_moe_make_expert_params_mapping(
            self,
            ckpt_gate_proj_name="w1",
            ckpt_down_proj_name="w2",
            ckpt_up_proj_name="w3",
            num_experts=self.config.n_routed_experts,
        )
        loaded: set[str] = set()
        for ckpt_name, tensor in weights:
            match = _MTP_NAME.match(ckpt_name)
            if not match or int(match.group(1)) >= self.model.num_mtp_layers:
                continue
            name = self._param_name(int(match.group(1)), match.group(2))
            if name is None:
                continue
            if ".experts." in name:
                for param_name, weight_name, expert_id, shard_id in experts:
                    if weight_name not in name:
                        continue
                    mapped = name.replace(weight_name, param_name)
                    params[mapped].weight_loader(
                        params[mapped], tensor, mapped, shard_id=shard_id, expert_id=expert_id
                    )
                    loaded.add(mapped)
                    break
                else:
                    raise ValueError(f"MTP expert weight {ckpt_name!r} matches no expert slot")
                continue
            for param_name, shard_name, shard_id in _STACKED:
                if shard_name in name and ".experts." not in name:
                    fused = name.replace(shard_name, param_name)
                    params[fused].weight_loader(params[fused], tensor, shard_id)
                    loaded.add(fused)
                    break
            else:
                if name not in params:
                    raise ValueError(
                        f"MTP checkpoint weight {ckpt_name!r} has no parameter {name!r}"
                    )
                param = params[name]
                if name.endswith("attn_sink") and not hasattr(param, "weight_loader"):
                    # This rank's heads only (the sink is per head; TP shards the heads),
                    # as vLLM 0.32's CPU DSV4 loader does (models/deepseek_v4/cpu/model.py).
                    # 0.33 gives the sink its own TP-aware loader (weight_utils.py
                    # make_attention_sink -> load_attention_sink), taken below.
                    local = tensor.shape[0] // get_tensor_model_parallel_world_size()
                    start = local * get_tensor_model_parallel_rank()
                    param.data[:local].copy_(tensor[start : start + local])
                else:
                    getattr(param, "weight_loader", default_weight_loader)(param, tensor)
                loaded.add(name)
        return loaded
