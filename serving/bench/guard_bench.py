"""`dsv4-serve bench --workloads ...`: static k, vLLM's batch-size table and our guard on
designed-acceptance workloads (serving/bench/workloads.py), one interleaved run
(``serving.bench.runner``: every round, every concurrency, every target in turn), then
the switch run: high, zero, high in request order, with each target's throughput and
the guard's k over time.

The figures are ratios of targets measured side by side: the guard against the best
static k of each cell and against vLLM's table. Every output is checked against the
known greedy text."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

from serving.bench.load import Target, run_level
from serving.bench.runner import BenchPlan, BenchRun
from serving.bench.workloads import SWITCH, expected_text, family_of, workload_prompts

GUARD, BATCH = "vllm-guard", "vllm-batch"
IDLE = "vllm-idle-drafter"  # k=0 every step with vLLM's drafter pass (serving.bench.targets)
BIN_S = 1.0  # throughput timeline resolution
TARGET_BEST_STATIC = 0.97
TARGET_BATCH = 1.0
TARGET_SWITCH_S = 5.0


def grid(
    targets: list[Target],
    workloads: list[str],
    base: BenchPlan,
    progress: Callable[[str], None],
    deadline: float | None,
) -> dict[str, dict]:
    """One BenchRun per workload over the same running targets."""
    results = {}
    for name in workloads:
        count = max(64, max(base.requests_at(c) for c in base.concurrency) * base.rounds)
        plan = BenchPlan(
            concurrency=base.concurrency,
            requests_per_level=base.requests_per_level,
            rounds=base.rounds,
            max_tokens=base.max_tokens,
            prompts=workload_prompts(name, count),
            requests_per_stream=base.requests_per_stream,
            expected=lambda p, n=base.max_tokens: expected_text(p, n),
        )
        progress(f"workload {name}")
        results[name] = BenchRun(targets, plan, progress, deadline).run()
    return results


def switch_run(
    targets: list[Target], concurrency: int, requests: int, max_tokens: int, progress
) -> dict[str, dict]:
    """Each target in turn: ``requests`` prompts, high then zero then high."""
    prompts = workload_prompts(SWITCH, requests)
    out = {}
    for target in targets:
        progress(f"switch run {target.name}: {requests} requests at concurrency {concurrency}")
        wall_minus_perf = time.time() - time.perf_counter()
        began = time.time()
        outputs, wall = asyncio.run(run_level(target, prompts, concurrency, max_tokens, False))
        requests_out = []
        for prompt, o in zip(prompts, outputs, strict=True):
            start = o.start_time + wall_minus_perf
            requests_out.append(
                {
                    "family": family_of(prompt),
                    "start": start,
                    "end": start + o.latency,
                    "ttft": o.ttft,
                    "itl": o.itl,
                    "output_tokens": o.output_tokens,
                    "ok": o.success and o.generated_text == expected_text(prompt, max_tokens),
                }
            )
        out[target.name] = {"began": began, "wall_seconds": wall, "requests": requests_out}
    return out


def token_times(request: dict) -> list[float]:
    """When each output token arrived: the chunks' arrival times, each repeated for the
    tokens it carried (a chunk holds the accepted drafts too, spread evenly here)."""
    stamps = [request["start"] + request["ttft"]]
    for gap in request["itl"]:
        stamps.append(stamps[-1] + gap)
    out, carried = [], 0.0
    per_chunk = request["output_tokens"] / len(stamps)
    for t in stamps:
        carried += per_chunk
        whole = int(carried + 1e-9)
        out += [t] * whole
        carried -= whole
    return out


def timeline(run: dict) -> list[tuple[float, float]]:
    """(seconds since the run began, output tokens/s) per BIN_S bin."""
    stamps = [t - run["began"] for r in run["requests"] for t in token_times(r)]
    if not stamps:
        return []
    bins = [0] * (int(max(stamps) / BIN_S) + 1)
    for t in stamps:
        bins[int(max(t, 0) / BIN_S)] += 1
    return [(i * BIN_S, n / BIN_S) for i, n in enumerate(bins)]


def read_decisions(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def switch_figures(run: dict, decisions: list[dict], k_max: int) -> dict:
    """How long the guard took to turn drafting off after the switch to zero, and back on
    after high returned. Two clocks each: from the first request of the new family, and
    from the moment only the new family was in flight (the last old one finished)."""
    reqs = sorted(run["requests"], key=lambda r: r["start"])
    third = len(reqs) // 3
    first_high, zero, second_high = reqs[:third], reqs[third : 2 * third], reqs[2 * third :]
    zero_start = min(r["start"] for r in zero)
    only_zero = max(r["end"] for r in first_high)
    high_start = min(r["start"] for r in second_high)
    only_high = max(r["end"] for r in zero)
    window = [d for d in decisions if run["began"] <= d["t"] <= run["began"] + run["wall_seconds"]]
    off = next((d["t"] for d in window if d["t"] >= zero_start and d["k"] == 0), None)
    back = next(
        (
            d["t"]
            for d in window
            if d["t"] >= high_start and d["k"] == k_max and d["reason"] == "up"
        ),
        None,
    )

    def since(t: float | None, ref: float) -> float | None:
        return None if t is None else round(max(t - ref, 0.0), 2)

    return {
        "to_k0_from_first_zero_request_s": since(off, zero_start),
        "to_k0_from_only_zero_in_flight_s": since(off, only_zero),
        "to_full_k_from_first_high_request_s": since(back, high_start),
        "to_full_k_from_only_high_in_flight_s": since(back, only_high),
        "k_over_time": [(round(d["t"] - run["began"], 3), d["k"], d["reason"]) for d in window],
        "phases_s": {
            "zero_from": round(zero_start - run["began"], 2),
            "high_again_from": round(high_start - run["began"], 2),
        },
    }


def analyse(results: dict[str, dict]) -> list[dict]:
    """Per workload and concurrency: each target's tok/s, the best static k, the ratios."""
    rows = []
    for workload, result in results.items():
        by_cell: dict[int, dict[str, dict]] = {}
        for level in result["levels"]:
            by_cell.setdefault(level["concurrency"], {})[level["target"]] = level
        for concurrency, levels in sorted(by_cell.items()):
            tps = {name: lv["output_tokens_per_s"] for name, lv in levels.items()}
            statics = {n: v for n, v in tps.items() if n.startswith("vllm-k")}
            best = max(statics, key=statics.get) if statics else None
            row = {
                "workload": workload,
                "concurrency": concurrency,
                "tokens_per_s": tps,
                "best_static": best,
                "wrong_text": sum(lv.get("wrong_text", 0) for lv in levels.values()),
                "failed": sum(lv["failed"] for lv in levels.values()),
                "acceptance": {
                    n: (lv["spec_decode"] or {}).get("acceptance_rate") for n, lv in levels.items()
                },
            }
            if GUARD in tps and best:
                row["guard_vs_best_static"] = tps[GUARD] / statics[best]
            if GUARD in tps and BATCH in tps:
                row["guard_vs_batch_table"] = tps[GUARD] / tps[BATCH]
            if GUARD in tps and "vllm-k0" in tps:
                row["guard_vs_k0"] = tps[GUARD] / tps["vllm-k0"]
            if "vllm-k2" in tps and "vllm-k0" in tps:
                row["k2_vs_k0"] = tps["vllm-k2"] / tps["vllm-k0"]
            if IDLE in tps and "vllm-k0" in tps:
                # what k=0 costs with vLLM's drafter kept in step: the best a guard can
                # do where static k=0 wins
                row["idle_drafter_vs_k0"] = tps[IDLE] / tps["vllm-k0"]
            if GUARD in tps and IDLE in tps:
                row["guard_vs_idle_drafter"] = tps[GUARD] / tps[IDLE]
            spread = {n: round_spread(lv) for n, lv in levels.items()}
            row["round_spread"] = {n: v for n, v in spread.items() if v is not None}
            rows.append(row)
    return rows


