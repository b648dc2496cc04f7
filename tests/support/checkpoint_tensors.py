"""Every tensor of a safetensors checkpoint directory, by name (for comparing checkpoints)."""

from pathlib import Path

from safetensors import safe_open


def checkpoint_tensors(directory: Path) -> dict:
    out = {}
    for shard in directory.glob("*.safetensors"):
        with safe_open(str(shard), "pt") as f:
            out |= {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
    return out
