"""`dsv4-serve bench --routing`: default routing against prefix routing on the
conversation workload (serving/bench/conversations.py), with a single replica as the
ideal hit rate.

The arms take turns (serving/bench/arms.py): every round starts each arm's app alone,
plays the same cells in order and stops it. A cell is one workload (a system-prompt
length at one concurrency) with a seed of its own, so no cell finds another's prompts in
the cache: each starts cold for its own prefix, on one app start per arm.

The figures are ratios of arms measured in the same run: prefix routing's hit rate
against the single replica's, its time to first token on the conversation turns and its
throughput against default routing's, and the largest share of requests one replica took.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from serving.bench.arms import play_in_turns
from serving.bench.conversations import (
    Client,
    ConversationWorkload,
    Turn,
    quantiles,
    run_sessions,
    sessions,
)
from serving.bench.load import Target
from serving.bench.targets import LocalSetup

DEFAULT, PREFIX, SINGLE = "ray-app", "ray-app-prefix", "ray-app-single"
TARGET_HIT_VS_IDEAL = 0.8
TARGET_TTFT_GAIN = 1.5
TARGET_THROUGHPUT = 1.0
TARGET_MAX_SHARE = 0.6
Progress = Callable[[str], None]


def summarise(turns: list[Turn], wall_s: float) -> dict:
    """One arm's round (or several rounds' turns together) in figures."""
    ok = [t for t in turns if t.ok]
    counted = [t for t in ok if t.cached_tokens is not None]
    replicas: dict[str, dict] = {}
    for t in ok:
        r = replicas.setdefault(t.replica or "?", {"requests": 0, "prompt": 0, "cached": 0})
        r["requests"] += 1
        r["prompt"] += t.prompt_tokens if t.cached_tokens is not None else 0
        r["cached"] += t.cached_tokens or 0
    for r in replicas.values():
        r["share"] = r["requests"] / len(ok) if ok else 0.0
        r["hit_rate"] = r["cached"] / r["prompt"] if r["prompt"] else None

    def ttft(shared: bool) -> dict:
        values = [t.ttft_s for t in ok if t.shared == shared and t.ttft_s is not None]
        return quantiles(values)

    prompt = sum(t.prompt_tokens for t in counted)
    return {
        "requests": len(turns),
        "failed": len(turns) - len(ok),
        "errors": sorted({t.error for t in turns if t.error})[:5],
        "hit_rate": sum(t.cached_tokens for t in counted) / prompt if prompt else None,
        "ttft_shared": ttft(True),
        "ttft_unrelated": ttft(False),
        "output_tokens_per_s": sum(t.output_tokens for t in ok) / wall_s if wall_s else 0.0,
        "requests_per_s": len(ok) / wall_s if wall_s else 0.0,
        "wall_s": wall_s,
        "replicas": replicas,
        "max_share": max((r["share"] for r in replicas.values()), default=None),
    }


def summarise_arm(results: list[dict], starts: list[float]) -> dict:
    """An arm over its rounds (each ``{"turns": [...], "wall_s": s}``): every turn together,
    each round alone, and the largest share one replica took in any round (each round
    starts the arm afresh, with new replica ids)."""
    rounds = [[Turn(**row) for row in r["turns"]] for r in results]
    per_round = [summarise(turns, r["wall_s"]) for turns, r in zip(rounds, results, strict=True)]
    shares = [r["max_share"] for r in per_round if r["max_share"] is not None]
    return {
        **summarise([t for turns in rounds for t in turns], sum(r["wall_s"] for r in results)),
        "max_share": max(shares, default=None),
        "rounds": per_round,
        "ready_s": statistics.median(starts) if starts else None,
    }


def compare(arms: dict[str, dict]) -> dict:
    """The issue's targets as ratios of arms measured in the same run (None: an arm is missing)."""

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    prefix, default, single = arms.get(PREFIX), arms.get(DEFAULT), arms.get(SINGLE)
    out: dict = {}
    if prefix and single:
        out["hit_rate_vs_ideal"] = ratio(prefix["hit_rate"], single["hit_rate"])
    if prefix and default:
        out["ttft_p50_gain_shared"] = ratio(
            default["ttft_shared"]["p50_s"], prefix["ttft_shared"]["p50_s"]
        )
        out["ttft_p90_gain_shared"] = ratio(
            default["ttft_shared"]["p90_s"], prefix["ttft_shared"]["p90_s"]
        )
        out["throughput_vs_default"] = ratio(
            prefix["output_tokens_per_s"], default["output_tokens_per_s"]
        )
    if prefix:
        out["prefix_max_share"] = prefix["max_share"]
    met = {
        "hit_rate_vs_ideal": TARGET_HIT_VS_IDEAL,
        "ttft_p50_gain_shared": TARGET_TTFT_GAIN,
        "throughput_vs_default": TARGET_THROUGHPUT,
    }
    out["met"] = {k: out[k] >= v for k, v in met.items() if out.get(k) is not None}
    if out.get("prefix_max_share") is not None:
        out["met"]["prefix_max_share"] = out["prefix_max_share"] <= TARGET_MAX_SHARE
    return out


def cell_name(workload: ConversationWorkload) -> str:
    return f"prefix-{workload.system_words}-c-{workload.concurrency}"


