"""The bench report's plots (matplotlib, PNG): throughput and latency by target, MTP
acceptance by position, MTP speedup against its cost bound, start-up by stage, and the
break-even map by acceptance profile."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from serving.bench.stages import STAGES, top_level  # noqa: E402


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _over_k0(ax, title: str) -> None:
    """Axes of throughput over k = 0 by concurrency, 1 (no gain) marked."""
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set(xlabel="concurrency", ylabel="tok/s over k=0", title=title)
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def throughput(report: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in report["targets"]:
        points = sorted(
            (e["concurrency"], e["output_tokens_per_s"])
            for e in report["levels"]
            if e["target"] == name
        )
        ax.plot([c for c, _ in points], [t for _, t in points], marker="o", label=name)
    ax.set(xlabel="concurrency", ylabel="output tokens/s", title="Throughput vs concurrency")
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
    ax.legend()
    _save(fig, path)


def latency(report: dict, path: Path) -> None:
    """Top: p50/p90/p99 at the highest concurrency. Below (with several levels): each
    target's p50 against concurrency."""
    levels = sorted(report["plan"]["concurrency"])
    high = levels[-1]
    entries = [e for e in report["levels"] if e["concurrency"] == high]
    metrics = [("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "e2e")]
    rows = 2 if len(levels) > 1 else 1
    fig, grid = plt.subplots(rows, len(metrics), figsize=(12, 4 * rows), squeeze=False)
    for ax, (key, label) in zip(grid[0], metrics, strict=True):
        width = 0.8 / max(len(entries), 1)
        for i, e in enumerate(entries):
            values = [(e[key][p] or 0) * 1000 for p in ("p50", "p90", "p99")]
            ax.bar([x + i * width for x in range(3)], values, width, label=e["target"])
        ax.set_xticks([x + 0.4 - width / 2 for x in range(3)], ["p50", "p90", "p99"])
        ax.set(title=f"{label} at c={high}", ylabel="ms")
    grid[0][0].legend(fontsize=8)
    if rows == 2:
        for ax, (key, label) in zip(grid[1], metrics, strict=True):
            for name in report["targets"]:
                points = sorted(
                    (e["concurrency"], e[key]["p50"] * 1000)
                    for e in report["levels"]
                    if e["target"] == name and e[key]["p50"] is not None
                )
                ax.plot([c for c, _ in points], [v for _, v in points], marker="o", label=name)
            ax.set(title=f"{label} p50 by concurrency", xlabel="concurrency", ylabel="ms")
            ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3)
    _save(fig, path)


def acceptance(report: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for e in report["levels"]:
        spec = e.get("spec_decode") or {}
        by_pos = spec.get("acceptance_by_position") or {}
        if by_pos:
            xs = sorted(by_pos, key=int)
            ax.plot(
                [int(x) for x in xs],
                [by_pos[x] for x in xs],
                marker="o",
                label=f"{e['target']} c={e['concurrency']}",
            )
    ax.set(
        xlabel="draft position",
        ylabel="accepted per draft",
        title="Acceptance by position",
        ylim=(0, 1.05),
    )
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    _save(fig, path)


def mtp(report: dict, path: Path) -> bool:
    """Speedup over k=0 by concurrency, each k against its bound (dashed)."""
    blocks = report["figures"].get("mtp") or []
    ks = sorted({int(k) for b in blocks for k in b["by_k"]})
    if not ks:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for k in ks:
        rows = sorted((b["concurrency"], b["by_k"][k]) for b in blocks if k in b["by_k"])
        line = ax.plot(
            [c for c, _ in rows], [r["speedup"] for c, r in rows], marker="o", label=f"k={k}"
        )[0]
        bounds = [(c, r["bound"]) for c, r in rows if r["bound"] is not None]
        if bounds:
            ax.plot(
                [c for c, _ in bounds],
                [b for _, b in bounds],
                linestyle="--",
                color=line.get_color(),
                label=f"k={k} bound",
            )
    cost = blocks[0]["draft_cost_ratio"]
    _over_k0(ax, "MTP speedup vs bound" + (f" (draft/target cost {cost:.3f})" if cost else ""))
    _save(fig, path)
    return True


def break_even(report: dict, path: Path) -> bool:
    """Each profile's k over k = 0 by concurrency, one panel per profile: where the
    lines cross 1 is where speculation stops paying, and the top line the k to run."""
    rows = report["figures"].get("break_even") or []
    profiles = list(dict.fromkeys(r["profile"] for r in rows))
    if not profiles:
        return False
    fig, axes = plt.subplots(1, len(profiles), figsize=(4 * len(profiles), 3.6), squeeze=False)
    for ax, profile in zip(axes[0], profiles, strict=True):
        # (concurrency, k -> tok/s); keys are strings once the report went through JSON
        mine = sorted(
            (r["concurrency"], {int(k): v for k, v in r["tokens_per_s_by_k"].items()})
            for r in rows
            if r["profile"] == profile
        )
        for k in sorted({k for _, by_k in mine for k in by_k} - {0}):
            points = [(c, by_k[k] / by_k[0]) for c, by_k in mine if k in by_k]
            ax.plot([c for c, _ in points], [v for _, v in points], marker="o", label=f"k={k}")
        _over_k0(ax, profile)
    _save(fig, path)
    return True


def starts(report: dict, path: Path) -> bool:
    """Start-to-ready of each local target, split into the stages that add up to it."""
    ready = report.get("ready_seconds") or {}
    if not ready:
        return False
    names = list(ready)
    stages = report.get("start_stages_seconds") or {}
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(names) + 1.5))
    colours: dict[str, str] = {}
    for row, name in enumerate(names):
        left = 0.0
        for stage, seconds in top_level(stages.get(name) or {}, ready[name]).items():
            label = STAGES.get(stage, "other (process, imports, server)")
            bar = ax.barh(
                row,
                seconds,
                left=left,
                color=colours.get(stage),
                label=None if stage in colours else label,
            )
            colours.setdefault(stage, bar.patches[0].get_facecolor())
            left += seconds
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set(xlabel="seconds", title="Start to ready by stage")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    _save(fig, path)
    return True
