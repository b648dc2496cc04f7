"""What `dsv4-serve warm` starts for each preset: the warm model, the engine's command
(held against the bench's own for the preset, and vLLM's parser), the cache's shapes, and
the command's refusals (nothing is started)."""

import json

import pytest

from serving.bench.targets import local_setup, local_specs
from serving.bench_model.shapes import RELEASED, bench_config
from serving.cli import build_parser, main
from serving.config.build_args import BuildArgs, resolve
from serving.warm.plan import WARM_LAYERS, WarmPlanError, cache_shapes, model_shape, warm_sets
from serving.warm.sweep import plan_for

GPU_PRESETS = ["h200-flash-bench", "h200-flash-mtp", "h200-pro-mtp", "b200-pro-mtp"]


def _preset(name: str, sets: list[str] = ()):
    return resolve(BuildArgs(preset=name, set=list(sets)))[1]


@pytest.mark.parametrize("shape", ["flash", "pro"])
def test_the_warm_layers_hold_every_layer_kind_of_the_released_model(shape):
    released = RELEASED[shape]
    total, hashed = released["num_hidden_layers"], released["num_hash_layers"]
    kinds = {(i < hashed, released["compress_ratios"][i]) for i in range(total)}
    warm = bench_config(shape, WARM_LAYERS)
    assert {(i < hashed, warm["compress_ratios"][i]) for i in range(WARM_LAYERS)} == kinds


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_the_warm_engine_is_the_presets_engine_on_a_config_only_model(name, tmp_path):
    preset = _preset(name)
    shape, experts = model_shape(preset)
    k = preset.speculation.num_speculative_tokens
    warm = local_specs(
        [f"vllm-k{k}"], local_setup(name, warm_sets(preset, str(tmp_path)), kv_cache_gib=0)
    )[0]
    served = local_specs([f"vllm-k{k}"], local_setup(name, [], kv_cache_gib=0))[0]

    def args(cmd: list[str]) -> dict[str, str]:
        flags = [i for i, a in enumerate(cmd) if a.startswith("--")]
        return {
            cmd[i]: " ".join(cmd[i + 1 : j])
            for i, j in zip(flags, [*flags[1:], len(cmd)], strict=True)
        }

    got, want = args(warm.command), args(served.command)
    # Everything the preset gives its engine, but where the model is and that it has no weights.
    for flag in set(got) | set(want):
        if flag not in ("--model", "--load-format", "--port"):
            assert got.get(flag) == want.get(flag), flag
    assert got["--model"] == str(tmp_path) and got["--load-format"] == "dummy"
    assert (shape, experts) == (("pro", "fp4") if "pro" in name else ("flash", "fp4"))


def test_the_warm_engines_arguments_parse_with_vllms_own_parser(tmp_path):
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from serving.compat.vllm_cli_args import cli_args

    preset = _preset("h200-flash-bench")
    spec = local_specs(
        ["vllm-k2"],
        local_setup("h200-flash-bench", warm_sets(preset, str(tmp_path)), kv_cache_gib=0),
    )[0]
    parser = cli_args().make_arg_parser(FlexibleArgumentParser())
    parsed = parser.parse_args(spec.command[3:])
    assert parsed.model == str(tmp_path) and parsed.load_format == "dummy"
    assert json.loads(json.dumps(parsed.speculative_config))["num_speculative_tokens"] == 2


def test_the_cache_shapes_are_per_layer_and_per_rank():
    shapes = cache_shapes(_preset("h200-flash-mtp"))
    assert shapes["model"]["hidden_size"] == 4096 and shapes["compress_ratios"] == [0, 4, 128]
    assert shapes["parallel"] == {"tensor": 8, "pipeline": 1, "data": 1, "expert": True}
    assert "num_hidden_layers" not in shapes["model"]  # depth does not pick a kernel
    deeper = cache_shapes(_preset("h200-flash-bench", ["model.bench.layers=6"]))
    assert deeper == cache_shapes(_preset("h200-flash-bench"))


def test_the_sweep_reaches_past_one_steps_token_budget_and_up_to_the_batch_bound():
    plan = plan_for(_preset("h200-flash-bench").engine_kwargs())
    assert max(plan.prompt_words) > 8192 // 2 and max(plan.concurrency) == 128
    assert plan.concurrency[0] == 1


def test_cpu_presets_have_nothing_to_warm():
    with pytest.raises(WarmPlanError, match="compiles no JIT kernels"):
        model_shape(_preset("cpu-tiny"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["warm", "cpu-tiny"], "nothing to warm"),
        (["warm"], "name a preset to warm"),
        (["warm", "h200-flash-bench", "--jobs", "-2"], "--jobs must be >= 0"),
        (["warm", "no-such-preset"], "no-such-preset"),
        (["warm", "--import", "nothing.tar.gz"], "not a JIT cache archive name"),
    ],
)
def test_bad_input_is_named_in_one_line(argv, message, tmp_path, capsys):
    assert main([*argv, "--cache", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_check_says_an_empty_cache_was_not_warmed(tmp_path, capsys):
    assert main(["warm", "--check", "--cache", str(tmp_path)]) == 1
    assert "has no manifest" in capsys.readouterr().out


def test_the_warm_command_parses():
    args = build_parser().parse_args(["warm", "h200-flash-bench", "--jobs", "16", "--export", "/o"])
    assert (args.preset, args.jobs, args.export) == ("h200-flash-bench", 16, "/o")
