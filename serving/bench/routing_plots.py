"""Plots of the routing bench (serving/bench/routing_bench.py), with matplotlib."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_replicas(result: dict, out: Path) -> Path:
    """Requests and prefix-cache hit rate per replica, per arm."""
    arms = result["arms"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for i, arm in enumerate(arms.values()):
        replicas = sorted(arm["replicas"].values(), key=lambda r: -r["requests"])
        for j, r in enumerate(replicas):
            x = i + (j - (len(replicas) - 1) / 2) * 0.35
            left.bar(x, r["share"], 0.3, color=f"C{j}")
            right.bar(x, r["hit_rate"] or 0.0, 0.3, color=f"C{j}")
    for ax, label in ((left, "share of requests"), (right, "prefix-cache hit rate")):
        ax.set_xticks(range(len(arms)), list(arms), fontsize=8)
        ax.set_ylabel(label)
        ax.set_ylim(0, 1)
    left.axhline(0.6, color="red", linestyle="--", linewidth=1)
    left.set_title("Load per replica (red: 60%)")
    right.set_title("Hit rate per replica")
    return _save(fig, out / "routing-replicas.png")


def plot_ttft(result: dict, out: Path) -> Path:
    """Time to first token of the conversation turns, as a CDF per arm."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, rounds in result["raw"].items():
        values = sorted(
            t["ttft_s"] * 1000
            for r in rounds
            for t in r["turns"]
            if t["ok"] and t["shared"] and t["ttft_s"] is not None
        )
        if values:
            ax.plot(values, [(i + 1) / len(values) for i in range(len(values))], label=name)
    ax.set_xlabel("time to first token (ms), conversation turns")
    ax.set_ylabel("fraction of requests")
    ax.set_xscale("log")
    ax.legend(fontsize=8)
    ax.set_title("TTFT with default and prefix routing")
    return _save(fig, out / "routing-ttft.png")


def plot_all(result: dict, out: Path) -> list[Path]:
    if not result["arms"]:
        return []
    return [plot_replicas(result, out), plot_ttft(result, out)]
