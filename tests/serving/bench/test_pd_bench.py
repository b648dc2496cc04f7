"""The P/D bench (serving/bench/pd_bench.py) without a server: its arms' start commands
through the preset resolver, the workload per level, and the figures and ratios it
reports from played turns."""

import json
from pathlib import Path

import pytest

from serving.bench.command import BenchError, run_pd
from serving.bench.conversations import ConversationWorkload, Turn
from serving.bench.pd_bench import (
    compare,
    level_workload,
    markdown,
    same_text_share,
    summarise,
    summarise_arm,
    tpot_s,
    write,
)
from serving.bench.targets import (
    AGGREGATED,
    DISAGGREGATED,
    PD_GPU_SHARE_SETS,
    local_setup,
    local_specs,
)
from serving.cli import build_parser
from serving.config.build_args import BuildArgs, resolve


def sets_of(command: list[str]) -> list[str]:
    return [command[i + 1] for i, a in enumerate(command) if a == "--set"]


def test_the_pd_arm_is_the_preset_disaggregated_and_shares_the_gpu():
    setup = local_setup("gpu-golden", engines=2)
    agg, pd = local_specs([AGGREGATED, DISAGGREGATED], setup, python="/x/python3")
    assert "serving.path=ingress" in sets_of(agg.command)
    assert not any(s.startswith("disaggregation.") for s in sets_of(agg.command))
    # What `up` will build from the P/D arm's sets: both roles on a fraction of one GPU.
    _, preset = resolve(BuildArgs(preset="gpu-golden", set=sets_of(pd.command)))
    section = preset.disaggregation
    assert section is not None and section.connector == "nixl"
    assert section.prefill.gpu_share == section.decode.gpu_share == 0.45
    assert set(PD_GPU_SHARE_SETS) <= set(sets_of(pd.command))


def test_on_a_cpu_preset_the_pd_arm_takes_whole_cores_not_gpu_shares():
    setup = local_setup("cpu-tiny", engines=2)
    (pd,) = local_specs([DISAGGREGATED], setup, python="/x/python3")
    assert not set(PD_GPU_SHARE_SETS) & set(sets_of(pd.command))
    _, preset = resolve(BuildArgs(preset="cpu-tiny", set=sets_of(pd.command)))
    assert preset.disaggregation is not None


def test_a_preset_p_d_refuses_is_refused_before_any_start():
    # P/D sizes each role itself: a preset autoscaling its one deployment is refused by name.
    setup = local_setup(
        "gpu-golden",
        ["deployment.autoscaling={min_replicas: 1, max_replicas: 2, target_ongoing_requests: 8}"],
    )
    with pytest.raises(ValueError, match="(?s)ray-app-pd.*drop deployment.autoscaling"):
        local_specs([DISAGGREGATED], setup)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--local", "ray-app-pd"], "two arms"),
        (["--local", "vllm-k0", "ray-app-pd"], "not one"),
        (["--routing", "--local", "ray-app", "ray-app-pd"], "separate benches"),
    ],
)
def test_bad_pd_arguments_are_refused_by_name(argv, message):
    args = build_parser().parse_args(["bench", "--pd", *argv])
    with pytest.raises((BenchError, SystemExit), match=message):
        run_pd(args, [], None)


def test_every_level_has_a_conversation_per_client():
    base = ConversationWorkload(conversations=4, turns=3)
    assert level_workload(base, 1).conversations == 4
    wide = level_workload(base, 32)
    assert (wide.conversations, wide.concurrency, wide.turns) == (32, 32, 3)


def turn(session: str, ttft: float, latency: float, out: int = 9, text: str = "t", **kw) -> Turn:
    return Turn(session, 0, True, ok=True, ttft_s=ttft, latency_s=latency, output_tokens=out,
                prompt_tokens=1000, cached_tokens=kw.get("cached", 500), text=text)  # fmt: skip


def test_time_per_output_token_is_after_the_first():
    assert tpot_s(turn("a", 0.2, 1.0, out=9)) == pytest.approx(0.1)
    assert tpot_s(turn("a", 0.2, 1.0, out=1)) is None


