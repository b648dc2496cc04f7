"""docs/disaggregation.md's table of the CPU run of the disaggregated Ray Serve app, from
the record tests/serving/disagg/test_disaggregation_cpu.py writes."""

from __future__ import annotations

from typing import Any

from serving.records.regions import table_row
from serving.records.store import Record, load

RECORD = "disaggregation_cpu"
DOC = "docs/disaggregation.md"
REGION = "disaggregation-cpu"
COMMAND = "make record-disaggregation"


def _texts(f: dict[str, Any]) -> str:
    texts = f["texts"]
    equal = [n for n, t in texts.items() if t["parted_at"] is None]
    parted = {n: t for n, t in texts.items() if t["parted_at"] is not None}
    out = f"{len(equal)} of {len(texts)} equal one engine's"
    for name, t in parted.items():
        out += (
            f"; {name} parted at token {t['parted_at']}, every token within "
            f"{t['max_gap']:.2f} of the top log-prob"
        )
    return out


def _kv(f: dict[str, Any]) -> str:
    kv = {name: int(value) for name, value in f["kv"].items()}  # counters come as floats
    return (
        f"decode took {kv['moved_tokens']:,} of {f['prompt_tokens']:,} prompt tokens over NIXL "
        f"in {kv['transfers']} transfers of {kv['bytes'] / 1e6:.1f} MB; prefill computed "
        f"{kv['computed_tokens']:,}; {kv['failed']} failed"
    )


def _killed(f: dict[str, Any]) -> str:
    k = f["killed_prefill"]
    got = "the one-engine text" if k["status"] is None else f"HTTP {k['status']}"
    return (
        f"{got} {k['answered_s']:.1f} s after the kill; the app whole again "
        f"{k['whole_again_s']:.0f} s after it (a new prefill engine's start)"
    )


ROWS = (
    ("prompts", lambda f: ", ".join(f"{n}: {t} tokens" for n, t in f["prompts"].items())),
    ("greedy text against one engine", _texts),
    ("KV over NIXL", _kv),
    ("prefill replica SIGKILLed mid-prompt", _killed),
)


def table(record: Record | None = None) -> str:
    record = record or load(RECORD)
    lines = ["| case | measured |", "|---|---|"]
    for case, cell in ROWS:
        lines.append(table_row([case, cell(record.figures)]))
    return "\n".join(lines) + f"\n\nMeasured: {record.source()}.\n"