def cells(workloads: list[ConversationWorkload]) -> dict[str, ConversationWorkload]:
    """The cells in the order each arm plays them, each workload with a seed of its own
    (the same seed would give a longer prefix the shorter one's words first: a hit from
    another cell)."""
    out: dict[str, ConversationWorkload] = {}
    for workload in workloads:
        name = cell_name(workload)
        if name in out:
            raise ValueError(f"the cell {name} is asked for twice")
        out[name] = replace(workload, seed=workload.seed + len(out))
    return out


def _play(
    target: Target, played: dict[str, ConversationWorkload], words: list[str], progress
) -> dict:
    out = {}
    for name, workload in played.items():

        def note(done: int, total: int, name: str = name) -> None:
            if done == total or done % 20 == 0:
                progress(f"{target.name} {name}: {done}/{total} turns")

        cfg = Client(target.base_url, target.model, target.api_key)
        turns, wall = asyncio.run(run_sessions(cfg, workload, sessions(workload, words), note))
        out[name] = {"turns": [t.row() for t in turns], "wall_s": wall}
    return {"cells": out}


def run_all(
    setup: LocalSetup | None,
    kinds: list[str],
    remote: list[Target],
    played: dict[str, ConversationWorkload],
    rounds: int,
    words: list[str],
    logs: Path,
    progress: Progress,
) -> dict:
    """Every arm once per round, the local ones each in its own fresh app playing every
    cell. One cell gives one result as it always has; several give ``{"cells": {name:
    result}}``, each a one-cell result of its own."""
    turns = play_in_turns(
        setup, kinds, remote, rounds, lambda t: _play(t, played, words, progress), logs, progress
    )
    results = {}
    for name, workload in played.items():
        raw = {
            arm: [r["cells"][name] for r in rounds_played if name in r["cells"]]
            for arm, rounds_played in turns.played.items()
        }
        summary = {
            arm: summarise_arm(rounds_of_arm, turns.starts.get(arm, []))
            for arm, rounds_of_arm in raw.items()
            if rounds_of_arm
        }
        results[name] = {
            "workload": workload.__dict__,
            "rounds": rounds,
            "interrupted": turns.interrupted,
            "arms": summary,
            "compare": compare(summary),
            "start_errors": turns.errors,
            "raw": raw,
            "setup": setup.summary() if setup else None,
        }
    if len(results) == 1:
        return next(iter(results.values()))
    return {
        "cells": results,
        "interrupted": turns.interrupted,
        "start_errors": turns.errors,
        "setup": setup.summary() if setup else None,
    }


def each_cell(result: dict) -> Iterator[dict]:
    """The one-cell results of a run (one, or each of its cells)."""
    yield from result["cells"].values() if "cells" in result else [result]


def _fmt(value: float | None, unit: str = "", digits: int = 2) -> str:
    if value is None:
        return "n/a"
    return f"{value * 1000:.0f} ms" if unit == "ms" else f"{value:.{digits}f}{unit}"


def markdown(result: dict) -> str:
    if "cells" in result:
        return "\n\n".join(
            f"### {name}\n\n{markdown(cell)}" for name, cell in result["cells"].items()
        )
    lines = [
        "| arm | requests (failed) | hit rate | TTFT p50 / p90 conversation turns | "
        "TTFT p50 unrelated | output tok/s | requests per replica (hit rate) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, arm in result["arms"].items():
        per_replica = ", ".join(
            f"{r['requests']} ({_fmt(r['hit_rate'])})" for r in arm["replicas"].values()
        )
        ttft, alone = arm["ttft_shared"], arm["ttft_unrelated"]
        lines.append(
            f"| {name} | {arm['requests']} ({arm['failed']}) | {_fmt(arm['hit_rate'])} | "
            f"{_fmt(ttft['p50_s'], 'ms')} / {_fmt(ttft['p90_s'], 'ms')} | "
            f"{_fmt(alone['p50_s'], 'ms')} | {arm['output_tokens_per_s']:.1f} | {per_replica} |"
        )
    cmp = result["compare"]
    lines += [
        "",
        f"- prefix hit rate / single replica's: {_fmt(cmp.get('hit_rate_vs_ideal'))} "
        f"(target >= {TARGET_HIT_VS_IDEAL})",
        f"- TTFT p50 on conversation turns, default / prefix: "
        f"{_fmt(cmp.get('ttft_p50_gain_shared'))}x (target >= {TARGET_TTFT_GAIN}); p90 "
        f"{_fmt(cmp.get('ttft_p90_gain_shared'))}x",
        f"- throughput, prefix / default: {_fmt(cmp.get('throughput_vs_default'))} "
        f"(target >= {TARGET_THROUGHPUT})",
        f"- largest share of requests on one replica with prefix routing: "
        f"{_fmt(cmp.get('prefix_max_share'))} (target <= {TARGET_MAX_SHARE})",
        f"- targets met: {cmp.get('met')}",
    ]
    return "\n".join(lines)


def write(result: dict, out: Path) -> list[Path]:
    """A one-cell result into OUT; several cells each into OUT/CELL, as one-cell runs."""
    from serving.bench.routing_plots import plot_all

    if "cells" in result:
        return [path for name, cell in result["cells"].items() for path in write(cell, out / name)]
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "routing.json", out / "routing.md"]
    paths[0].write_text(json.dumps(result, indent=2, sort_keys=True))
    paths[1].write_text(markdown(result) + "\n")
    return paths + plot_all(result, out)
