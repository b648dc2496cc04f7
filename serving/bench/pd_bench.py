"""`dsv4-serve bench --pd`: prefill/decode disaggregation against aggregated serving on
agentic traffic: conversations that share a long system prompt and grow turn by turn
(serving/bench/conversations.py), short replies, played at each concurrency.

The arms are two Ray Serve apps behind the same ingress and gateway: one engine
(``ray-app-ingress``) and a prefill and a decode engine with the KV over NIXL
(``ray-app-pd``; on a one-GPU machine both engines share the card). They take turns
(serving/bench/arms.py): each round starts one arm's app, plays every concurrency level
on it and stops it. Running deployments (``--target NAME=URL``) can be played instead.

Before its levels each arm plays a warm-up (one turn per client at every level, on prompts
of their own): a GPU engine compiles kernels for batch shapes the first time it sees them
(DeepGEMM's, when its warm-up is skipped), which stalled a first batch of 8 for 7-9 s.
Replies are of fixed length (``ignore_eos``).

The figures are per level and per arm (time to first token and time per output token,
p50 and p90, output tokens/s, prefix-cache hits), and the ratios of the P/D arm to the
aggregated one measured in the same run, with the share of replies whose text is the same
in both arms (greedy decoding; batches of different make-up may round differently). A
preset with synthetic acceptance draws its accepted tokens at random, so its texts are not
compared."""

from __future__ import annotations

import asyncio
import json
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import httpx

from serving.bench.arms import ArmRounds, play_in_turns
from serving.bench.conversations import (
    Client,
    ConversationWorkload,
    Turn,
    quantiles,
    run_sessions,
    sessions,
)
from serving.bench.load import Target, settled_scrape
from serving.bench.stats import KV_COUNTERS, kv_transfer_delta
from serving.bench.targets import AGGREGATED, DISAGGREGATED, LocalSetup
from serving.monitoring.metrics_page import Samples, scrape

# What P/D is for: decode steps no longer wait behind other requests' prefills, so the time
# per output token's tail should not be worse than one engine's (P/D / aggregated <= 1) from
# this concurrency up, with throughput no lower (>= 1).
TARGET_TPOT_P90_RATIO = 1.0
TARGET_THROUGHPUT_RATIO = 1.0
TARGETS_FROM_CONCURRENCY = 8
Progress = Callable[[str], None]


def level_workload(base: ConversationWorkload, concurrency: int) -> ConversationWorkload:
    """The workload at one level: at least one conversation per concurrent client."""
    return replace(
        base, concurrency=concurrency, conversations=max(base.conversations, concurrency)
    )


def warmup_workload(base: ConversationWorkload, concurrency: int) -> ConversationWorkload:
    """One turn per client at a level, on other prompts (another seed), so the measured
    turns find no prompt of theirs cached by it."""
    return replace(
        base,
        concurrency=concurrency,
        conversations=concurrency,
        turns=1,
        unrelated=0,
        seed=base.seed + 1,
    )


def tpot_s(turn: Turn) -> float | None:
    """Time per output token after the first (the decode steps a client sees)."""
    if turn.ttft_s is None or turn.output_tokens < 2:
        return None
    return (turn.latency_s - turn.ttft_s) / (turn.output_tokens - 1)


def summarise(turns: list[Turn], wall_s: float) -> dict:
    """One level of one arm (its rounds' turns together) in figures."""
    ok = [t for t in turns if t.ok]
    counted = [t for t in ok if t.cached_tokens is not None]
    prompt = sum(t.prompt_tokens for t in counted)
    return {
        "requests": len(turns),
        "failed": len(turns) - len(ok),
        "errors": sorted({t.error for t in turns if t.error})[:5],
        "ttft": quantiles([t.ttft_s for t in ok if t.ttft_s is not None]),
        "tpot": quantiles([v for t in ok if (v := tpot_s(t)) is not None]),
        "prompt_tokens_mean": statistics.fmean(t.prompt_tokens for t in ok) if ok else None,
        "hit_rate": sum(t.cached_tokens for t in counted) / prompt if prompt else None,
        "output_tokens_per_s": sum(t.output_tokens for t in ok) / wall_s if wall_s else 0.0,
        "wall_s": wall_s,
    }


def summarise_arm(results: list[dict], starts: list[float]) -> dict:
    """An arm over its rounds (each ``{"levels": {c: {"turns": [...], "wall_s": s}}}``,
    with its engines' KV counters over the levels under ``kv`` when scraped)."""
    levels: dict[str, dict] = {}
    for level in results[0]["levels"] if results else []:
        played = [r["levels"][level] for r in results if level in r["levels"]]
        turns = [Turn(**row) for p in played for row in p["turns"]]
        levels[level] = summarise(turns, sum(p["wall_s"] for p in played))
    kv = [r["kv"] for r in results if r.get("kv")]
    return {
        "levels": levels,
        "ready_s": statistics.median(starts) if starts else None,
        "kv": _sum_kv(kv) if kv else None,
    }


