"""docs/speculation.md's table of draft sampling on the spread golden target, from the record
tests/serving/golden/test_golden_draft_sampling.py writes on the CPU and from the GPU runs'
summaries of the same test (serving.bench.draft_sampling_record): what vLLM's counters
showed for greedy and probabilistic drafts beside what the design says they must."""

from __future__ import annotations

import json
from typing import Any

from serving.golden import GoldenDesign
from serving.records.regions import table_row
from serving.records.store import ROOT, Record, load

RECORD = "draft_sampling_cpu"
GPU_RUNS = ("docs/bench-draft-sampling/h100-golden-fixed-kv.json",)
DOC = "docs/speculation.md"
REGION = "draft-sampling-cpu"
COMMAND = "make record-draft-sampling"


def _rates(values: list[float]) -> str:
    return " / ".join(f"{v:.3f}" for v in values)


def _design(f: dict[str, Any]) -> GoldenDesign:
    return GoldenDesign(
        next_token_choices=f["next_token_choices"],
        draft_logit_scale=f.get("draft_logit_scale", 1.0),
    )


def _rows(run: str, f: dict[str, Any]) -> list[str]:
    design = _design(f)
    favourite = max(design.next_token_probs(design.first_word_id).values())
    lines = []
    for method, counts in f["methods"].items():
        designed = design.expected_acceptance_rates(f["k"], method)
        steps = counts["drafts"]
        measured = [n / steps for n in counts["accepted_per_pos"]]
        cells = [
            run,
            method,
            f"{steps:,}",
            f"{_rates(measured)} ({_rates(designed)})",
            f"{1 + sum(measured):.2f} ({1 + sum(designed):.2f})",
            f"{counts['favourite'] / counts['tokens']:.3f} of {counts['tokens']:,}"
            f" ({favourite:.3f})",
        ]
        lines.append(table_row(cells))
    return lines


def table(record: Record | None = None, gpu_runs: list[dict[str, Any]] | None = None) -> str:
    record = record or load(RECORD)
    if gpu_runs is None:
        gpu_runs = [json.loads((ROOT / path).read_text()) for path in GPU_RUNS]
    f = record.figures
    lines = [
        "| run | drafts sampled | draft steps | accepted per position, measured (designed) |"
        " acceptance length, measured (designed) | sampled words that are the favourite,"
        " measured (target's probability) |",
        "|---|---|---|---|---|---|",
        *_rows(f"CPU, vLLM {record.vllm}", f),
    ]
    sources = [f"CPU: {record.source()}"]
    for path, run in zip(GPU_RUNS, gpu_runs, strict=True):
        for arm, golden in run["golden"].items():
            if golden["figures"]:  # an arm whose engines never finished has only its verdict
                label = f"{run['gpu']['name']} ({arm}), vLLM {golden['vllm']}"
                lines += _rows(label, golden["figures"])
            sources.append(
                f"{run['gpu']['name']} ({arm}): `{path}` ({run['commit']}, {run['date']}; "
                f"the test: {golden['result']}; `{run['command']}`)"
            )
    design = _design(f)
    return (
        "\n".join(lines)
        + f"\n\nk = {f['k']}, the target spread over {f['next_token_choices']} words, the "
        f"drafter's logits {design.draft_logit_scale:g} times the target's, temperature 1. "
        f"Measured: {'; '.join(sources)}.\n"
    )
