"""A break-even map projected from one measured real-width run, for acceptance profiles it
did not run: each profile's output tok/s at k is the run's tok/s at k times the profile's
acceptance length over the one the run measured.

    python -m serving.bench.break_even_projection RECORD RUN --commit REV --date YYYY-MM-DD \\
        [--plot PNG] > SUMMARY.json

RECORD is a committed real-width record (docs/bench-realwidth/*.json) and RUN one of its
runs; each target's tok/s is its last round's, the one that found every cache warm.

It rests on one assumption: a step costs the same whatever its drafts' fate. That holds for
what a step runs at k (the verify pass scores k + 1 tokens per request, the drafter makes
k passes) and for the synthetic acceptance the run used. It does not hold for prefill's
share of the work, which grows as requests finish in fewer steps, so the projection
flatters speculation where prefill weighs (short outputs, long prompts). A run with
``vllm-kK~PROFILE`` targets measures the same map and replaces it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from serving.bench.acceptance_profiles import PROFILES, AcceptanceProfile
from serving.bench.analysis import MEASURED, break_even_row, static_k


def _k(target: str) -> int:
    if (k := static_k(target)) is None:
        raise ValueError(f"{target!r} is not a vllm-kK target")
    return k


def project(cells: dict[str, dict[str, dict]], profiles: list[AcceptanceProfile]) -> list[dict]:
    """``cells``: target (vllm-kK) -> concurrency -> {"tok_s_per_round", "acceptance_length"}
    as the real-width records hold them. One row per profile (the run's own first) and
    concurrency, as ``analysis.break_even`` gives a measured map."""
    by_k = {_k(target): levels for target, levels in cells.items()}
    if 0 not in by_k or len(by_k) < 2:
        raise ValueError("the run needs vllm-k0 and at least one k > 0")
    levels = sorted({int(c) for target in by_k.values() for c in target})
    rows = []
    for name, profile in [(MEASURED, None), *((p.name, p) for p in profiles)]:
        for c in levels:
            found: dict[int, float] = {}
            for k, target in by_k.items():
                cell = target.get(str(c))
                if cell is None:
                    continue
                tok_s = cell["tok_s_per_round"][-1]
                if k and profile is not None:
                    measured = cell.get("acceptance_length")
                    if not measured:
                        raise ValueError(f"vllm-k{k} at c = {c}: no acceptance_length measured")
                    tok_s *= profile.acceptance_lengths[k - 1] / measured
                found[k] = round(tok_s, 1)
            if 0 in found and len(found) > 1:
                rows.append(break_even_row(name, c, found))
    return rows


def summary(record: dict, run: str, source: str, commit: str, date: str) -> dict[str, Any]:
    measured = record["runs"][run]
    ks = sorted(_k(t) for t in measured["cells"] if _k(t))
    profiles = [p for p in PROFILES.values() if len(p.rates) >= max(ks)]
    return {
        "what": (
            f"break-even map projected from {source} run {run!r} ({measured['layers']} layers):"
            " each profile's tok/s at k is the measured tok/s at k (last round) times the"
            " profile's acceptance length over the measured one"
        ),
        "command": (
            f"python -m serving.bench.break_even_projection {source} {run}"
            f" --commit {commit} --date {date}"
        ),
        "commit": commit,
        "date": date,
        "source": {"record": source, "run": run, "date": record["date"]},
        "gpu": record["gpu"],
        "vllm": record["vllm"],
        "layers": measured["layers"],
        "profiles": {
            p.name: {"rates": list(p.rates), "acceptance_lengths": p.acceptance_lengths}
            for p in profiles
        },
        "rows": project(measured["cells"], profiles),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m serving.bench.break_even_projection")
    parser.add_argument("record", help="a real-width record (docs/bench-realwidth/*.json)")
    parser.add_argument("run", help="one of its runs, e.g. depth-6")
    parser.add_argument("--commit", required=True)
    parser.add_argument("--date", required=True)
    parser.add_argument("--plot", type=Path, help="also draw the map (one panel per profile)")
    args = parser.parse_args(argv)
    try:
        record = json.loads(Path(args.record).read_text())
        if args.run not in record.get("runs", {}):
            known = ", ".join(record.get("runs", {})) or "none"
            raise ValueError(f"{args.record} has no run {args.run!r} (runs: {known})")
        out = summary(record, args.run, args.record, args.commit, args.date)
    except (OSError, ValueError, KeyError) as exc:
        print(f"break_even_projection: {exc}", file=sys.stderr)
        return 2
    if args.plot:
        from serving.bench import plots

        plots.break_even({"figures": {"break_even": out["rows"]}}, args.plot)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
