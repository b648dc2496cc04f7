"""Bench models: DeepSeek-V4's released layer shapes with fewer layers and no weights.

``write_bench_model`` writes a config-only checkpoint (config, tokenizer, a manifest);
vLLM serves it with ``load_format="dummy"``. What a decode step costs per layer is the
released model's; what the model says is noise, so its MTP acceptance is made up by
vLLM's synthetic rejection sampler (``speculation.synthetic_acceptance``).
"""

from serving.bench_model.shapes import MARKER, RELEASED, bench_config, released_layers
from serving.bench_model.writer import BenchModelError, read_bench_model, write_bench_model

__all__ = [
    "MARKER",
    "RELEASED",
    "BenchModelError",
    "bench_config",
    "read_bench_model",
    "released_layers",
    "write_bench_model",
]
