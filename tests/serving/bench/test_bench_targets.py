"""The bench's arguments and its local targets for each preset: the commands, engine
arguments, environment and GPU memory budget they start with (nothing is started)."""

import os
import time

import pytest

from serving.bench import local
from serving.bench.command import BenchError, bench_plan, bench_setup, start_timeout
from serving.bench.targets import (
    GPU_SHARE,
    RAY_REPORT_INTERVAL_ENV,
    environment,
    local_setup,
    local_specs,
    vllm_kwargs,
)
from serving.cli import build_parser
from serving.config.vllm_args import to_cli_args
from serving.golden.golden_engine import CPU_ENV, golden_engine_kwargs, mtp_config

GPU_COMMAND = [
    "bench",
    "--preset",
    "gpu-golden",
    "--local",
    "vllm-k0",
    "vllm-k1",
    "vllm-k2",
    "vllm-k3",
    "ray-app",
    "--start",
    "parallel",
    "--concurrency",
    "1",
    "8",
    "32",
    "64",
    "128",
    "--requests",
    "16",
    "--requests-per-stream",
    "2",
    "--rounds",
    "2",
    "--ray-metrics-interval-ms",
    "2000",
    "--budget-s",
    "390",
    "--out",
    "/tmp/x",
]


def _args(argv: list[str]):
    return build_parser().parse_args(argv)


def test_defaults_keep_the_cpu_bench_as_it_was():
    args = _args(["bench", "--local", "vllm-k0"])
    assert args.preset == "cpu-tiny" and args.set == [] and args.start == "serial"
    assert args.kv_cache_gib is None and args.requests_per_stream == 0 and args.budget_s == 0
    assert args.ray_metrics_interval_ms == 0 and args.logs is None
    assert bench_setup(args).sets == ()  # no GPU budget on the CPU


def test_the_gpu_command_parses():
    args = _args(GPU_COMMAND)
    assert args.preset == "gpu-golden" and args.start == "parallel"
    assert args.concurrency == [1, 8, 32, 64, 128] and args.budget_s == 390.0
    plan = bench_plan(args)
    assert [plan.requests_at(c) for c in plan.concurrency] == [16, 16, 64, 128, 256]
    # Enough distinct prompts for the widest level's rounds.
    assert len(plan.prompts) == 256 * 2


@pytest.mark.parametrize(
    "bad",
    [
        ["--requests-per-stream", "-1"],
        ["--budget-s", "-5"],
        ["--start", "both"],
        ["--temperature", "2.5"],
        ["--temperature", "-0.1"],
    ],
)
def test_bad_values_are_refused(bad):
    with pytest.raises(SystemExit):
        _args(["bench", "--local", "vllm-k0", *bad])


