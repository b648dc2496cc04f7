"""Plot of the P/D bench (serving/bench/pd_bench.py), with matplotlib."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

# (panel title, summary key, quantiles or None for a plain figure, scale, y label)
PANELS = (
    ("Time to first token", "ttft", ("p50_s", "p90_s"), 1000, "ms"),
    ("Time per output token", "tpot", ("p50_s", "p90_s"), 1000, "ms"),
    ("Output throughput", "output_tokens_per_s", None, 1, "tokens/s"),
)


def plot_levels(result: dict, out: Path) -> Path:
    """TTFT, TPOT (p50 solid, p90 dashed) and throughput over concurrency, one colour per arm."""
    fig, axes = plt.subplots(1, len(PANELS), figsize=(13, 4))
    for i, (name, arm) in enumerate(result["arms"].items()):
        levels = sorted(arm["levels"], key=int)
        xs = [int(c) for c in levels]
        for ax, (title, key, qs, scale, unit) in zip(axes, PANELS, strict=True):
            if qs is None:
                ys = [arm["levels"][c][key] * scale for c in levels]
                ax.plot(xs, ys, "o-", color=f"C{i}", label=name)
            for q, style in zip(qs or (), ("o-", "o--"), strict=False):
                ys = [
                    float("nan") if (v := arm["levels"][c][key][q]) is None else v * scale
                    for c in levels
                ]
                ax.plot(xs, ys, style, color=f"C{i}", label=f"{name} {q[:3]}")
            ax.set_title(title)
            ax.set_ylabel(unit)
            ax.set_xlabel("concurrent conversations")
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [str(x) for x in xs])
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path = out / "pd-levels.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
