"""Plots of the guard bench (serving/bench/guard_bench.py), with matplotlib."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def plot_ratios(report: dict, out: Path) -> Path | None:
    cells = [c for c in report["cells"] if "guard_vs_best_static" in c]
    if not cells:
        return None
    fig, ax = plt.subplots(figsize=(9, 4))
    labels = [f"{c['workload']}\nc={c['concurrency']}" for c in cells]
    x = range(len(cells))
    ax.bar(
        [i - 0.2 for i in x],
        [c["guard_vs_best_static"] for c in cells],
        0.4,
        label="guard / best static k",
    )
    ax.bar(
        [i + 0.2 for i in x],
        [c.get("guard_vs_batch_table", 0) for c in cells],
        0.4,
        label="guard / vLLM batch table",
    )
    ax.axhline(0.97, color="red", linestyle="--", linewidth=1, label="0.97")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(list(x), labels, fontsize=7)
    ax.set_ylabel("throughput ratio")
    ax.set_title("Speculation guard against static k and vLLM's batch-size table")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "guard-ratios.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_switch(report: dict, out: Path) -> Path | None:
    switch = report.get("switch")
    if not switch:
        return None
    fig, ax = plt.subplots(figsize=(9, 4))
    for name, points in switch["timelines"].items():
        if points:
            ax.plot([t for t, _ in points], [v for _, v in points], label=name, linewidth=1)
    ax.set_xlabel("seconds since the run began")
    ax.set_ylabel("output tokens/s")
    guard = switch["figures"].get("vllm-guard")
    if guard:
        phases = guard["phases_s"]
        ax.axvline(phases["zero_from"], color="black", linestyle=":", linewidth=1)
        ax.axvline(phases["high_again_from"], color="black", linestyle=":", linewidth=1)
        steps = guard["k_over_time"]
        held = [(t, k) for t, k, reason in steps if reason != "probe"]
        if held:
            k_ax = ax.twinx()
            k_ax.step(
                [t for t, _ in held],
                [k for _, k in held],
                where="post",
                color="purple",
                linewidth=1.2,
                label="guard k",
            )
            k_ax.set_ylabel("guard k (probe steps not shown)")
            k_ax.set_ylim(-0.2, max(k for _, k in held) + 0.5)
            k_ax.legend(loc="upper right", fontsize=7)
    ax.legend(loc="upper left", fontsize=7)
    ax.set_title(f"high -> zero -> high at concurrency {switch['concurrency']}")
    fig.tight_layout()
    path = out / "guard-switch.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(report: dict, out: Path) -> list[Path]:
    return [p for p in (plot_ratios(report, out), plot_switch(report, out)) if p]
