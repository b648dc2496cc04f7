"""The routing bench's workload and figures (serving/bench/conversations.py,
routing_bench.py), without a server: the sessions it plays and the ratios it reports."""

import pytest

from serving.bench.conversations import ConversationWorkload, Turn, sessions
from serving.bench.routing_bench import (
    DEFAULT,
    PREFIX,
    SINGLE,
    compare,
    markdown,
    summarise,
    summarise_arm,
)
from serving.golden import GoldenDesign

WORDS = GoldenDesign().words


def test_conversations_share_one_system_prompt_and_unrelated_ones_do_not():
    workload = ConversationWorkload(conversations=5, turns=3, unrelated=4, seed=3)
    played = sessions(workload, WORDS)
    shared = [s for s in played if s.shared]
    alone = [s for s in played if not s.shared]
    assert len(shared) == 5 and len(alone) == 4
    assert len({s.system for s in shared}) == 1
    assert all(s.system != shared[0].system for s in alone)
    assert all(len(s.users) == 3 for s in shared) and all(len(s.users) == 1 for s in alone)
    assert len(shared[0].system.split()) == workload.system_words
    assert sessions(workload, WORDS) == played  # the same workload, the same requests


@pytest.mark.parametrize("field", ["conversations", "turns", "system_words", "max_tokens"])
def test_a_workload_without_requests_is_refused(field):
    with pytest.raises(ValueError, match=field):
        ConversationWorkload(**{field: 0}).check()


def turn(replica: str, prompt: int, cached: int, ttft: float, shared: bool = True) -> Turn:
    return Turn("c", 0, shared, ok=True, ttft_s=ttft, prompt_tokens=prompt,
                cached_tokens=cached, output_tokens=10, replica=replica)  # fmt: skip


def test_summary_counts_hits_per_replica_and_the_largest_share():
    turns = [turn("a", 1000, 768, 0.2), turn("a", 1000, 512, 0.4), turn("b", 1000, 0, 1.0)]
    turns.append(Turn("c", 1, True, error="short output"))
    arm = summarise(turns, wall_s=10.0)
    assert arm["requests"] == 4 and arm["failed"] == 1
    assert arm["hit_rate"] == pytest.approx(1280 / 3000)
    assert arm["replicas"]["a"]["hit_rate"] == pytest.approx(0.64)
    assert arm["max_share"] == pytest.approx(2 / 3)
    assert arm["ttft_shared"]["p50_s"] == 0.4
    assert arm["output_tokens_per_s"] == 3.0


def test_an_arms_largest_share_is_the_largest_of_any_round():
    # Each round starts fresh replicas: over two rounds, four ids of a quarter each, yet
    # every round put two thirds of its requests on one replica.
    rounds = [
        {"turns": [turn(r, 100, 0, 0.1).row() for r in (a, a, b)], "wall_s": 1.0}
        for a, b in (("r1a", "r1b"), ("r2a", "r2b"))
    ]
    arm = summarise_arm(rounds, [10.0, 20.0])
    assert arm["max_share"] == pytest.approx(2 / 3)
    assert len(arm["replicas"]) == 4 and arm["requests"] == 6 and arm["ready_s"] == 15.0


def test_targets_are_ratios_of_the_arms():
    fast = summarise([turn("a", 1000, 900, 0.1), turn("b", 1000, 900, 0.1)], 10.0)
    slow = summarise([turn("a", 1000, 300, 0.3), turn("b", 1000, 300, 0.3)], 10.0)
    ideal = summarise([turn("a", 1000, 950, 0.1), turn("a", 1000, 950, 0.1)], 10.0)
    result = compare({PREFIX: fast, DEFAULT: slow, SINGLE: ideal})
    assert result["hit_rate_vs_ideal"] == pytest.approx(900 / 950)
    assert result["ttft_p50_gain_shared"] == pytest.approx(3.0)
    assert result["met"] == {
        "hit_rate_vs_ideal": True,
        "ttft_p50_gain_shared": True,
        "throughput_vs_default": True,
        "prefix_max_share": True,
    }
    assert "0.95 (target >= 0.8)" in markdown({"arms": {PREFIX: fast}, "compare": result})
    assert compare({PREFIX: fast})["met"] == {"prefix_max_share": True}


def test_the_real_width_gpu_script_runs_a_bench_our_cli_accepts(tmp_path):
    """tests/gpu/routing_realwidth.sh with python3 standing in: its command line is one
    `dsv4-serve bench` takes, every (prefix, concurrency) cell in one run, its three arms
    on the bench model, two replicas sharing the GPU, the context long enough for the
    longest prefix."""
    import os
    import shlex
    import subprocess

    from serving.bench.command import bench_setup
    from serving.cli import build_parser
    from tests.support.paths import ROOT

    shim = tmp_path / "bin"
    shim.mkdir()
    seen = tmp_path / "argv.txt"
    (shim / "python3").write_text(
        f'#!/bin/sh\n[ "$2" = serving.cli ] && echo "$@" >> {shlex.quote(str(seen))}\nexit 0\n'
    )
    (shim / "python3").chmod(0o755)
    env = os.environ | {"PATH": f"{shim}:{os.environ['PATH']}", "PREFIXES": "8192 32768"}
    run = subprocess.run(
        ["bash", "tests/gpu/routing_realwidth.sh", str(tmp_path / "out"), str(tmp_path / "jit")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    (line,) = seen.read_text().splitlines()
    args = build_parser().parse_args(line.split()[2:])  # past "-m serving.cli"
    setup = bench_setup(args)
    assert args.routing and args.local == ["ray-app", "ray-app-prefix", "ray-app-single"]
    assert args.system_words == [8192, 32768] and args.concurrency == [8, 32]
    assert setup.preset.model.bench.layers == 12
    assert setup.preset.deployment.replicas == 2 and setup.preset.accelerator.gpu_share == 0.45
    assert setup.preset.engine_args["max_model_len"] > max(args.system_words)
