"""A copy of a golden checkpoint with some bf16 weights moved by one ulp: the noise yardstick.

A bf16 checkpoint fixes each weight only to within its last bit, so a model whose
log-probabilities move when a few weights move by one ulp cannot be asked to agree
more closely than that between two kernel paths. Routed experts get the same nudges,
so a checkpoint with identical experts keeps them identical.
"""

import re
import shutil
import zlib
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def _nudge(name: str, tensor: torch.Tensor, share: float, seed: int) -> torch.Tensor:
    if tensor.dtype != torch.bfloat16 or name in ("embed.weight", "head.weight"):
        return tensor
    key = re.sub(r"experts\.\d+\.", "experts.*.", name)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(key.encode()))
    chosen = (torch.rand(tensor.shape, generator=gen) < share) & (tensor != 0)
    step = torch.randint(0, 2, tensor.shape, generator=gen, dtype=torch.int16) * 2 - 1
    bits = tensor.view(torch.int16).clone()
    bits[chosen] += step[chosen]  # the neighbouring bf16 value, up or down
    return bits.view(torch.bfloat16)


def jittered_copy(src: Path, dst: Path, share: float = 0.05, seed: int = 1) -> Path:
    """``dst``: ``src`` with ``share`` of each non-zero bf16 weight moved by one ulp."""
    shutil.copytree(src, dst, dirs_exist_ok=True)
    for shard in sorted(src.glob("*.safetensors")):
        tensors = load_file(str(shard))
        nudged = {name: _nudge(name, t, share, seed) for name, t in tensors.items()}
        save_file(nudged, str(dst / shard.name), metadata={"format": "pt"})
    return dst