def test_cpu_tiny_vllm_server_gets_serve_vllms_arguments_and_env():
    setup = local_setup("cpu-tiny")
    (spec,) = local_specs(["vllm-k2"], setup, python="/usr/bin/python3")
    expected = to_cli_args(golden_engine_kwargs(setup.model_dir, speculative_config=mtp_config(2)))
    assert spec.command[:3] == ["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert spec.command[3:-4] == expected
    assert spec.command[-4:] == ["--host", "127.0.0.1", "--port", str(spec.port)]
    assert all(spec.env[k] == os.environ.get(k, v) for k, v in CPU_ENV.items())
    assert spec.metrics_url == f"http://127.0.0.1:{spec.port}/metrics"
    assert "speculative_config" not in vllm_kwargs(setup, 0)


def test_gpu_golden_targets_share_the_gpu_within_a_budget():
    setup = local_setup("gpu-golden", engines=5)
    kwargs = vllm_kwargs(setup, 3)
    assert kwargs["kv_cache_memory_bytes"] == 2 << 30
    assert kwargs["gpu_memory_utilization"] == pytest.approx(GPU_SHARE / 5)
    assert 5 * kwargs["gpu_memory_utilization"] <= GPU_SHARE + 1e-9
    assert kwargs["kv_cache_dtype"] == "fp8" and kwargs["max_num_seqs"] >= 128
    assert kwargs["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 3}
    assert "enforce_eager" not in kwargs  # CUDA graphs, as the preset serves
    # One engine alone keeps the preset's own, smaller share.
    alone = vllm_kwargs(local_setup("gpu-golden", engines=1), 0)
    assert alone["gpu_memory_utilization"] == 0.3
    # 0 GiB: no budget at all, the preset's arguments as they are.
    plain = vllm_kwargs(local_setup("gpu-golden", engines=5, kv_cache_gib=0), 0)
    assert "kv_cache_memory_bytes" not in plain and plain["gpu_memory_utilization"] == 0.3


def test_a_users_set_wins_over_the_bench_budget():
    setup = local_setup("gpu-golden", ["engine_args.gpu_memory_utilization=0.05"], engines=2)
    assert vllm_kwargs(setup, 0)["gpu_memory_utilization"] == 0.05
    assert setup.sets[-1] == "engine_args.gpu_memory_utilization=0.05"


def test_the_gpu_ray_app_is_up_with_the_same_overrides():
    setup = local_setup("gpu-golden", engines=5, ray_metrics_interval_ms=2000)
    specs = local_specs(["vllm-k2", "ray-app", "ray-app-old"], setup, python="/x/python3")
    app, old = specs[1], specs[2]
    assert app.command[:5] == ["/x/python3", "-m", "serving.cli", "up", "gpu-golden"]
    assert "dsv4-serve" not in " ".join(app.command)
    assert "--verbose" in app.command  # the engine's lines (start stages) reach its log
    sets = [app.command[i + 1] for i, a in enumerate(app.command) if a == "--set"]
    assert sets == list(setup.sets)
    assert "serving.path=ingress" in old.command  # a variant adds its own after
    assert app.ray_app and app.metrics_url.startswith("http://127.0.0.1:")
    assert app.env[RAY_REPORT_INTERVAL_ENV] == "2000"
    assert app.settle_period_s == 1.0 and app.settle_timeout_s < 36
    ports = [s.port for s in specs] + [
        int(s.command[s.command.index(flag) + 1])
        for s in specs
        if s.ray_app
        for flag in ("--ray-metrics-port", "--gateway-metrics-port")
    ]
    assert len(set(ports)) == len(ports) == 7


def test_gpu_targets_drop_the_cpu_backends_switches():
    setup = local_setup("gpu-golden")
    inherited = {"VLLM_CPU_KVCACHE_SPACE": "4", "DSV4_CPU_KERNEL_LIBRARY": "avx2", "HOME": "/h"}
    for kind in ("vllm-k1", "ray-app"):
        env = environment(kind, setup, inherited)
        assert env == {"HOME": "/h"}
    # The CPU preset keeps them (and its own VLLM_CPU_KVCACHE_SPACE under the caller's).
    cpu = environment("vllm-k1", local_setup("cpu-tiny"), inherited)
    assert cpu["VLLM_CPU_KVCACHE_SPACE"] == "4" and cpu["DSV4_CPU_KERNEL_LIBRARY"] == "avx2"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--preset", "gpu-golden", "--local", "vllm-k2@avx2"], "CPU kernel library"),
        (["--local", "vllm-k9"], "unknown local target"),
        (["--local", "sglang"], "unknown local target"),
        (["--preset", "no-such-preset", "--local", "vllm-k0"], "unknown preset"),
        (["--local", "vllm-k0", "--set", "engine_args"], "expected key.path=value"),
    ],
)
def test_bad_local_targets_are_named_before_anything_starts(argv, message):
    with pytest.raises(BenchError, match=message):
        bench_setup(_args(["bench", *argv]))


def test_a_budget_bounds_the_targets_start_beyond_the_default_limit():
    # A start with nothing compiled ahead outlasts the default; the budget is the caller's.
    now = time.monotonic()
    assert local.READY_TIMEOUT_S < 1390 < start_timeout(now + 1400) <= 1400
    assert start_timeout(now - 5) == 30.0  # the budget spent: a short try, not none
    assert start_timeout(None) == local.READY_TIMEOUT_S
