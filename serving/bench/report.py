"""Write a bench report: JSON, a Markdown table, and PNG plots (matplotlib)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from serving.bench.analysis import (  # noqa: E402
    kernel_library_cost,
    mtp_speedup,
    serving_overhead,
)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def _num(value: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def figures(report: dict) -> dict:
    """Headline figures when the report has the targets they need."""
    names = set(report["targets"])
    ks = sorted(int(m.group(1)) for n in names if (m := re.fullmatch(r"vllm-k(\d+)", n)))
    out: dict = {}
    if 0 in ks and len(ks) > 1:
        low = min(report["plan"]["concurrency"])
        at_low = mtp_speedup(report, low, [k for k in ks if k])
        out["mtp"] = [at_low] + [
            mtp_speedup(report, c, [k for k in ks if k], at_low["draft_cost_ratio"])
            for c in report["plan"]["concurrency"]
            if c != low
        ]
    if "vllm-k2" in names:
        low, high = min(report["plan"]["concurrency"]), max(report["plan"]["concurrency"])
        rows = [
            serving_overhead(report, name, "vllm-k2", low, high)
            for name in report["targets"]
            if name.startswith("ray-app")
        ]
        if rows := [r for r in rows if r]:
            out["serving_overhead"] = rows
    if cost := kernel_library_cost(report):
        out["kernel_libraries"] = cost
    return out


def markdown(report: dict) -> str:
    lines = [
        "| target | c | tok/s | req/s | TTFT p50/p90/p99 ms | TPOT p50/p90 ms | ITL p50 ms"
        " | e2e p50 ms | acceptance | accept. length | failed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in sorted(report["levels"], key=lambda e: (e["concurrency"], e["target"])):
        spec = e.get("spec_decode") or {}
        t, tp = e["ttft_s"], e["tpot_s"]
        lines.append(
            f"| {e['target']} | {e['concurrency']} | {e['output_tokens_per_s']:.1f}"
            f" | {e['requests_per_s']:.2f} | {_ms(t['p50'])}/{_ms(t['p90'])}/{_ms(t['p99'])}"
            f" | {_ms(tp['p50'])}/{_ms(tp['p90'])} | {_ms(e['itl_s']['p50'])}"
            f" | {_ms(e['e2e_s']['p50'])} | {_num(spec.get('acceptance_rate'))}"
            f" | {_num(spec.get('acceptance_length'))} | {e['failed']}/{e['requests']} |"
        )
    if machine := report.get("client_machine"):
        lines += [
            "",
            f"Client machine: {machine['cpu_model']}, {machine['cpus']} CPUs, {machine['isa']}.",
        ]
    extra = figures(report)
    for block in extra.get("mtp", []):
        lines += [
            "",
            f"MTP speedup at concurrency {block['concurrency']} (draft/target cost"
            f" {_num(block['draft_cost_ratio'], '{:.3f}')}):",
            "",
            "| k | tok/s | speedup vs k=0 | acceptance length | bound |",
            "|---|---|---|---|---|",
        ]
        for k, row in block["by_k"].items():
            lines.append(
                f"| {k} | {row['tokens_per_s']:.1f} | {row['speedup']:.2f}x"
                f" | {_num(row['acceptance_length'])} | {_num(row['bound'], '{:.2f}x')} |"
            )
    if extra.get("serving_overhead"):
        lines += [
            "",
            "Serving overhead against vLLM's own server (vllm-k2, same engine arguments):",
            "",
            "| target | tok/s ratio (high c) | added p50 TTFT ms (low c) | p90 TTFT ratio (high c)"
            " | start to ready s | ratio |",
            "|---|---|---|---|---|---|",
        ]
        for o in extra["serving_overhead"]:
            added = o["added_p50_ttft_s"]
            lines.append(
                f"| {o['target']} | {o['throughput_ratio']:.2f}"
                f" | {'-' if added is None else f'{added * 1000:+.0f}'}"
                f" | {_num(o['p90_ttft_ratio'])}"
                f" | {_num(o.get('ready_s'), '{:.1f}')}"
                f" vs {_num(o.get('baseline_ready_s'), '{:.1f}')}"
                f" | {_num(o['ready_ratio'])} |"
            )
    if extra.get("kernel_libraries"):
        lines += [
            "",
            "CPU kernel libraries (eager fallbacks vs the native ops, same server otherwise):",
            "",
            "| target | vs | c | tok/s | native tok/s | ratio |",
            "|---|---|---|---|---|---|",
        ]
        for row in extra["kernel_libraries"]:
            lines.append(
                f"| {row['target']} | {row['baseline']} | {row['concurrency']}"
                f" | {row['tokens_per_s']:.1f} | {row['baseline_tokens_per_s']:.1f}"
                f" | {row['throughput_ratio']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def _plot_throughput(report: dict, path: Path) -> None:
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
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_latency(report: dict, path: Path) -> None:
    high = max(report["plan"]["concurrency"])
    entries = [e for e in report["levels"] if e["concurrency"] == high]
    metrics = [("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "e2e")]
    fig, axes = plt.subplots(1, len(metrics), figsize=(12, 4))
    for ax, (key, label) in zip(axes, metrics, strict=True):
        width = 0.8 / max(len(entries), 1)
        for i, e in enumerate(entries):
            values = [(e[key][p] or 0) * 1000 for p in ("p50", "p90", "p99")]
            ax.bar([x + i * width for x in range(3)], values, width, label=e["target"])
        ax.set_xticks([x + 0.4 - width / 2 for x in range(3)], ["p50", "p90", "p99"])
        ax.set(title=f"{label} at c={high}", ylabel="ms")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_acceptance(report: dict, path: Path) -> None:
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
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(report: dict, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {**report, "figures": figures(report)}
    paths = {
        "json": out_dir / "bench.json",
        "md": out_dir / "bench.md",
        "throughput": out_dir / "throughput.png",
        "latency": out_dir / "latency.png",
        "acceptance": out_dir / "acceptance.png",
    }
    paths["json"].write_text(json.dumps(report, indent=2) + "\n")
    paths["md"].write_text(markdown(report))
    _plot_throughput(report, paths["throughput"])
    _plot_latency(report, paths["latency"])
    _plot_acceptance(report, paths["acceptance"])
    return list(paths.values())
