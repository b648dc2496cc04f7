"""Writes a bench model's directory: config.json, generation config and a tokenizer.

The tokenizer covers the whole released vocabulary (129,280 ids): the golden words first,
so the bench's prompts tokenize as words, then one filler word per remaining id, so any id
a dummy-weights model emits decodes to text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from serving.bench_model.shapes import MARKER, ExpertFormat, Shape, bench_config
from serving.golden.design import GoldenDesign
from serving.golden.tokenizer import write_tokenizer

# What the tokenizer may be asked to hold; vLLM's max_model_len bounds a request.
TOKENIZER_MAX_LENGTH = 1 << 20


class BenchModelError(ValueError):
    """A bench model directory holds something else; the message says what."""


def write_bench_model(
    out_dir: str | Path, shape: Shape, layers: int, experts: ExpertFormat = "fp4"
) -> Path:
    """Write the config-only checkpoint; the same arguments always give the same bytes."""
    cfg = bench_config(shape, layers, experts)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    design = GoldenDesign()
    fillers = [f"id{i}" for i in range(len(design.vocab), cfg["vocab_size"])]
    write_tokenizer(design, out, fillers, TOKENIZER_MAX_LENGTH)
    (out / "generation_config.json").write_text(json.dumps({"do_sample": False}))
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    return out


def read_bench_model(model_dir: str | Path) -> dict[str, Any] | None:
    """The bench marker of the checkpoint at ``model_dir``; None when it has no config."""
    path = Path(model_dir) / "config.json"
    if not path.exists():
        return None
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BenchModelError(f"{path}: not a readable config ({exc})") from None
    marker = cfg.get(MARKER) if isinstance(cfg, dict) else None
    if not isinstance(marker, dict):
        raise BenchModelError(f"{path} is not a bench model's config (no {MARKER!r} key)")
    return marker


def ensure_bench_model(
    model_dir: str | Path, shape: Shape, layers: int, experts: ExpertFormat
) -> bool:
    """Write the bench model at ``model_dir`` unless it is there; True when written.
    A different bench model there is an error (it would be benched under this name)."""
    found = read_bench_model(model_dir)
    wanted = {"shape": shape, "layers": layers, "experts": experts}
    if found is None:
        write_bench_model(model_dir, shape, layers, experts)
        return True
    differs = {k: found.get(k) for k, v in wanted.items() if found.get(k) != v}
    if differs:
        raise BenchModelError(
            f"bench model at {model_dir} has {differs}, the preset asks for "
            f"{ {k: wanted[k] for k in differs} }: point model.source at another directory"
        )
    return False
