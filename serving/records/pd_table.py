"""docs/benchmarks.md's table of a V4-Flash bench model disaggregated against one engine
(region "pd-vs-one-engine"), from the run's committed summary (docs/bench-pd-gpu/pd.json):
each arm's level figures and the summary's `compare` ratios, one row a concurrency."""

from __future__ import annotations

import json
from typing import Any

from serving.records.regions import table_row
from serving.records.store import ROOT

SUMMARY = "docs/bench-pd-gpu/pd.json"
DOC = "docs/benchmarks.md"
REGION = "pd-vs-one-engine"
Summary = dict[str, Any]
Level = dict[str, Any]


def _ms(seconds: float) -> str:
    # TPOT is a few ms a token: one decimal under 10 ms, whole ms from there on.
    ms = seconds * 1e3
    return f"{ms:.1f}" if ms < 10 else f"{ms:,.0f}"


def _level(summary: Summary, arm: str, c: str) -> Level:
    where = f"{SUMMARY}: arms.{arm}.levels.{c}"
    level = summary.get("arms", {}).get(arm, {}).get("levels", {}).get(c)
    if level is None:
        raise ValueError(f"{where}: no such level")
    for field in ("output_tokens_per_s", "requests", "failed", "ttft", "tpot"):
        if field not in level:
            raise ValueError(f"{where}: no {field}")
    for figure in ("ttft", "tpot"):
        for p in ("p50_s", "p90_s"):
            if p not in level[figure]:
                raise ValueError(f"{where}: no {figure}.{p}")
    return level


def _figures(level: Level) -> str:
    ttft, tpot = level["ttft"], level["tpot"]
    return (
        f"{_ms(ttft['p50_s'])} / {_ms(ttft['p90_s'])}, {_ms(tpot['p50_s'])} / "
        f"{_ms(tpot['p90_s'])}, {level['output_tokens_per_s']:,.0f}"
    )


def _ratios(summary: Summary, c: str) -> str:
    try:
        got = summary["compare"]["levels"][c]
        ratios = [got[f] for f in ("ttft_p50_ratio", "tpot_p50_ratio", "throughput_ratio")]
    except KeyError as exc:
        raise ValueError(f"{SUMMARY}: compare.levels.{c}: no {exc}") from None
    return ", ".join(f"{r:.2f}" for r in ratios)


def _row(summary: Summary, c: str) -> str:
    compare = summary["compare"]
    one = _level(summary, compare["aggregated"], c)
    pd = _level(summary, compare["disaggregated"], c)
    # Ratios weigh like against like only where both arms served the same requests whole; a
    # level where one lost or cut a request is shown in brackets and not compared.
    same = one["requests"] == pd["requests"] and not one["failed"] and not pd["failed"]
    if same:
        cells = [c, _figures(one), _figures(pd), _ratios(summary, c)]
    else:
        cells = [c, f"({_figures(one)})", f"({_figures(pd)})", "not comparable (below)"]
    return table_row(cells)


def table(summary: Summary | None = None) -> str:
    summary = summary or json.loads((ROOT / SUMMARY).read_text())
    lines = [
        "| c | one engine: TTFT p50 / p90, TPOT p50 / p90 (ms), tok/s | P/D: the same "
        "| P/D / one engine: TTFT p50, TPOT p50, throughput |",
        "|---|---|---|---|",
        *(_row(summary, str(c)) for c in summary["workload"]["concurrency"]),
    ]
    m, rounds = summary.get("client_machine"), summary["rounds"]
    # A summary from before the client machine was recorded names none.
    where = m and f": {m['gpu']['name']}, vLLM {m['software']['vllm']}"
    return (
        "\n".join(lines) + f"\n\nFrom `{SUMMARY}`{where or ''}, "
        f"{rounds} round{'' if rounds == 1 else 's'} a level.\n"
    )
