"""The golden model's DSV4 hyper-parameters, within vLLM's CPU and Hopper kernel limits.

The CPU kernels fix n_routed_experts (256), index_topk (512), head_dim (512) and
qk_rope_head_dim (64). On Hopper (vLLM 0.32's CUDA path) DeepGEMM's indexer kernels take
32 or 64 index heads of dim 128, FlashMLA sparse 64 or 128 query heads (vLLM pads our 8),
a top-k that is a multiple of 64 and block size 256, and the TileLang mHC kernels a hidden
size that is a multiple of 128 with hc_mult * hidden a multiple of 512 (256 * 4). Everything
else is as small as DSV4 allows. One checkpoint serves the CPU and the GPU, so their
outputs can be compared.
"""

from typing import Any

from serving.golden.design import BOS_ID, EOS_ID, HIDDEN_SIZE, PAD_ID, VOCAB_SIZE

NUM_LAYERS = 8
NUM_MTP_LAYERS = 1
# One ratio per target layer plus one for the MTP layer (vLLM forces it to 1).
# 4 = compressed sparse attention with indexer, 128 = heavy compression, 0 = window only.
COMPRESS_RATIOS = [4, 128, 0, 4, 128, 0, 4, 128, 0]
MAX_POSITIONS = 4096
# DeepGEMM's paged MQA logits on Hopper: 32 or 64 heads; 64 is what DeepSeek-V4 ships.
INDEX_N_HEADS = 64


def golden_config() -> dict[str, Any]:
    return {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "torch_dtype": "bfloat16",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": HIDDEN_SIZE,
        "num_hidden_layers": NUM_LAYERS,
        "num_nextn_predict_layers": NUM_MTP_LAYERS,
        "num_attention_heads": 8,
        "num_key_value_heads": 1,
        "head_dim": 512,
        "qk_rope_head_dim": 64,
        "q_lora_rank": 128,
        "o_groups": 2,
        "o_lora_rank": 64,
        "index_n_heads": INDEX_N_HEADS,
        "index_head_dim": 128,
        "index_topk": 512,
        "compress_ratios": COMPRESS_RATIOS,
        "compress_rope_theta": 160000.0,
        "rope_theta": 10000.0,
        "rope_scaling": {
            "type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 1024,
            "beta_fast": 32,
            "beta_slow": 1,
        },
        "sliding_window": 128,
        "max_position_embeddings": MAX_POSITIONS,
        "hc_mult": 4,
        "hc_sinkhorn_iters": 20,
        "hc_eps": 1e-6,
        "moe_intermediate_size": 64,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 6,
        "num_hash_layers": 1,
        "scoring_func": "sqrtsoftplus",
        "topk_method": "noaux_tc",
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.5,
        "swiglu_limit": 10.0,
        "expert_dtype": "bf16",
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
    }
