"""Statistics of one benchmark level and spec-decode counter deltas from /metrics.

Latency percentiles and rates are vLLM's own (`vllm.benchmarks.serve.calculate_metrics`,
what `vllm bench serve` prints). Acceptance is ours: vLLM's benchmark reads
``vllm:spec_decode_*`` from the target's own /metrics right after the run, while a Ray
Serve app exports them as ``ray_vllm_*`` on Ray's metrics port seconds later, summed
over its replicas' engines.
"""

from __future__ import annotations

import contextlib
import io

from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput
from vllm.benchmarks.serve import calculate_metrics

from serving.monitoring.metrics_page import Samples

PERCENTILES = (50, 90, 99)
LATENCIES = {"ttft": "ttft_s", "itl": "itl_s", "tpot": "tpot_s", "e2el": "e2e_s"}
SPEC_COUNTERS = {
    "drafts": "spec_decode_num_drafts_total",
    "draft_tokens": "spec_decode_num_draft_tokens_total",
    "accepted": "spec_decode_num_accepted_tokens_total",
    "per_position": "spec_decode_num_accepted_tokens_per_pos_total",
}


def vllm_bench_metrics(outputs: list[RequestFuncOutput], wall_seconds: float) -> dict:
    """The figures `vllm bench serve` reports for these outputs, under its result keys
    (``median_ttft_ms``, ``p99_itl_ms``, ``output_throughput``, ...)."""
    with contextlib.redirect_stdout(io.StringIO()):  # it prints hints and failed requests
        metrics, _ = calculate_metrics(
            input_requests=[],
            outputs=outputs,
            dur_s=wall_seconds,
            tokenizer=None,  # output lengths come from the usage chunk
            selected_percentiles=list(PERCENTILES),
            goodput_config_dict={},
        )
    result = {
        "completed": metrics.completed,
        "failed": metrics.failed,
        "total_output_tokens": metrics.total_output,
        "request_throughput": metrics.request_throughput,
        "output_throughput": metrics.output_throughput,
    }
    for name in LATENCIES:
        for stat in ("mean", "median", "std"):
            result[f"{stat}_{name}_ms"] = float(getattr(metrics, f"{stat}_{name}_ms"))
        for p, value in getattr(metrics, f"percentiles_{name}_ms"):
            result[f"p{p:g}_{name}_ms"] = float(value)
    return result


def summarize(outputs: list[RequestFuncOutput], wall_seconds: float) -> dict:
    vllm = vllm_bench_metrics(outputs, wall_seconds)
    ok = vllm["completed"] > 0

    def seconds(name: str) -> dict[str, float | None]:
        return {f"p{q}": vllm[f"p{q}_{name}_ms"] / 1000 if ok else None for q in PERCENTILES}

    return {
        "requests": len(outputs),
        "failed": vllm["failed"],
        "errors": sorted({o.error for o in outputs if not o.success})[:5],
        "wall_seconds": wall_seconds,
        "output_tokens": vllm["total_output_tokens"],
        "output_tokens_per_s": vllm["output_throughput"],
        "requests_per_s": vllm["request_throughput"],
        **{key: seconds(name) for name, key in LATENCIES.items()},
        "vllm_bench": vllm,
    }


def _metric_name(sample_name: str) -> str:
    """``vllm:x`` and Ray's ``ray_vllm_x`` as one name ``x``."""
    for prefix in ("vllm:", "ray_vllm_"):
        if sample_name.startswith(prefix):
            return sample_name[len(prefix) :]
    return sample_name


def spec_decode_delta(before: Samples, after: Samples, model: str | None = None) -> dict:
    """Acceptance between two /metrics scrapes, summed over every engine."""

    def total(samples: Samples, metric: str, position: str | None = None) -> float:
        out = 0.0
        for (name, labels), value in samples.items():
            label = dict(labels)
            if _metric_name(name) != metric or (model and label.get("model_name") != model):
                continue
            if position is None or label.get("position") == position:
                out += value
        return out

    delta = {k: total(after, m) - total(before, m) for k, m in SPEC_COUNTERS.items()}
    positions = sorted(
        {
            dict(labels)["position"]
            for (name, labels) in after
            if _metric_name(name) == SPEC_COUNTERS["per_position"] and "position" in dict(labels)
        },
        key=int,
    )
    accepted_at = {
        p: total(after, SPEC_COUNTERS["per_position"], p)
        - total(before, SPEC_COUNTERS["per_position"], p)
        for p in positions
    }
    return acceptance(delta["drafts"], delta["draft_tokens"], delta["accepted"], accepted_at)


def acceptance(
    drafts: float, draft_tokens: float, accepted: float, accepted_at: dict[str, float]
) -> dict:
    """Acceptance figures from counter increases (``accepted_at``: position -> tokens)."""
    return {
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "acceptance_length": 1 + accepted / drafts if drafts else None,
        "acceptance_by_position": {p: n / drafts for p, n in accepted_at.items()} if drafts else {},
    }


# What a disaggregated app's engines count of a prompt's KV (vLLM's names, summed over
# engines): where each prompt token came from, and the NIXL transfers decode made.
KV_COUNTERS = {
    "transfers": "nixl_xfer_time_seconds_count",
    "transfer_seconds": "nixl_xfer_time_seconds_sum",
    "transfer_bytes": "nixl_bytes_transferred_sum",
    "failed_transfers": "nixl_num_failed_transfers_total",
}
BY_SOURCE = "prompt_tokens_by_source_total"


def kv_transfer_delta(before: Samples, after: Samples) -> dict:
    """Prompt tokens by source (``local_compute``, ``external_kv_transfer``, ...) and the
    NIXL transfers between two /metrics scrapes, summed over every engine."""

    def total(samples: Samples, metric: str, source: str | None = None) -> float:
        return sum(
            value
            for (name, labels), value in samples.items()
            if _metric_name(name) == metric
            and (source is None or dict(labels).get("source") == source)
        )

    sources = sorted(
        {
            dict(labels)["source"]
            for (name, labels) in after
            if _metric_name(name) == BY_SOURCE and "source" in dict(labels)
        }
    )
    out = {k: total(after, m) - total(before, m) for k, m in KV_COUNTERS.items()}
    out["prompt_tokens_by_source"] = {
        src: total(after, BY_SOURCE, src) - total(before, BY_SOURCE, src) for src in sources
    }
    return out