def test_a_level_s_figures():
    turns = [turn("a", 0.1, 0.9), turn("b", 0.3, 1.9), Turn("c", 0, True, error="boom")]
    s = summarise(turns, wall_s=2.0)
    assert (s["requests"], s["failed"], s["errors"]) == (3, 1, ["boom"])
    assert s["ttft"]["p90_s"] == 0.3 and s["ttft"]["n"] == 2
    assert s["tpot"]["p50_s"] == pytest.approx(0.1) and s["tpot"]["p90_s"] == pytest.approx(0.2)
    assert s["hit_rate"] == 0.5 and s["output_tokens_per_s"] == 9.0


def played(ttft: float, latency: float, texts: tuple[str, ...]) -> dict:
    return {
        "levels": {
            c: {
                "turns": [turn(f"s{i}", ttft, latency, text=t).row() for i, t in enumerate(texts)],
                "wall_s": 1.0,
            }  # fmt: skip
            for c in ("1", "8")
        }
    }


def test_ratios_are_pd_over_aggregated_per_level_with_the_targets():
    raw = {
        AGGREGATED: [played(0.1, 0.9, ("x", "y", "z", "w"))],
        DISAGGREGATED: [played(0.2, 0.6, ("x", "y", "z", "v"))],
    }
    summary = {name: summarise_arm(rounds, [30.0]) for name, rounds in raw.items()}
    result = compare(summary, raw, (AGGREGATED, DISAGGREGATED))
    one, eight = result["levels"]["1"], result["levels"]["8"]
    assert one["ttft_p50_ratio"] == pytest.approx(2.0)
    assert one["tpot_p90_ratio"] == pytest.approx(0.05 / 0.1)
    assert one["throughput_ratio"] == 1.0 and one["same_text"] == 0.75
    assert "met" not in one  # the targets start at c = 8
    assert eight["met"] == {"tpot_p90_ratio": True, "throughput_ratio": True}
    report = markdown({"arms": summary, "compare": result, "start_errors": {}})
    assert f"| {DISAGGREGATED} | 8 | 4 (0) | 1000 | 0.50 | 200.0 / 200.0 | 50.0 / 50.0 |" in report
    assert "| 8 | 2.00 | 2.00 | 0.50 | 0.50 | 1.00 | 0.75 |" in report
    # An arm that failed to start leaves no ratios, and says why.
    lonely = markdown(
        {
            "arms": {AGGREGATED: summary[AGGREGATED]},
            "compare": {},
            "start_errors": {DISAGGREGATED: {"error": "no GPU"}},
        }  # fmt: skip
    )
    assert "ray-app-pd did not start: no GPU" in lonely


def test_same_text_counts_only_turns_both_arms_completed():
    a = {"turns": [turn("s0", 0.1, 1).row(), turn("s1", 0.1, 1, text="u").row()]}
    b = {"turns": [turn("s0", 0.1, 1).row(), {**turn("s1", 0.1, 1).row(), "ok": False}]}
    assert same_text_share(a, b) == 1.0
    assert same_text_share(a, {"turns": []}) is None


def test_the_written_summary_leaves_the_replies_to_the_turns_file(tmp_path):
    raw = {AGGREGATED: [played(0.1, 0.9, ("x",))], DISAGGREGATED: [played(0.2, 0.6, ("x",))]}
    summary = {name: summarise_arm(rounds, []) for name, rounds in raw.items()}
    result = {"arms": summary, "compare": compare(summary, raw, (AGGREGATED, DISAGGREGATED)),
              "start_errors": {}, "raw": raw}  # fmt: skip
    paths = write(result, tmp_path)
    assert [p.name for p in paths] == ["pd.json", "pd-turns.json", "pd.md", "pd-levels.png"]
    assert "raw" not in json.loads(paths[0].read_text())
    assert json.loads(paths[1].read_text()) == raw
    assert paths[3].stat().st_size > 10_000


def test_the_warm_up_plays_one_turn_per_client_on_prompts_of_its_own():
    from serving.bench.conversations import sessions
    from serving.bench.pd_bench import warmup_workload
    from serving.golden import GoldenDesign

    base = ConversationWorkload(conversations=4, turns=3, unrelated=2)
    warm = warmup_workload(base, 8)
    played = sessions(warm, GoldenDesign().words)
    assert len(played) == 8 and all(len(s.users) == 1 for s in played)
    measured = {s.system for s in sessions(level_workload(base, 8), GoldenDesign().words)}
    assert not measured & {s.system for s in played}


