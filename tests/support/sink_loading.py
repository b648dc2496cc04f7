"""Child process: the CPU MTP draft's attention-sink loading under fake TP, one JSON line.

For TP world size 2 and each rank, the sink is built as this vLLM's own DSV4 attention
builds it (0.33: ``make_attention_sink``, which carries a TP-aware weight_loader; 0.32:
a plain -inf ``nn.Parameter``), the real ``CpuDeepSeekV4MTP.load_weights`` is run on a
stand-in holding only that parameter, and the loaded values are reported. TP is faked
through ``vllm.distributed.parallel_state._TP``, which ``get_tensor_model_parallel_rank``
and ``_world_size`` read in both versions; no torch.distributed.

    python -m tests.support.sink_loading
"""

import json
import types

import torch
import torch.nn as nn
import vllm
from vllm.distributed import parallel_state
from vllm.model_executor.model_loader import weight_utils
from vllm.models.deepseek_v4.cpu.cpu_sparse import DeepseekV4CPUAttention

from model_overrides.models.dsv4_mtp_cpu import CpuDeepSeekV4MTP

HEADS, WORLD, START = 8, 2, 3  # START: the MTP layer's index (num_hidden_layers)


def make_sink(local_heads: int) -> nn.Parameter:
    padded = DeepseekV4CPUAttention.get_padded_num_q_heads(local_heads)
    if hasattr(weight_utils, "make_attention_sink"):  # 0.33 deepseek_v4/attention.py
        return weight_utils.make_attention_sink(padded, torch.float32)
    # 0.32 deepseek_v4/attention.py
    return nn.Parameter(
        torch.full((padded,), -float("inf"), dtype=torch.float32), requires_grad=False
    )


class StandIn(nn.Module):
    """What ``load_weights`` reads: config, model.{mtp_start_layer_idx,num_mtp_layers},
    ``_param_name`` and the parameters (one: the MTP block's sink)."""

    _param_name = CpuDeepSeekV4MTP._param_name

    def __init__(self, sink: nn.Parameter):
        super().__init__()
        self.config = types.SimpleNamespace(n_routed_experts=1)
        attn, block, layer = nn.Module(), nn.Module(), nn.Module()
        attn.attn_sink = sink
        block.attn = attn
        layer.mtp_block = block
        self.model = nn.Module()
        self.model.mtp_start_layer_idx, self.model.num_mtp_layers = START, 1
        self.model.layers = nn.ModuleDict({str(START): layer})


def main() -> None:
    saved = parallel_state._TP
    ranks = {}
    try:
        for rank in range(WORLD):
            parallel_state._TP = types.SimpleNamespace(world_size=WORLD, rank_in_group=rank)
            standin = StandIn(make_sink(HEADS // WORLD))
            ckpt = [("mtp.0.attn.attn_sink", torch.arange(HEADS, dtype=torch.float32))]
            loaded = CpuDeepSeekV4MTP.load_weights(standin, ckpt)
            sink = standin.model.layers[str(START)].mtp_block.attn.attn_sink
            ranks[rank] = {
                "values": sink.data.tolist(),
                "own_loader": hasattr(sink, "weight_loader"),
                "loaded": sorted(loaded),
            }
    finally:
        parallel_state._TP = saved
    print("SINKS " + json.dumps({"version": vllm.__version__, "heads": HEADS, "ranks": ranks}))


if __name__ == "__main__":
    main()
