"""docs/speculation.md's table of draft sampling on the spread golden target, from the record
tests/serving/golden/test_golden_draft_sampling.py writes: what vLLM's counters showed for
greedy and probabilistic drafts beside what the design says they must."""

from __future__ import annotations

from serving.golden import GoldenDesign
from serving.records.regions import table_row
from serving.records.store import Record, load

RECORD = "draft_sampling_cpu"
DOC = "docs/speculation.md"
REGION = "draft-sampling-cpu"
COMMAND = "make record-draft-sampling"


def _rates(values: list[float]) -> str:
    return " / ".join(f"{v:.3f}" for v in values)


def table(record: Record | None = None) -> str:
    record = record or load(RECORD)
    f = record.figures
    design = GoldenDesign(
        next_token_choices=f["next_token_choices"],
        draft_logit_scale=f.get("draft_logit_scale", 1.0),
    )
    favourite = max(design.next_token_probs(design.first_word_id).values())
    lines = [
        "| drafts sampled | draft steps | accepted per position, measured (designed) |"
        " acceptance length, measured (designed) | sampled words that are the favourite,"
        " measured (target's probability) |",
        "|---|---|---|---|---|",
    ]
    for method, run in f["methods"].items():
        designed = design.expected_acceptance_rates(f["k"], method)
        steps = run["drafts"]
        measured = [n / steps for n in run["accepted_per_pos"]]
        cells = [
            method,
            f"{steps:,}",
            f"{_rates(measured)} ({_rates(designed)})",
            f"{1 + sum(measured):.2f} ({1 + sum(designed):.2f})",
            f"{run['favourite'] / run['tokens']:.3f} of {run['tokens']:,} ({favourite:.3f})",
        ]
        lines.append(table_row(cells))
    return (
        "\n".join(lines)
        + f"\n\nk = {f['k']}, the target spread over {f['next_token_choices']} words, the "
        f"drafter's logits {design.draft_logit_scale:g} times the target's, temperature 1. "
        f"Measured: {record.source()}.\n"
    )