def round_spread(level: dict) -> float | None:
    """One target's fastest round over its slowest in one cell; None with fewer than two
    rounds. The same engine on the same prompts: what a ratio between targets must clear
    before it says anything (docs/benchmarks.md: how far the H200's golden cells varied)."""
    rounds = [t for t in level.get("round_tokens_per_s") or [] if t > 0]
    return max(rounds) / min(rounds) if len(rounds) >= 2 else None


def markdown(report: dict) -> str:
    rows = report["cells"]
    targets = sorted({t for r in rows for t in r["tokens_per_s"]})
    idle = any("idle_drafter_vs_k0" in r for r in rows)
    extra = " idle drafter / k=0 | guard / idle drafter |" if idle else ""
    lines = [
        "| workload | c | "
        + " | ".join(targets)
        + " | guard / best static | guard / table |"
        + extra
        + " wrong text |",
        "|---|---|" + "---|" * len(targets) + "---|---|" + ("---|---|" if idle else "") + "---|",
    ]

    def ratio_cell(value: float | None) -> str:
        return f" {value:.3f} |" if value is not None else " - |"

    for r in rows:
        cells = [f"{r['tokens_per_s'].get(t, 0):.0f}" for t in targets]
        ratio = r.get("guard_vs_best_static")
        best = f" | {ratio:.3f} ({r['best_static']}) |" if ratio is not None else " | - |"
        lines.append(
            f"| {r['workload']} | {r['concurrency']} | "
            + " | ".join(cells)
            + best
            + ratio_cell(r.get("guard_vs_batch_table"))
            + (
                ratio_cell(r.get("idle_drafter_vs_k0")) + ratio_cell(r.get("guard_vs_idle_drafter"))
                if idle
                else ""
            )
            + f" {r['wrong_text']} |"
        )
    checks = report["targets_met"]
    spread = checks.get("static_round_spread_median")
    lines += [
        "",
        f"Targets (guard >= {TARGET_BEST_STATIC}x best static, >= {TARGET_BATCH}x the "
        f"table, switch within {TARGET_SWITCH_S:.0f} s): {json.dumps(checks)}",
        "",
        (
            f"A static k's fastest round over its slowest in one cell: median {spread:.3f}, "
            f"max {checks['static_round_spread_max']:.3f}; a ratio between targets inside "
            "that is not told apart from noise."
            if spread is not None
            else "One round: how far a cell's rounds differ was not measured, so how much "
            "of each ratio is noise is unknown (run --rounds 2 or more)."
        ),
    ]
    for name, fig in (report.get("switch") or {}).get("figures", {}).items():  # None: no run
        lines.append(
            f"- switch {name}: "
            + json.dumps({k: v for k, v in fig.items() if k not in ("k_over_time",)})
        )
    return "\n".join(lines) + "\n"


