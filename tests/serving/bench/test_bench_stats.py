"""The bench's statistics on known inputs: vLLM's benchmark figures as the report shows
them, cut streams, metric deltas, the draft-cost fit, and target parsing."""

import os

import pytest
from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput

from serving.bench.analysis import (
    draft_cost_ratio,
    kernel_library_cost,
    mtp_speedup,
    serving_overhead,
    speedup_bound,
)
from serving.bench.command import BenchError, parse_target
from serving.bench.load import checked_output
from serving.bench.report import figures
from serving.bench.runner import _merge_spec
from serving.bench.stats import spec_decode_delta, summarize


def _output(ttft: float, itl: list[float], tokens: int, start: float = 0.0) -> RequestFuncOutput:
    return RequestFuncOutput(
        success=True,
        ttft=ttft,
        itl=itl,
        latency=ttft + sum(itl),
        output_tokens=tokens,
        start_time=start,
    )


def test_summary_is_vllm_bench_serve_figures_in_seconds():
    # Two requests of 5 tokens: TTFT 0.1 s and 0.3 s, then four chunks each.
    ok = [_output(0.1, [0.2] * 4, 5), _output(0.3, [0.4] * 4, 5, start=0.05)]
    bad = RequestFuncOutput(success=False, error="Service Unavailable")
    out = summarize([*ok, bad], wall_seconds=2.0)
    assert out["requests"] == 3 and out["failed"] == 1 and out["errors"] == ["Service Unavailable"]
    assert out["output_tokens"] == 10 and out["output_tokens_per_s"] == 5.0
    assert out["requests_per_s"] == 1.0
    assert out["ttft_s"]["p50"] == pytest.approx(0.2)  # numpy's linear interpolation
    assert out["ttft_s"]["p90"] == pytest.approx(0.28)
    assert out["tpot_s"]["p50"] == pytest.approx(0.3)  # (0.8 s and 1.6 s) / 4 tokens
    assert out["itl_s"]["p99"] == pytest.approx(0.4)
    assert out["e2e_s"]["p50"] == pytest.approx((0.9 + 1.9) / 2)
    # The same figures under vLLM's own result keys, in milliseconds.
    assert out["vllm_bench"]["median_ttft_ms"] == pytest.approx(200.0)
    assert out["vllm_bench"]["p90_ttft_ms"] == pytest.approx(280.0)
    assert out["vllm_bench"]["completed"] == 2


def test_a_level_where_everything_failed_has_no_latencies():
    out = summarize([RequestFuncOutput(success=False, error="Unauthorized")], wall_seconds=1.0)
    assert out["failed"] == 1 and out["output_tokens"] == 0
    assert out["ttft_s"] == {"p50": None, "p90": None, "p99": None}


def test_a_short_stream_is_a_failed_request():
    # Every bench request asks for ignore_eos, so fewer tokens than max_tokens means the
    # stream was cut (vLLM's client does not treat an `error` event as a failure).
    cut = checked_output(_output(0.1, [0.1, 0.1], 3), max_tokens=8)
    assert not cut.success and cut.error == "short output: 3 of 8 tokens"
    whole = checked_output(_output(0.1, [0.1] * 7, 8), max_tokens=8)
    assert whole.success and whole.error == ""
    trace = RequestFuncOutput(error="Traceback (most recent call last):\n  ...\nTimeoutError\n")
    assert checked_output(trace, max_tokens=8).error == "TimeoutError"


def _samples(prefix: str, drafts, draft_tokens, accepted, pos0, pos1, model="m", engine="0"):
    labels = (("engine", engine), ("model_name", model))
    return {
        (f"{prefix}spec_decode_num_drafts_total", labels): drafts,
        (f"{prefix}spec_decode_num_draft_tokens_total", labels): draft_tokens,
        (f"{prefix}spec_decode_num_accepted_tokens_total", labels): accepted,
        (
            f"{prefix}spec_decode_num_accepted_tokens_per_pos_total",
            (*labels, ("position", "0")),
        ): pos0,
        (
            f"{prefix}spec_decode_num_accepted_tokens_per_pos_total",
            (*labels, ("position", "1")),
        ): pos1,
    }


@pytest.mark.parametrize("prefix", ["vllm:", "ray_vllm_"])
def test_spec_decode_delta_sums_engines_in_both_name_forms(prefix: str):
    before = {**_samples(prefix, 10, 20, 15, 9, 6), **_samples(prefix, 0, 0, 0, 0, 0, engine="1")}
    after = {
        **_samples(prefix, 20, 40, 30, 18, 12),  # +10 drafts, +20 tokens, +15 accepted
        **_samples(prefix, 30, 60, 30, 20, 10, engine="1"),  # +30, +60, +30
        **_samples(prefix, 99, 99, 99, 99, 99, model="other"),
    }
    delta = spec_decode_delta(before, after, model="m")
    assert delta["drafts"] == 40 and delta["draft_tokens"] == 80 and delta["accepted_tokens"] == 45
    assert delta["acceptance_rate"] == pytest.approx(45 / 80)
    assert delta["acceptance_length"] == pytest.approx(1 + 45 / 40)
    assert delta["acceptance_by_position"] == {
        "0": pytest.approx(29 / 40),
        "1": pytest.approx(16 / 40),
    }


def test_no_speculation_gives_no_acceptance():
    delta = spec_decode_delta({}, {})
    assert delta["acceptance_rate"] is None and delta["acceptance_by_position"] == {}


