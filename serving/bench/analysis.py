"""The figures the docs quote, derived from a bench report: MTP speedup against the
bound implied by the measured draft/target cost, serving overhead, cold start."""

from __future__ import annotations


def level(report: dict, target: str, concurrency: int) -> dict | None:
    for entry in report["levels"]:
        if entry["target"] == target and entry["concurrency"] == concurrency:
            return entry
    return None


def draft_cost_ratio(step_seconds: dict[int, float]) -> float | None:
    """Least-squares slope of ``s_k = s_0 + k * t_draft`` over the measured k (k = 0
    included), divided by the plain decode step ``s_0``. ``step_seconds``: k -> seconds
    per target step. Like the bound, it counts verifying k + 1 tokens as one decode step."""
    ks = sorted(step_seconds)
    if 0 not in step_seconds or len(ks) < 2:
        return None
    mean_k = sum(ks) / len(ks)
    mean_s = sum(step_seconds[k] for k in ks) / len(ks)
    slope = sum((k - mean_k) * (step_seconds[k] - mean_s) for k in ks) / sum(
        (k - mean_k) ** 2 for k in ks
    )
    return slope / step_seconds[0]


def speedup_bound(acceptance_length: float, k: int, cost_ratio: float) -> float:
    """Tokens per step over the step's cost in plain decode steps. A fitted cost at or
    below 0 (a draft cheaper than the noise, as on a launch-bound GPU) counts as free."""
    return acceptance_length / (1 + k * max(cost_ratio, 0.0))


def mtp_speedup(report: dict, concurrency: int, ks: list[int], cost: float | None = None) -> dict:
    """k-sweep targets named ``vllm-k{k}`` at one concurrency; the draft cost is fitted
    here unless given (fit it at concurrency 1, where a step is one request's)."""
    base = level(report, "vllm-k0", concurrency)
    steps: dict[int, float] = {}
    lengths: dict[int, float] = {}
    for k in [0, *ks]:
        entry = level(report, f"vllm-k{k}", concurrency)
        if not entry or entry["tpot_s"]["p50"] is None:
            continue
        spec = entry.get("spec_decode") or {}
        lengths[k] = spec.get("acceptance_length") or 1.0
        steps[k] = entry["tpot_s"]["p50"] * lengths[k]  # seconds per target step
    cost = cost if cost is not None else draft_cost_ratio(steps)
    out: dict = {"concurrency": concurrency, "draft_cost_ratio": cost, "by_k": {}}
    for k in ks:
        entry = level(report, f"vllm-k{k}", concurrency)
        if not base or not entry or not base["output_tokens_per_s"]:
            continue
        out["by_k"][k] = {
            "tokens_per_s": entry["output_tokens_per_s"],
            "speedup": entry["output_tokens_per_s"] / base["output_tokens_per_s"],
            "acceptance_length": lengths.get(k),
            "bound": speedup_bound(lengths[k], k, cost)
            if cost is not None and k in lengths
            else None,
        }
    return out