def targets_met(cells: list[dict], switch: dict | None) -> dict:
    ratios = [c["guard_vs_best_static"] for c in cells if "guard_vs_best_static" in c]
    table = [c["guard_vs_batch_table"] for c in cells if "guard_vs_batch_table" in c]
    out = {
        "guard_vs_best_static_min": round(min(ratios), 3) if ratios else None,
        "guard_vs_batch_table_min": round(min(table), 3) if table else None,
        "wrong_text": sum(c["wrong_text"] for c in cells),
    }
    out["best_static_met"] = bool(ratios) and min(ratios) >= TARGET_BEST_STATIC
    out["batch_table_met"] = bool(table) and min(table) >= TARGET_BATCH
    spreads = sorted(
        v for c in cells for n, v in c.get("round_spread", {}).items() if n.startswith("vllm-k")
    )
    # None: one round, so how far a static k's rounds differ was not measured.
    out["static_round_spread_median"] = round(spreads[len(spreads) // 2], 3) if spreads else None
    out["static_round_spread_max"] = round(spreads[-1], 3) if spreads else None
    fig = (switch or {}).get("figures", {}).get(GUARD)
    if fig:
        off, back = (
            fig["to_k0_from_only_zero_in_flight_s"],
            fig["to_full_k_from_first_high_request_s"],
        )
        out["switch_met"] = (
            off is not None
            and back is not None
            and off <= TARGET_SWITCH_S
            and back <= TARGET_SWITCH_S
        )
    return out


def run_all(
    targets: list[Target],
    args,
    base: BenchPlan,
    k_max: int,
    decisions_log: Path,
    progress: Callable[[str], None],
    deadline: float | None,
) -> dict:
    # The switch run first: it is one fixed-size run per target, and a budget (--budget-s)
    # then cuts the grid's last cells, not the timeline.
    switch = None
    if args.switch_requests:
        runs = switch_run(
            targets, args.switch_concurrency, args.switch_requests, base.max_tokens, progress
        )
        decisions = read_decisions(decisions_log)
        figures = {
            name: switch_figures(run, decisions if name == GUARD else [], k_max)
            for name, run in runs.items()
        }
        switch = {
            "concurrency": args.switch_concurrency,
            "requests": args.switch_requests,
            "timelines": {name: timeline(run) for name, run in runs.items()},
            "wrong_text": {n: sum(not r["ok"] for r in run["requests"]) for n, run in runs.items()},
            "tokens_per_s": {
                n: sum(r["output_tokens"] for r in run["requests"]) / run["wall_seconds"]
                for n, run in runs.items()
            },
            "figures": figures,
        }
    results = grid(targets, args.workloads, base, progress, deadline)
    cells = analyse(results)
    return {
        "workloads": results,
        "cells": cells,
        "switch": switch,
        "targets_met": targets_met(cells, switch),
    }


def write(report: dict, out: Path) -> list[Path]:
    from serving.bench.guard_plots import plot_all

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "guard-report.json", out / "guard-report.md"]
    paths[0].write_text(json.dumps(report, indent=1, default=str))
    paths[1].write_text(markdown(report))
    return paths + plot_all(report, out)


def log_path(logs: Path) -> Path:
    """Where the guard target writes its decisions (DSV4_SPEC_GUARD_LOG, set before it
    starts)."""
    return logs / "guard-decisions.jsonl"