def test_merge_spec_weights_by_drafts():
    a = {
        "drafts": 10,
        "draft_tokens": 20,
        "accepted_tokens": 20,
        "acceptance_by_position": {"0": 1.0},
    }
    b = {
        "drafts": 30,
        "draft_tokens": 60,
        "accepted_tokens": 30,
        "acceptance_by_position": {"0": 0.5},
    }
    merged = _merge_spec([a, b])
    assert merged["acceptance_rate"] == pytest.approx(50 / 80)
    assert merged["acceptance_by_position"]["0"] == pytest.approx((10 + 15) / 40)
    assert _merge_spec([]) is None


def test_draft_cost_fit_recovers_a_known_cost():
    s0, draft = 0.015, 0.003
    steps = {0: s0, **{k: s0 + k * draft for k in (1, 2, 3)}}
    assert draft_cost_ratio(steps) == pytest.approx(draft / s0)
    assert draft_cost_ratio({0: s0, 2: s0 + 2 * draft}) == pytest.approx(0.2)  # k=0 and 2
    assert draft_cost_ratio({2: 0.02, 3: 0.025}) is None  # needs the plain step
    assert speedup_bound(3.0, 2, 0.2) == pytest.approx(3.0 / 1.4)


def _level(target, c, tok_s, tpot, ttft, length=None):
    return {
        "target": target,
        "concurrency": c,
        "output_tokens_per_s": tok_s,
        "tpot_s": {"p50": tpot},
        "ttft_s": {"p50": ttft, "p90": ttft * 2},
        "spec_decode": {"acceptance_length": length} if length else None,
    }


def test_mtp_speedup_and_serving_overhead_from_a_report():
    # Step time 15 ms at k=0; s_k = 15 ms + 3 ms * k; full acceptance (length k + 1).
    report = {
        "levels": [
            _level("vllm-k0", 1, 66.7, 0.015, 0.05),
            *[
                _level(f"vllm-k{k}", 1, 100.0 * k, (0.015 + 0.003 * k) / (k + 1), 0.05, k + 1)
                for k in (1, 2, 3)
            ],
            _level("ray-app", 1, 50.0, 0.02, 0.65),
        ],
        "ready_seconds": {"ray-app": 45.0, "vllm-k2": 30.0},
    }
    out = mtp_speedup(report, 1, [1, 2, 3])
    assert out["draft_cost_ratio"] == pytest.approx(0.2)
    assert out["by_k"][2]["speedup"] == pytest.approx(200.0 / 66.7)
    assert out["by_k"][2]["bound"] == pytest.approx(3 / 1.4)
    over = serving_overhead(report, "ray-app", "vllm-k2", 1, 1)
    assert over["throughput_ratio"] == pytest.approx(0.25)
    assert over["added_p50_ttft_s"] == pytest.approx(0.6)
    assert over["ready_ratio"] == pytest.approx(1.5)


def test_parse_target():
    t = parse_target("app=http://127.0.0.1:8000,metrics=http://127.0.0.1:8089/metrics", "k")
    assert t.base_url == "http://127.0.0.1:8000/v1" and t.metrics_url.endswith("/metrics")
    assert t.api_key == "k" and t.model == "dsv4-golden"
    assert parse_target("x=https://h/v1,model=deepseek-ai/DeepSeek-V4-Flash", "k").model.endswith(
        "Flash"
    )
    for bad in ["noequals", "x=ftp://h", "x=http://h,colour=red", "=http://h"]:
        with pytest.raises(BenchError):
            parse_target(bad, "k")


def test_kernel_library_cost_compares_each_forced_library_with_the_native_server():
    report = {
        "targets": ["vllm-k0", "vllm-k2", "vllm-k0@avx2", "vllm-k2@avx2"],
        "plan": {"concurrency": [1, 8]},
        "levels": [
            _level("vllm-k0", 1, 60.0, 0.016, 0.05),
            _level("vllm-k2", 1, 120.0, 0.008, 0.05, 3.0),
            _level("vllm-k0@avx2", 1, 30.0, 0.032, 0.1),
            _level("vllm-k2@avx2", 1, 40.0, 0.024, 0.1, 3.0),
            _level("vllm-k0", 8, 200.0, 0.04, 0.2),
        ],
    }
    rows = {(r["target"], r["concurrency"]): r for r in kernel_library_cost(report)}
    assert set(rows) == {("vllm-k0@avx2", 1), ("vllm-k2@avx2", 1)}  # c=8 has no @avx2 level
    assert rows[("vllm-k0@avx2", 1)]["throughput_ratio"] == pytest.approx(0.5)
    assert rows[("vllm-k2@avx2", 1)]["baseline"] == "vllm-k2"
    # The MTP figures use only the native k-sweep, not the forced targets' names.
    assert [b["concurrency"] for b in figures(report)["mtp"]] == [1, 8]


def test_a_local_kind_names_a_known_kernel_library():
    from serving.bench.targets import environment, local_setup

    cpu = local_setup("cpu-tiny")
    assert environment("vllm-k2@avx512", cpu)["DSV4_CPU_KERNEL_LIBRARY"] == "avx512"
    inherited = os.environ.get("DSV4_CPU_KERNEL_LIBRARY")
    assert environment("vllm-k2", cpu).get("DSV4_CPU_KERNEL_LIBRARY") == inherited
    with pytest.raises(ValueError, match="unknown kernel library 'sse4'"):
        environment("vllm-k2@sse4", cpu)