def test_texts_drawn_at_random_are_not_compared():
    raw = {AGGREGATED: [played(0.1, 0.9, ("x",))], DISAGGREGATED: [played(0.2, 0.6, ("x",))]}
    summary = {name: summarise_arm(rounds, []) for name, rounds in raw.items()}
    result = compare(summary, raw, (AGGREGATED, DISAGGREGATED), texts_comparable=False)
    assert all(row["same_text"] is None for row in result["levels"].values())
    report = markdown(
        {"arms": summary, "compare": result, "start_errors": {}, "texts_compared": False}
    )
    assert "Same text: not compared" in report


def test_arms_take_turns_in_rotating_order_and_each_turn_is_reported():
    from serving.bench.arms import play_in_turns
    from serving.bench.load import Target

    remote = [Target(name, f"http://127.0.0.1:9/{name}/v1", "m") for name in ("a", "b")]
    order, seen = [], []
    result = play_in_turns(
        None,
        [],
        remote,
        2,
        lambda target: order.append(target.name) or {"round": len(order)},
        Path("."),
        lambda message: None,
        after_each=lambda rounds: seen.append(sum(len(r) for r in rounds.played.values())),
    )
    assert order == ["a", "b", "b", "a"]
    assert seen == [1, 2, 3, 4]
    assert result.played == {"a": [{"round": 1}, {"round": 4}], "b": [{"round": 2}, {"round": 3}]}


def test_kv_counters_are_read_from_a_real_metrics_page_in_ray_s_names():
    """Two engines' counters as Ray exports them (prometheus-client's own exposition,
    scraped over HTTP): the bench's deltas sum the engines and split prompt tokens by
    source."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

    from serving.bench.stats import kv_transfer_delta
    from serving.bench.targets import free_ports
    from serving.monitoring.metrics_page import scrape

    registry = CollectorRegistry()
    labels = ["ReplicaId", "source"]
    tokens = Counter("ray_vllm_prompt_tokens_by_source", "", labels, registry=registry)
    xfer = Histogram("ray_vllm_nixl_xfer_time_seconds", "", ["ReplicaId"], registry=registry)
    size = Histogram("ray_vllm_nixl_bytes_transferred", "", ["ReplicaId"], registry=registry)
    failed = Counter("ray_vllm_nixl_num_failed_transfers", "", ["ReplicaId"], registry=registry)
    (port,) = free_ports(1)
    server, thread = start_http_server(port, "127.0.0.1", registry=registry)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        tokens.labels("prefill", "local_compute").inc(100)  # before the levels
        before = scrape(url)
        tokens.labels("prefill", "local_compute").inc(3000)
        tokens.labels("decode", "external_kv_transfer").inc(2900)
        tokens.labels("decode", "local_compute").inc(100)
        for seconds, nbytes in ((0.02, 4e6), (0.03, 6e6)):
            xfer.labels("decode").observe(seconds)
            size.labels("decode").observe(nbytes)
        failed.labels("decode").inc()
        delta = kv_transfer_delta(before, scrape(url))
    finally:
        server.shutdown()
        thread.join()
    assert delta["prompt_tokens_by_source"] == {
        "external_kv_transfer": 2900.0,
        "local_compute": 3100.0,
    }
    assert delta["transfers"] == 2 and delta["transfer_bytes"] == 10e6
    assert delta["transfer_seconds"] == pytest.approx(0.05)
    assert delta["failed_transfers"] == 1


def test_an_arm_s_kv_counters_add_over_rounds_and_reach_the_report():
    kv = {
        "transfers": 4.0,
        "transfer_seconds": 0.1,
        "transfer_bytes": 8e6,
        "failed_transfers": 0.0,
        "prompt_tokens_by_source": {"external_kv_transfer": 900.0},
    }
    rounds = [{**played(0.2, 0.6, ("x",)), "kv": kv}, {**played(0.2, 0.6, ("x",)), "kv": kv}]
    arm = summarise_arm(rounds, [])
    assert arm["kv"]["transfers"] == 8 and arm["kv"]["prompt_tokens_by_source"] == {
        "external_kv_transfer": 1800.0
    }
    report = markdown({"arms": {DISAGGREGATED: arm}, "compare": {}, "start_errors": {}})
    line = "external_kv_transfer 1800); 8 NIXL transfers, 16.0 MB, 0.20 s summed, 0 failed"
    assert line in report
    assert summarise_arm([played(0.2, 0.6, ("x",))], [])["kv"] is None