def _sum_kv(deltas: list[dict]) -> dict:
    out: dict = {k: sum(d[k] for d in deltas) for k in KV_COUNTERS}
    sources = {src for d in deltas for src in d["prompt_tokens_by_source"]}
    out["prompt_tokens_by_source"] = {
        src: sum(d["prompt_tokens_by_source"].get(src, 0.0) for d in deltas)
        for src in sorted(sources)
    }
    return out


def same_text_share(first: dict, second: dict) -> float | None:
    """Of the turns both arms completed in their first round at one level, the share whose
    reply is the same text."""

    def texts(level: dict) -> dict:
        return {(t["session"], t["turn"]): t["text"] for t in level["turns"] if t["ok"]}

    a, b = texts(first), texts(second)
    both = a.keys() & b.keys()
    return sum(a[k] == b[k] for k in both) / len(both) if both else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def arm_pair(arms: list[str]) -> tuple[str, str] | None:
    """(aggregated, disaggregated): the bench's own arms, else the first two given."""
    if AGGREGATED in arms and DISAGGREGATED in arms:
        return AGGREGATED, DISAGGREGATED
    return (arms[0], arms[1]) if len(arms) >= 2 else None


def compare(
    summary: dict[str, dict],
    raw: dict[str, list[dict]],
    pair: tuple[str, str],
    texts_comparable: bool = True,
) -> dict:
    """Per level, the P/D arm's figures over the aggregated arm's, and the targets."""
    agg_name, pd_name = pair
    agg, pd = summary.get(agg_name), summary.get(pd_name)
    if not agg or not pd:
        return {}
    out: dict = {"aggregated": agg_name, "disaggregated": pd_name, "levels": {}}
    for level, a in agg["levels"].items():
        if (p := pd["levels"].get(level)) is None:
            continue
        row = {
            f"{what}_{q}_ratio": _ratio(p[what][f"{q}_s"], a[what][f"{q}_s"])
            for what in ("ttft", "tpot")
            for q in ("p50", "p90")
        }
        row["throughput_ratio"] = _ratio(p["output_tokens_per_s"], a["output_tokens_per_s"])
        row["same_text"] = (
            same_text_share(raw[agg_name][0]["levels"][level], raw[pd_name][0]["levels"][level])
            if texts_comparable
            else None
        )
        if int(level) >= TARGETS_FROM_CONCURRENCY:
            met = {}
            if row["tpot_p90_ratio"] is not None:
                met["tpot_p90_ratio"] = row["tpot_p90_ratio"] <= TARGET_TPOT_P90_RATIO
            if row["throughput_ratio"] is not None:
                met["throughput_ratio"] = row["throughput_ratio"] >= TARGET_THROUGHPUT_RATIO
            row["met"] = met
        out["levels"][level] = row
    return out


def _play(
    target: Target,
    base: ConversationWorkload,
    concurrency: list[int],
    words: list[str],
    progress: Progress,
) -> dict:
    cfg = Client(target.base_url, target.model, target.api_key, extra_body={"ignore_eos": True})

    def play(workload: ConversationWorkload, label: str) -> tuple[list[Turn], float]:
        def note(done: int, total: int) -> None:
            if done == total or done % 50 == 0:
                progress(f"{target.name} {label}: {done}/{total} turns")

        return asyncio.run(run_sessions(cfg, workload, sessions(workload, words), note))

    warmup = {}
    for c in concurrency:
        turns, wall = play(warmup_workload(base, c), f"warm-up c={c}")
        warmup[str(c)] = {"failed": sum(not t.ok for t in turns), "wall_s": wall}
    before = _scrape(target, progress)
    levels = {}
    for c in concurrency:
        turns, wall = play(level_workload(base, c), f"c={c}")
        levels[str(c)] = {"turns": [t.row() for t in turns], "wall_s": wall}
    played = {"levels": levels, "warmup": warmup}
    if before is not None:
        after = _scrape(target, progress, before)
        played["kv"] = kv_transfer_delta(before, after) if after is not None else None
    return played


def _scrape(target: Target, progress: Progress, before: Samples | None = None) -> Samples | None:
    """The target's /metrics (after the levels: once Ray's export has caught up)."""
    if not target.metrics_url:
        return None
    try:
        if before is None:
            return scrape(target.metrics_url)
        return settled_scrape(
            target.metrics_url, before, target.settle_period_s, target.settle_timeout_s
        )
    except (httpx.HTTPError, OSError) as exc:
        progress(f"{target.name}: /metrics unreadable ({exc})")
        return None


