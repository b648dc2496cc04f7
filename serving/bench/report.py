"""Write a bench report: JSON, Markdown tables and PNG plots (``serving.bench.plots``)."""

from __future__ import annotations

import json
from pathlib import Path

from serving.bench import plots
from serving.bench.analysis import (
    break_even,
    break_even_lines,
    kernel_library_cost,
    mtp_speedup,
    serving_overhead,
    static_k,
)
from serving.bench.stages import STAGES


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def _num(value: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def figures(report: dict) -> dict:
    """Headline figures when the report has the targets they need."""
    names = set(report["targets"])
    ks = sorted(k for n in names if (k := static_k(n)) is not None)
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
    if any("~" in name for name in names) and (rows := break_even(report)):
        out["break_even"] = rows
    return out


def _caveat(setup: dict) -> list[str]:
    """Plain words on what the figures are: a tiny model's, on this machine."""
    acc = setup["accelerator"]
    where = f"{acc['kind']} {acc['type']}" if acc.get("type") else acc["kind"]
    lines = [
        f"Local targets: preset `{setup['preset']}` ({setup['description']}; {where}), its "
        "engine arguments for every target"
        + (f", with `--set {' '.join(setup['sets'])}`" if setup["sets"] else "")
        + ".",
    ]
    if not setup.get("golden"):
        return lines
    shape = setup.get("golden_model") or {}
    size = (
        f" (hidden {shape['hidden_size']}, {shape['layers']} layers + {shape['mtp_layers']}"
        f" MTP layer, {shape['routed_experts']} experts of width {shape['expert_width']})"
        if shape
        else ""
    )
    bound = (
        "launch-bound: a step's time is kernel launches and host work, not the GPU's "
        "compute or memory bandwidth"
        if acc["kind"] != "cpu"
        else "the compute of a tiny model on a few CPU cores"
    )
    lines += [
        "",
        f"**These are the golden model's figures, not DSV4-Flash's.** The golden DSV4 is a "
        f"tiny synthetic checkpoint with the real architecture{size}; here it is {bound}. "
        "Neither its tok/s, its latencies nor its MTP speedup say what DSV4-Flash or "
        "DSV4-Pro do on this machine: they compare settings with each other, measured side "
        "by side in one run.",
    ]
    return lines


def _machine(machine: dict) -> list[str]:
    line = f"Client machine: {machine['cpu_model']}, {machine['cpus']} CPUs, {machine['isa']}."
    if gpu := machine.get("gpu"):
        if gpu.get("name"):
            line += (
                f" GPU: {gpu['name']} ({gpu['count']} visible, {gpu['memory_gib']} GiB,"
                f" compute capability {gpu['capability']}, CUDA {gpu['cuda']})."
            )
        else:
            line += f" GPU: unreadable ({gpu.get('error')})."
    versions = machine.get("software") or {}
    if names := [f"{name} {v}" for name, v in versions.items() if v]:
        line += " " + ", ".join(names) + "."
    return ["", line]


def _levels(report: dict) -> list[str]:
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
    return lines


def _mtp(extra: dict, setup: dict | None) -> list[str]:
    lines: list[str] = []
    blocks = extra.get("mtp", [])
    if blocks:
        low = blocks[0]
        assumed = (setup or {}).get("monitoring_draft_cost_ratio")
        lines += [
            "",
            "MTP speedup over k=0 against its bound `L / (1 + k c)` (L: acceptance length),"
            f" with the draft/target cost c = {_num(low['draft_cost_ratio'], '{:.3f}')}"
            f" fitted on this machine at concurrency {low['concurrency']} (seconds per target step,"
            " `TPOT x L`, for each k: `s_k = s_0 + k t_draft`, c = t_draft / s_0)"
            + (f"; the preset's alerts assume c = {assumed}" if assumed is not None else "")
            + ".",
        ]
    if blocks:
        lines += [
            "",
            "| c | k | tok/s | speedup vs k=0 | acceptance length | bound | of bound |",
            "|---|---|---|---|---|---|---|",
        ]
    for block in blocks:
        for k, row in block["by_k"].items():
            share = row["speedup"] / row["bound"] if row["bound"] else None
            lines.append(
                f"| {block['concurrency']} | {k} | {row['tokens_per_s']:.1f}"
                f" | {row['speedup']:.2f}x | {_num(row['acceptance_length'])}"
                f" | {_num(row['bound'], '{:.2f}x')} | {_num(share, '{:.0%}')} |"
            )
    return lines


def _overhead(extra: dict) -> list[str]:
    if not extra.get("serving_overhead"):
        return []
    lines = [
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
    return lines


def _kernels(extra: dict) -> list[str]:
    if not extra.get("kernel_libraries"):
        return []
    lines = [
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
    return lines


def _break_even(extra: dict) -> list[str]:
    if not extra.get("break_even"):
        return []
    return break_even_lines(
        extra["break_even"],
        "Break-even by acceptance profile (output tok/s at each k; the k that made the most,"
        " and by how much it beat the next best and k = 0):",
    )


def _how_started(start: dict) -> str:
    if start.get("cold_starts"):
        return (
            f"median of {start['cold_starts']} cold start(s) of each target alone, before the"
            " load phase; stages of the last one"
        )
    if start.get("mode") == "parallel":
        return "all local targets started at once: their starts overlap and share the machine"
    if start.get("mode") == "staggered":
        first = (start.get("order") or ["the first local target"])[0]
        return (
            f"{first} started alone (filling the kernel caches), then the others at once:"
            " their starts overlap and share the machine"
        )
    return "started one at a time, each timed alone while the targets already up sat idle"


def _starts(report: dict) -> list[str]:
    ready = report.get("ready_seconds") or {}
    lines: list[str] = []
    if ready:
        stages = report.get("start_stages_seconds") or {}
        present = [s for s in STAGES if any(s in (stages.get(n) or {}) for n in ready)]
        lines += [
            "",
            f"Start to ready by stage, seconds ({_how_started(report.get('start') or {})}):",
            "",
            "| target | ready | " + " | ".join(STAGES[s] for s in present) + " |",
            "|---|---|" + "---|" * len(present),
        ]
        for name, seconds in ready.items():
            row = stages.get(name) or {}
            cells = [_num(row.get(s), "{:.1f}") for s in present]
            lines.append(f"| {name} | {seconds:.1f} | " + " | ".join(cells) + " |")
        lines += [
            "",
            "Ray, Serve and replica add up to the Ray app's start; the replica holds its "
            "engine's weights and engine init. Engine init (vLLM's profile run, KV cache and "
            "warm-up) holds torch.compile and CUDA-graph capture.",
        ]
    for kind, failure in (report.get("start_errors") or {}).items():
        lines += ["", f"**{kind} did not start**: {failure['error']} (log tail in bench.json)."]
    return lines


def _rounds(report: dict) -> list[str]:
    """Round by round, where a level ran more than one: what a cold cache costs the first
    traffic (throughput, and kernels compiled while serving)."""
    levels = [e for e in report["levels"] if len(e.get("round_tokens_per_s") or []) > 1]
    if not levels:
        return []
    lines = [
        "",
        "Round by round (compiles during traffic: vLLM's JIT monitor, and kernel files added"
        " to the JIT cache, which also counts DeepGEMM's):",
        "",
        "| target | c | tok/s by round | JIT monitor by round | kernel files added by round |",
        "|---|---|---|---|---|",
    ]

    def said(values: list) -> str:  # "-": not read (an old bench.json, no log, no cache)
        return " / ".join("-" if v is None else str(v) for v in values) or "-"

    for e in sorted(levels, key=lambda e: (e["concurrency"], e["target"])):
        added = [
            None if a is None else sum(a.values()) for a in e.get("round_cache_kernels_added", [])
        ]
        lines.append(
            f"| {e['target']} | {e['concurrency']} | {said(e['round_tokens_per_s'])}"
            f" | {said(e.get('round_jit_compiles', []))} | {said(added)} |"
        )
    return lines


def _notes(report: dict) -> list[str]:
    lines: list[str] = []
    cells = report["plan"].get("cells") or {}
    if cells.get("skipped"):
        lines += [
            "",
            f"**Cut short by the time budget** ({report.get('budget_s'):.0f} s):"
            f" {cells['skipped']} of {cells['total']} load cells skipped; each level's"
            " `rounds` in bench.json says how many it holds.",
        ]
    if report.get("interrupted"):
        lines += ["", "**Interrupted**: the report holds what was measured before the stop."]
    return lines


def markdown(report: dict) -> str:
    setup = report.get("setup")
    lines = [*_caveat(setup), ""] if setup else []
    lines += _levels(report)
    if machine := report.get("client_machine"):
        lines += _machine(machine)
    extra = figures(report)
    lines += _mtp(extra, setup)
    lines += _overhead(extra)
    lines += _kernels(extra)
    lines += _break_even(extra)
    lines += _starts(report)
    lines += _rounds(report)
    lines += _notes(report)
    return "\n".join(lines) + "\n"


def write(report: dict, out_dir: Path, plots_too: bool = True) -> list[Path]:
    """bench.json and bench.md, and with ``plots_too`` the plots that have data."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {**report, "figures": figures(report)}
    json_path, md_path = out_dir / "bench.json", out_dir / "bench.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    md_path.write_text(markdown(report))
    written = [json_path, md_path]
    if not plots_too:
        return written
    for name, draw in [
        ("throughput", plots.throughput),
        ("latency", plots.latency),
        ("acceptance", plots.acceptance),
        ("mtp", plots.mtp),
        ("break_even", plots.break_even),
        ("starts", plots.starts),
    ]:
        path = out_dir / f"{name}.png"
        if draw(report, path) is not False:
            written.append(path)
    return written
