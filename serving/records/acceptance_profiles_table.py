"""docs/speculation.md's table of the bench's acceptance profiles, rendered from the code
that holds them (serving/bench/acceptance_profiles.py), so the page shows the rates the
bench runs."""

from __future__ import annotations

from serving.bench.acceptance_profiles import PROFILES
from serving.records.regions import table_row

DOC = "docs/speculation.md"
REGION = "acceptance-profiles"


def table() -> str:
    lines = [
        "| profile | rate per position (unconditional) | acceptance length at k = 1 / 2 / 3 |"
        " from |",
        "|---|---|---|---|",
    ]
    for p in PROFILES.values():
        cells = [
            f"`{p.name}`",
            " / ".join(f"{r:.2f}" for r in p.rates),
            " / ".join(f"{length:.2f}" for length in p.acceptance_lengths),
            p.source,
        ]
        lines.append(table_row(cells))
    return "\n".join(lines) + "\n"