def run_all(
    setup: LocalSetup | None,
    kinds: list[str],
    remote: list[Target],
    base: ConversationWorkload,
    concurrency: list[int],
    rounds: int,
    words: list[str],
    logs: Path,
    progress: Progress,
    out: Path | None = None,
) -> dict:
    """Every arm once per round, each level in turn on it; ``out``: the report is written
    after every arm's turn, not only at the end."""
    levels = sorted(set(concurrency))
    pair = arm_pair([*kinds, *(t.name for t in remote)])
    # Synthetic acceptance takes drafted tokens at random: such texts differ by design.
    comparable = not (setup and setup.preset.speculation.synthetic_acceptance)

    def result(turns: ArmRounds) -> dict:
        summary = {
            name: summarise_arm(results, turns.starts.get(name, []))
            for name, results in turns.played.items()
            if results
        }
        return {
            "workload": {**base.__dict__, "concurrency": levels},
            "rounds": rounds,
            "interrupted": turns.interrupted,
            "arms": summary,
            "compare": compare(summary, turns.played, pair, comparable) if pair else {},
            "texts_compared": comparable,
            "start_errors": turns.errors,
            "raw": turns.played,
            "setup": setup.summary() if setup else None,
        }

    turns = play_in_turns(
        setup,
        kinds,
        remote,
        rounds,
        lambda t: _play(t, base, levels, words, progress),
        logs,
        progress,
        after_each=(lambda played: write(result(played), out)) if out else None,
    )
    return result(turns)


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.1f}"


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def markdown(result: dict) -> str:
    lines = [
        "| arm | c | requests (failed) | prompt tokens (mean) | hit rate | TTFT p50 / p90 ms | "
        "TPOT p50 / p90 ms | output tok/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, arm in result["arms"].items():
        for level, s in arm["levels"].items():
            prompt = s["prompt_tokens_mean"]
            lines.append(
                f"| {name} | {level} | {s['requests']} ({s['failed']}) | "
                f"{'n/a' if prompt is None else f'{prompt:.0f}'} | {_x(s['hit_rate'])} | "
                f"{_ms(s['ttft']['p50_s'])} / {_ms(s['ttft']['p90_s'])} | "
                f"{_ms(s['tpot']['p50_s'])} / {_ms(s['tpot']['p90_s'])} | "
                f"{s['output_tokens_per_s']:.0f} |"
            )
    for name, arm in result["arms"].items():
        if kv := arm.get("kv"):
            by_source = ", ".join(
                f"{src} {tokens:.0f}" for src, tokens in kv["prompt_tokens_by_source"].items()
            )
            lines.append(
                f"\n{name}: prompt tokens by source ({by_source}); "
                f"{kv['transfers']:.0f} NIXL transfers, {kv['transfer_bytes'] / 1e6:.1f} MB, "
                f"{kv['transfer_seconds']:.2f} s summed, {kv['failed_transfers']:.0f} failed"
            )
    cmp = result["compare"]
    if cmp:
        lines += [
            "",
            f"{cmp['disaggregated']} / {cmp['aggregated']} (targets from c = "
            f"{TARGETS_FROM_CONCURRENCY}: TPOT p90 <= {TARGET_TPOT_P90_RATIO}, throughput >= "
            f"{TARGET_THROUGHPUT_RATIO}):",
            "",
            "| c | TTFT p50 | TTFT p90 | TPOT p50 | TPOT p90 | throughput | same text | met |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for level, row in cmp["levels"].items():
            lines.append(
                f"| {level} | {_x(row['ttft_p50_ratio'])} | {_x(row['ttft_p90_ratio'])} | "
                f"{_x(row['tpot_p50_ratio'])} | {_x(row['tpot_p90_ratio'])} | "
                f"{_x(row['throughput_ratio'])} | {_x(row['same_text'])} | "
                f"{row.get('met', '-')} |"
            )
    if cmp and not result.get("texts_compared", True):
        lines.append(
            "\nSame text: not compared (synthetic acceptance draws accepted tokens at random)."
        )
    for name, error in result["start_errors"].items():
        lines.append(f"\n- {name} did not start: {error.get('error', error)}")
    return "\n".join(lines)


def write(result: dict, out: Path) -> list[Path]:
    """pd.json (figures, no replies), pd-turns.json (every turn, for the logs) and pd.md,
    with the plots."""
    from serving.bench.pd_plots import plot_levels

    out.mkdir(parents=True, exist_ok=True)
    summary = {k: v for k, v in result.items() if k != "raw"}
    paths = [out / "pd.json", out / "pd-turns.json", out / "pd.md"]
    paths[0].write_text(json.dumps(summary, indent=2, sort_keys=True))
    paths[1].write_text(json.dumps(result["raw"]))
    paths[2].write_text(markdown(result) + "\n")
    return paths + ([plot_levels(result, out)] if result["arms"] else [])
