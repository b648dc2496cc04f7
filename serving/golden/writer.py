"""Writes the golden checkpoint directory: config, safetensors shards, tokenizer."""

import json
from pathlib import Path

from safetensors.torch import save_file

from serving.golden.architecture import golden_config
from serving.golden.design import GoldenDesign
from serving.golden.tokenizer import write_tokenizer
from serving.golden.weights import golden_tensors

MANIFEST = "golden.json"


def write_golden_model(out_dir: str | Path, design: GoldenDesign | None = None) -> Path:
    """Write the checkpoint; the same design always gives the same bytes."""
    design = design or GoldenDesign()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg, groups = golden_config(), list(golden_tensors(design))
    if design.weight_format == "fp8":
        from serving.golden.fp8 import fp8_config, fp8_groups

        groups = list(fp8_groups(groups, cfg))  # from the bf16 design's shapes
        cfg = fp8_config(cfg)
    weight_map: dict[str, str] = {}
    for i, tensors in enumerate(groups):
        shard = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file(tensors, str(out / shard), metadata={"format": "pt"})
        weight_map |= {name: shard for name in tensors}
    index = {"metadata": {}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    (out / "generation_config.json").write_text(json.dumps({"do_sample": False}))
    write_tokenizer(design, out)
    manifest = {
        "draft_agreement": design.draft_agreement,
        "seed": design.seed,
        "variant": design.variant,
        "weight_format": design.weight_format,
    }
    if design.draft_pattern != "random":  # absent: the checkpoints written before it
        manifest["draft_pattern"] = design.draft_pattern
    if design.spread:
        manifest["next_token_choices"] = design.next_token_choices
    if design.draft_logit_scale != 1.0:
        manifest["draft_logit_scale"] = design.draft_logit_scale
    (out / MANIFEST).write_text(json.dumps(manifest, sort_keys=True))
    return out


def read_design(model_dir: str | Path) -> GoldenDesign:
    manifest = json.loads((Path(model_dir) / MANIFEST).read_text())
    return GoldenDesign(**manifest)