def serving_overhead(report: dict, app: str, baseline: str, low: int, high: int) -> dict | None:
    """The app against vLLM's own server: the issue's four figures where measured.
    Throughput and p90 TTFT at the high concurrency, added p50 TTFT at the low one,
    start-to-ready."""
    a_hi, b_hi = level(report, app, high), level(report, baseline, high)
    a_lo, b_lo = level(report, app, low), level(report, baseline, low)
    if not a_hi or not b_hi or not b_hi["output_tokens_per_s"]:
        return None
    out: dict = {
        "target": app,
        "baseline": baseline,
        "high_concurrency": high,
        "low_concurrency": low,
        "throughput_ratio": a_hi["output_tokens_per_s"] / b_hi["output_tokens_per_s"],
        "p90_ttft_ratio": _ratio(a_hi["ttft_s"].get("p90"), b_hi["ttft_s"].get("p90")),
        "added_p50_ttft_s": None,
        "ready_ratio": None,
    }
    if a_lo and b_lo and a_lo["ttft_s"]["p50"] is not None and b_lo["ttft_s"]["p50"] is not None:
        out["added_p50_ttft_s"] = a_lo["ttft_s"]["p50"] - b_lo["ttft_s"]["p50"]
    ready = report.get("ready_seconds", {})
    if app in ready and baseline in ready:
        out["ready_s"], out["baseline_ready_s"] = ready[app], ready[baseline]
        out["ready_ratio"] = ready[app] / ready[baseline]
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def kernel_library_cost(report: dict) -> list[dict]:
    """Each ``KIND@ISA`` target against ``KIND`` (the machine's own kernel library), per
    concurrency: the eager fallbacks' throughput relative to the native ops."""
    out = []
    for name in report["targets"]:
        base, _, isa = name.partition("@")
        if not isa or base not in report["targets"]:
            continue
        for concurrency in report["plan"]["concurrency"]:
            lower, native = level(report, name, concurrency), level(report, base, concurrency)
            if not lower or not native or not native["output_tokens_per_s"]:
                continue
            out.append(
                {
                    "target": name,
                    "baseline": base,
                    "concurrency": concurrency,
                    "tokens_per_s": lower["output_tokens_per_s"],
                    "baseline_tokens_per_s": native["output_tokens_per_s"],
                    "throughput_ratio": lower["output_tokens_per_s"]
                    / native["output_tokens_per_s"],
                }
            )
    return out


def break_even(report: dict) -> list[dict]:
    """For each acceptance profile and concurrency, the k that made the most output tokens
    per second, by how much it beat the next best k and k = 0. A profile's targets are
    ``vllm-kK~PROFILE``; the preset's own rates are the targets without one ("preset");
    ``vllm-k0`` drafts nothing, so it stands in every profile."""
    profiles: dict[str, dict[int, str]] = {}
    for name in report["targets"]:
        base, _, acceptance = name.partition("~")
        if (k := static_k(base)) is None or "@" in name or (k == 0 and acceptance):
            continue
        if k:
            profiles.setdefault(acceptance or "preset", {})[k] = name
    rows = []
    for acceptance, targets in profiles.items():
        for concurrency in report["plan"]["concurrency"]:
            by_k = {
                k: entry["output_tokens_per_s"]
                for k, name in {0: "vllm-k0", **targets}.items()
                if (entry := level(report, name, concurrency)) and entry["output_tokens_per_s"]
            }
            if 0 in by_k and len(by_k) > 1:
                rows.append(break_even_row(acceptance, concurrency, by_k))
    return rows


MEASURED = "measured"  # a map's profile for the run's own acceptance


def break_even_lines(rows: list[dict], intro: str) -> list[str]:
    """A break-even map (``break_even_row``'s rows) as a Markdown table under INTRO."""
    lines = [
        "",
        intro,
        "",
        "| profile | c | tok/s by k | best k | over the next best | over k = 0 |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        by_k = ", ".join(f"k={k} {v:.1f}" for k, v in row["tokens_per_s_by_k"].items())
        lines.append(
            f"| {row['profile']} | {row['concurrency']} | {by_k} | {row['best_k']}"
            f" | {row['over_next_best']:.3f} (k={row['next_best_k']}) | {row['over_k0']:.3f} |"
        )
    return lines


def break_even_row(acceptance: str, concurrency: int, by_k: dict[int, float]) -> dict:
    """One cell of the map: k -> output tok/s (k = 0 among them), the k that made the
    most, and by how much it beat the next best and k = 0."""
    ranked = sorted(by_k, key=by_k.get, reverse=True)
    best, runner_up = ranked[0], ranked[1]
    return {
        "profile": acceptance,
        "concurrency": concurrency,
        "tokens_per_s_by_k": dict(sorted(by_k.items())),
        "best_k": best,
        "over_next_best": by_k[best] / by_k[runner_up],
        "next_best_k": runner_up,
        "over_k0": by_k[best] / by_k[0],
    }


def static_k(target: str) -> int | None:
    """K of a ``vllm-kK`` target (vLLM's server at a static k), None for any other name."""
    head, _, k = target.partition("vllm-k")
    return int(k) if not head and k.isdigit() else None
