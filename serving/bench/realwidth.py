"""Real-width figures from bench reports of one bench model at two or more depths.

Each report is ``dsv4-serve bench`` over ``vllm-k0..kK`` on a bench model (released layer
shapes, N layers). A decode step's time is TPOT x the mean tokens a step yields (the
acceptance length), so per target, concurrency and depth there is one step time; over the
depths it is fitted as ``fixed + layers x per_layer`` and extrapolated to the released
depth. Beside it: the bytes the step must read at the released depth over the bench GPU's
HBM bandwidth (serving/bench/decode_bytes.py), and the acceptance length at which each k
breaks even with k = 0 (k's step time over k = 0's, both extrapolated). Several reports of
one depth (targets benched in separate runs) are read as one; a fit whose deeper model
stepped faster is noise, not a cost, and is left out rather than extrapolated.

    python -m serving.bench.realwidth OUT_DIR REPORT.json REPORT.json [...]
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from serving.bench.acceptance_profiles import PROFILES, AcceptanceProfile
from serving.bench.analysis import MEASURED, break_even_lines, break_even_row, level
from serving.bench.decode_bytes import hbm_bytes_per_s, step_bytes
from serving.bench_model.shapes import RELEASED

_K = re.compile(r"vllm-k(\d+)")


def step_seconds(entry: dict) -> float | None:
    """Seconds per decode step: TPOT p50 x tokens per step (1 without drafts)."""
    tpot = (entry.get("tpot_s") or {}).get("p50")
    if not tpot:
        return None
    spec = entry.get("spec_decode") or {}
    return tpot * (spec.get("acceptance_length") or 1.0)


def decode_context(prompt_tokens: int, max_tokens: int) -> int:
    """The KV length a decode step sees on average over a request: its prompt and half its
    output (what the byte floor and `vllm bench forward`'s batches are sized at)."""
    return prompt_tokens + max_tokens // 2


def _depth(report: dict) -> int:
    bench = (report.get("setup") or {}).get("bench_model")
    if not bench:
        raise ValueError("not a bench-model report (setup.bench_model is missing)")
    return int(bench["layers"])


def linear_fit(points: dict[int, float]) -> tuple[float, float]:
    """Least squares ``y = a + b x``; (a, b)."""
    xs = sorted(points)
    if len(xs) < 2:
        raise ValueError("a fit needs two depths")
    mx = sum(xs) / len(xs)
    my = sum(points[x] for x in xs) / len(xs)
    b = sum((x - mx) * (points[x] - my) for x in xs) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def _level(reports: list[dict], target: str, concurrency: int) -> dict | None:
    for report in reports:
        if entry := level(report, target, concurrency):
            return entry
    return None


def _extrapolate(measured: dict[int, dict], full: int, length: float, c: int) -> dict:
    fixed, per_layer = linear_fit({d: m["step_s"] for d, m in measured.items()})
    if per_layer <= 0:
        return {"fit_rejected": "the deeper model stepped faster: noise or a stall"}
    step_full = fixed + per_layer * full
    return {
        "fixed_s": fixed,
        "per_layer_s": per_layer,
        "full_step_s": step_full,
        "full_tpot_s": step_full / length,
        "full_tokens_per_s": c * length / step_full,
    }


def analyse(reports: list[dict]) -> dict[str, Any]:
    by_depth: dict[int, list[dict]] = {}
    for report in reports:
        by_depth.setdefault(_depth(report), []).append(report)
    any_report = reports[0]
    gpu = ((any_report.get("client_machine") or {}).get("gpu") or {}).get("name")
    bandwidth, bandwidth_of = hbm_bytes_per_s(gpu)
    shape = any_report["setup"]["bench_model"]["shape"]
    released = RELEASED[shape]
    full = released["num_hidden_layers"]
    context = None
    rows = []
    targets = sorted(
        {t for r in reports for t in r["targets"] if _K.fullmatch(t)},
        key=lambda t: int(_K.fullmatch(t).group(1)),  # type: ignore[union-attr]
    )
    concurrency = sorted({c for r in reports for c in r["plan"]["concurrency"]})
    for target in targets:
        k = int(_K.fullmatch(target).group(1))  # type: ignore[union-attr]
        for c in concurrency:
            measured: dict[int, dict] = {}
            for depth, same_depth in by_depth.items():
                entry = _level(same_depth, target, c)
                if entry and (step := step_seconds(entry)):
                    spec = entry.get("spec_decode") or {}
                    measured[depth] = {
                        "step_s": step,
                        "tpot_s": entry["tpot_s"]["p50"],
                        "ttft_s": entry["ttft_s"]["p50"],
                        "tokens_per_s": entry["output_tokens_per_s"],
                        "acceptance_length": spec.get("acceptance_length") or 1.0,
                    }
            if not measured:
                continue
            row: dict[str, Any] = {"target": target, "k": k, "concurrency": c}
            row["measured"] = {str(d): m for d, m in sorted(measured.items())}
            length = sum(m["acceptance_length"] for m in measured.values()) / len(measured)
            row["acceptance_length"] = length
            if len(measured) >= 2:
                row |= _extrapolate(measured, full, length, c)
            prompt = int(any_report["plan"].get("prompt_tokens") or 0)
            max_tokens = any_report["plan"].get("max_tokens", 0)
            context = decode_context(prompt, max_tokens) if prompt else 512
            floor = step_bytes(released, c, k, context)
            row["floor_s"] = floor.total / bandwidth
            row["floor_bytes"] = floor.as_dict()
            if "full_step_s" in row:
                row["full_step_over_floor"] = row["full_step_s"] / row["floor_s"]
            rows.append(row)
    _break_even(rows)
    return {
        "shape": shape,
        "released_layers": full,
        "depths": sorted(by_depth),
        "context_tokens": context,
        "gpu": gpu,
        "hbm_bytes_per_s": bandwidth,
        "hbm_bandwidth_of": bandwidth_of,
        "rows": rows,
        "break_even_full": full_depth_map(rows, list(PROFILES.values())),
    }


def full_depth_map(rows: list[dict], profiles: list[AcceptanceProfile]) -> list[dict]:
    """The break-even map at the released depth: for the runs' own acceptance and each
    profile, per concurrency, each k's output tok/s from its extrapolated step (c x the
    acceptance length / the step), as ``analysis.break_even_row`` ranks a measured map. A
    step costs the same whatever its drafts' fate (as in serving/bench/break_even_projection.py),
    so a profile changes only the tokens a step yields."""
    steps = {(r["k"], r["concurrency"]): r for r in rows if "full_step_s" in r}
    out = []
    for name, profile in [(MEASURED, None), *((p.name, p) for p in profiles)]:
        for c in sorted({c for _, c in steps}):
            by_k: dict[int, float] = {}
            for (k, at), row in steps.items():
                if at != c:
                    continue
                if not k:
                    length = 1.0
                elif profile is None:
                    length = row["acceptance_length"]
                elif k <= len(profile.rates):
                    length = profile.acceptance_lengths[k - 1]
                else:
                    continue
                by_k[k] = round(c * length / row["full_step_s"], 1)
            if 0 in by_k and len(by_k) > 1:
                out.append(break_even_row(name, c, by_k))
    return out


def _break_even(rows: list[dict]) -> None:
    """Per concurrency and k: the acceptance length at which k's full-depth step pays for
    itself against k = 0's (k = 0 yields one token a step)."""
    base = {r["concurrency"]: r for r in rows if r["k"] == 0 and "full_step_s" in r}
    for row in rows:
        zero = base.get(row["concurrency"])
        if row["k"] and zero and "full_step_s" in row:
            row["break_even_acceptance_length"] = row["full_step_s"] / zero["full_step_s"]
            row["full_speedup"] = (
                zero["full_step_s"]
                / row["full_step_s"]
                * (row["full_tokens_per_s"] * row["full_step_s"] / row["concurrency"])
            )


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds for a report's table ("-" where there is none)."""
    return f"{seconds * 1e3:.2f}" if seconds is not None else "-"


def markdown(result: dict) -> str:
    lines = [
        f"DeepSeek-V4-{result['shape'].capitalize()} shape, depths {result['depths']} fitted "
        f"to {result['released_layers']} layers; floor at "
        f"{result['hbm_bytes_per_s'] / 1e12:.2f} TB/s ({result['hbm_bandwidth_of']}), "
        f"context {result['context_tokens']}",
        "",
        "| k | c | step ms (per depth) | fixed ms | per layer ms | full TPOT ms | full tok/s "
        "| floor ms | step / floor | break-even AL |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    for r in result["rows"]:
        steps = " / ".join(f"{d}: {ms(m['step_s'])}" for d, m in r["measured"].items())
        lines.append(
            f"| {r['k']} | {r['concurrency']} | {steps} | {ms(r.get('fixed_s'))} "
            f"| {ms(r.get('per_layer_s'))} | {ms(r.get('full_tpot_s'))} "
            f"| {r.get('full_tokens_per_s', 0):.0f} | {ms(r['floor_s'])} "
            f"| {r.get('full_step_over_floor', 0):.2f} "
            f"| {_two(r.get('break_even_acceptance_length'))} |"
        )
    if rejected := [r for r in result["rows"] if "fit_rejected" in r]:
        cells = ", ".join(f"k = {r['k']} c = {r['concurrency']}" for r in rejected)
        lines += ["", f"No fit ({rejected[0]['fit_rejected']}): {cells}."]
    if result.get("break_even_full"):
        lines += break_even_lines(
            result["break_even_full"],
            f"Break-even map at {result['released_layers']} layers (extrapolated steps):",
        )
    return "\n".join(lines) + "\n"


def _two(x: float | None) -> str:
    return f"{x:.2f}" if x is not None else "-"


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    out = Path(argv[0])
    reports = [json.loads(Path(p).read_text()) for p in argv[1:]]
    result = analyse(reports)
    out.mkdir(parents=True, exist_ok=True)
    (out / "realwidth.json").write_text(json.dumps(result, indent=1))
    (out / "realwidth.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
