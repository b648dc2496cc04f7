"""Presets as data: every shipped preset validates and renders; bad input names its field."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from serving.compat.preset_vllm_check import OTHER_ENV, literal_values
from serving.config.build_args import BuildArgs, resolve
from serving.config.preset import PresetError, list_presets, load_preset, parse_set
from serving.config.serve_config import IMPORT_PATH, serve_config
from serving.config.vllm_args import to_cli_args
from tests.support.paths import ROOT

PRESETS = [
    "cpu-tiny",
    "h200-flash-mtp",
    "h200-pro-mtp",
    "b200-pro-mtp",
    "gb300-pro-mtp",
    "mi355x-pro-mtp",
    "mi300x-pro-mtp",
    "b200-pro-dspark",
]


def test_the_required_presets_ship():
    assert set(PRESETS) <= set(list_presets())


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_validates_and_renders(preset: str):
    resolved = load_preset(preset)
    assert resolved.sources, "each preset cites where its values come from"
    kwargs = resolved.engine_kwargs()
    assert kwargs["tensor_parallel_size"] * kwargs["pipeline_parallel_size"] * kwargs.get(
        "data_parallel_size", 1
    ) == (resolved.accelerator.per_replica if resolved.accelerator.kind != "cpu" else 1)
    assert kwargs["speculative_config"]["method"] in {"mtp", "dspark"}
    config = serve_config(BuildArgs(preset=preset))
    (app,) = config["applications"]
    assert app["import_path"] == IMPORT_PATH and app["args"]["preset"] == preset
    assert yaml.safe_load(yaml.safe_dump(config)) == config


def test_hardware_specific_values_follow_the_recipes():
    # vLLM recipes (models/deepseek-ai/DeepSeek-V4-*.yaml) and NVIDIA Dynamo's V4-Pro recipe,
    # as re-checked in each preset's header.
    assert load_preset("h200-flash-mtp").speculation.num_speculative_tokens == 1
    pro_h200 = load_preset("h200-pro-mtp")
    assert pro_h200.accelerator.per_replica == 8 and pro_h200.parallelism.nodes == 1
    assert pro_h200.speculation.num_speculative_tokens == 2
    assert pro_h200.engine_kwargs()["enable_expert_parallel"] is True
    assert load_preset("b200-pro-mtp").speculation.num_speculative_tokens == 2
    assert load_preset("mi355x-pro-mtp").speculation.num_speculative_tokens == 2
    assert load_preset("mi355x-pro-mtp").env["VLLM_ROCM_USE_AITER"] == "1"
    dspark = load_preset("b200-pro-dspark")
    assert dspark.model.source == "deepseek-ai/DeepSeek-V4-Pro-0813"
    assert dspark.engine_kwargs()["speculative_config"] == {
        "method": "dspark",
        "num_speculative_tokens": 7,
        "draft_sample_method": "probabilistic",
    }
    assert not any("Flash" in source for source in dspark.sources)
    for preset in ("b200-pro-mtp", "b200-pro-dspark", "gb300-pro-mtp"):  # Blackwell
        resolved = load_preset(preset)
        args = resolved.engine_kwargs()
        assert args["moe_backend"] == "deep_gemm_mega_moe", preset
        assert args["attention_config"] == {"indexer_kv_dtype": "mxfp4"}, preset
        assert "VLLM_USE_FLASHINFER_MOE_FP4" not in resolved.env, preset
    for preset in PRESETS[1:]:
        args = load_preset(preset).engine_kwargs()
        assert args["kv_cache_dtype"] == "fp8" and args["block_size"] == 256
        assert args["tokenizer_mode"] == "deepseek_v4" and args["reasoning_parser"] == "deepseek_v4"


def test_unvalidated_presets_say_so_in_the_preset_and_the_readme():
    readme = (ROOT / "README.md").read_text()
    unvalidated = [p for p in list_presets() if load_preset(p).unvalidated]
    assert unvalidated == ["mi300x-pro-mtp"]  # the recipes mark MI300X unsupported
    for preset in unvalidated:
        resolved = load_preset(preset)
        assert resolved.description.startswith("UNVALIDATED")
        assert f"`{preset}` is UNVALIDATED" in readme


def test_tensor_parallel_groups_fit_whole_nodes():
    with pytest.raises(PresetError, match="each node must hold whole tensor-parallel groups"):
        load_preset(
            "mi300x-pro-mtp",
            [parse_set("parallelism.tensor=16"), parse_set("parallelism.pipeline=1")],
        )


BAD_OVERRIDES = [
    ("deployment.replicaz=2", "deployment.replicaz: Extra inputs are not permitted"),
    ("deployment.replicas=-1", "deployment.replicas: Input should be greater than or equal to 1"),
    ("deployment.replicas=many", "deployment.replicas: Input should be a valid integer"),
    ("speculation.method=eagle", "speculation.method: Input should be 'mtp', 'dspark' or 'none'"),
    ("speculation.num_speculative_tokens=0", "speculation: Value error, method 'mtp' needs"),
    ("accelerator.type=H200", "accelerator: Value error, a cpu accelerator has no type"),
    ("engine_args.speculative_config={}", "engine_args must not set ['speculative_config']"),
    ("monitoring.acceptance_baseline=1.5", "monitoring.acceptance_baseline: Input should be less"),
    ("model.id=", "model.id: String should have at least 1 character"),
]


@pytest.mark.parametrize("assignment,message", BAD_OVERRIDES)
def test_bad_fields_are_named(assignment: str, message: str):
    with pytest.raises(PresetError) as err:
        load_preset("cpu-tiny", [parse_set(assignment)])
    assert message in str(err.value)


def test_gpu_count_must_match_parallelism():
    with pytest.raises(
        PresetError, match="tensor\\*pipeline\\*data = 4 but accelerator.per_replica = 8"
    ):
        load_preset("b200-pro-mtp", [parse_set("parallelism.tensor=4")])
    with pytest.raises(PresetError, match="do not fit on 1 node"):
        load_preset(
            "b200-pro-mtp",
            [parse_set("accelerator.per_replica=16"), parse_set("parallelism.tensor=16")],
        )
    with pytest.raises(PresetError, match="'MI300X' is not a nvidia accelerator"):
        load_preset("b200-pro-mtp", [parse_set("accelerator.type=MI300X")])
    with pytest.raises(PresetError, match="min_replicas must not exceed max_replicas"):
        load_preset("h200-flash-mtp", [parse_set("deployment.autoscaling.min_replicas=9")])


def test_a_guard_that_could_never_install_is_refused():
    # Data-parallel ranks would each pick their own k: the guard does not install there
    # (model_overrides/patches/spec_guard.py), so its alert could never fire.
    sets = ["parallelism.tensor=4", "parallelism.data=2", "speculation.guard.mode=adaptive"]
    with pytest.raises(PresetError, match="guard mode 'adaptive' with parallelism.data=2"):
        load_preset("b200-pro-mtp", [parse_set(s) for s in sets])
    assert load_preset("b200-pro-mtp", [parse_set(s) for s in sets[:2]]).parallelism.data == 2


def test_overrides_layer_on_top(tmp_path: Path):
    values = tmp_path / "values.yaml"
    values.write_text("deployment: {max_ongoing_requests: 7}\nengine_args: {max_model_len: 1024}\n")
    resolved = load_preset("cpu-tiny", [parse_set("deployment.replicas=3")], [values])
    assert resolved.deployment.replicas == 3 and resolved.deployment.max_ongoing_requests == 7
    assert resolved.engine_kwargs()["max_model_len"] == 1024
    assert resolved.engine_kwargs()["block_size"] == 256  # untouched keys survive the merge


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: parse_set("replicas"), "expected key.path=value"),
        (lambda: parse_set("a..b=1"), "empty key"),
        (lambda: parse_set("a=[1"), "is not valid YAML"),
        (lambda: load_preset("nope"), "unknown preset 'nope'; known: b200-pro-dspark"),
        (lambda: load_preset("cpu-tiny", override_files=["/nonexistent.yaml"]), "No such file"),
        (
            lambda: resolve({"preset": "cpu-tiny", "sett": []}),
            "sett: Extra inputs are not permitted",
        ),
    ],
)
def test_bad_input_gets_a_clear_error(call, message: str):
    with pytest.raises(PresetError, match=message.replace("[", "\\[")):
        call()


def test_a_preset_file_that_is_not_a_mapping_is_rejected(tmp_path: Path):
    bad = tmp_path / "list.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(PresetError, match="must be a mapping, got list"):
        load_preset(str(bad))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "serving.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_check_prints_the_resolved_engine_arguments():
    proc = _cli("check", "mi355x-pro-mtp", "--set", "engine_args.max_model_len=65536")
    assert proc.returncode == 0, proc.stderr
    assert '"max_model_len": 65536' in proc.stdout and '"tensor_parallel_size": 8' in proc.stdout
    assert '"accelerator_type": "AMD-Instinct-MI355X-OAM"' in proc.stdout


def test_cli_errors_exit_2_naming_the_field():
    proc = _cli("check", "cpu-tiny", "--set", "deployment.replicas=0")
    assert proc.returncode == 2
    assert "deployment.replicas: Input should be greater than or equal to 1" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_render_serve_config_is_a_serve_config_for_the_builder():
    proc = _cli("render-serve-config", "h200-flash-mtp", "--set", "deployment.replicas=2")
    assert proc.returncode == 0, proc.stderr
    config = yaml.safe_load(proc.stdout)
    assert config["applications"][0]["args"] == {
        "preset": "h200-flash-mtp",
        "set": ["deployment.replicas=2"],
    }


# --- finding 9: every preset against the installed vLLM 0.32 and Ray Serve LLM ---------

GPU_PRESETS = PRESETS[1:]


@pytest.fixture(scope="module")
def vllm_parser():
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from serving.compat.vllm_cli_args import cli_args

    return cli_args().make_arg_parser(FlexibleArgumentParser())


@pytest.mark.parametrize("preset", list_presets())
def test_every_engine_argument_parses_with_vllms_own_parser(preset: str, vllm_parser):
    from ray.serve.llm import LLMConfig

    from serving.config.llm_config import llm_config

    resolved = load_preset(preset)
    # Ray Serve LLM splits engine_kwargs into vLLM's frontend and engine arguments and
    # rejects anything else ("Unknown engine argument").
    config = llm_config(resolved, "/models/m")
    engine = LLMConfig(**config).get_engine_config()
    kwargs = {**engine.frontend_kwargs, **engine.engine_kwargs}
    assert set(kwargs) == set(config["engine_kwargs"])
    try:
        parsed = vllm_parser.parse_args(["--model", "/models/m", *to_cli_args(kwargs)])
    except SystemExit:
        pytest.fail(f"vLLM's parser rejects {preset}'s arguments: {kwargs}")
    for key, value in kwargs.items():
        got = getattr(parsed, key)
        if key == "attention_config":
            assert {k: getattr(got, k) for k in value} == value
        elif key == "compilation_config":
            for k, v in value.items():
                got_v = getattr(got, k)
                assert (
                    str(got_v.name if hasattr(got_v, "name") else got_v) == str(v) or got_v == v
                ), (k, got_v, v)
        elif key == "reasoning_config":
            assert {k: getattr(got, k) for k in value} == value
        else:
            assert got == value, (key, got, value)


def _local_kind(preset) -> str:
    """The bench's local target that runs the preset as it is (its own k and guard)."""
    mode = preset.speculation.guard.mode
    if mode == "batch":
        return "vllm-batch"
    if mode == "adaptive":
        return "vllm-guard"
    return f"vllm-k{preset.speculation.num_speculative_tokens}"


@pytest.mark.parametrize("preset", list_presets())
def test_every_consumer_starts_vllm_with_the_same_arguments(preset: str, vllm_parser, monkeypatch):
    """The Serve app (Ray Serve LLM's split of the engine kwargs), the preset check, the
    local launcher and every bench arm at the preset's k, forward_compare and, for the
    golden presets, the golden engine the tests start all go through
    serving/config/vllm_args.py and Speculation.vllm_config: parsed by vLLM's own parser
    they must agree on every argument but where the model is and the port."""
    from serving.bench import forward_compare as fc
    from serving.bench.targets import local_setup, local_specs

    resolved = load_preset(preset)
    k = resolved.speculation.num_speculative_tokens
    launcher = local_specs([_local_kind(resolved)], local_setup(preset, [], kv_cache_gib=0))[0]
    argvs = {
        "serve app": _serve_app_argv(resolved),
        "preset check": ["--model", "/models/m", *to_cli_args(resolved.engine_kwargs())],
        "launcher": launcher.command[3:],
    }
    if resolved.model.bench:  # vLLM's `bench forward` takes the same engine arguments
        setup = fc.bench_setup(resolved.model.source, resolved.model.bench.layers, preset, (), 0)
        cmd = fc.forward_runs(setup, "/tmp/fwd", ks=[k], concurrency=[1], routings=["real"])[
            0
        ].command
        engine = cmd[1 + len(fc.VLLM_BENCH_FORWARD) : cmd.index("--case")]
        argvs["forward_compare"] = engine
    if resolved.model.golden:  # the golden engine reads its preset from the environment
        from serving.golden.golden_engine import PRESET_ENV, golden_engine_kwargs, mtp_config

        monkeypatch.setenv(PRESET_ENV, preset)
        golden = golden_engine_kwargs("/models/m", speculative_config=mtp_config(k))
        argvs["golden engine"] = ["--model", "/models/m", *to_cli_args(golden)]
    _assert_same_vllm_arguments(preset, argvs, vllm_parser)


def _serve_app_argv(resolved) -> list[str]:
    """What the Serve app gives vLLM: Ray Serve LLM's split of the engine kwargs."""
    from ray.serve.llm import LLMConfig

    from serving.config.llm_config import llm_config

    engine = LLMConfig(**llm_config(resolved, "/models/m")).get_engine_config()
    return [
        "--model",
        "/models/m",
        *to_cli_args({**engine.frontend_kwargs, **engine.engine_kwargs}),
    ]


def _assert_same_vllm_arguments(label: str, argvs: dict[str, list[str]], vllm_parser) -> None:
    """Parsed by vLLM's own parser, every argv agrees with the Serve app's on every argument
    but where the model is and the port."""
    ignore = {"model", "served_model_name", "host", "port"}
    parsed = {name: vars(vllm_parser.parse_args(argv)) for name, argv in argvs.items()}
    first = parsed.pop("serve app")
    for name, got in parsed.items():
        differ = {
            key: (first.get(key), got.get(key))
            for key in set(first) | set(got)
            if key not in ignore and str(first.get(key)) != str(got.get(key))
        }
        assert not differ, f"{label}: {name} differs from the Serve app: {differ}"


def _arms() -> list[tuple[str, str]]:
    """Every preset with every static-k bench arm, and on a bench model (synthetic
    acceptance) every acceptance profile's arm."""
    from serving.bench.acceptance_profiles import PROFILES

    arms = []
    for preset in list_presets():
        arms += [(preset, f"vllm-k{k}") for k in range(4)]
        if load_preset(preset).speculation.synthetic_acceptance:
            arms += [(preset, f"vllm-k{k}~{name}") for k in (1, 2, 3) for name in PROFILES]
    return arms


def _preset_at(preset: str, arm: str):
    """The preset as the arm means to run it: its speculation at the arm's k, with the
    profile's rates in place of its synthetic acceptance."""
    from serving.bench.targets import kind_profile

    k = int(arm.partition("~")[0].removeprefix("vllm-k"))
    speculation: dict = {"num_speculative_tokens": k}
    if k == 0:  # no speculation: nothing that only a drafter reads
        speculation.update(
            method="none",
            guard={"mode": "off"},
            draft_sample_method=None,
            synthetic_acceptance=None,
        )
    if profile := kind_profile(arm):
        speculation["synthetic_acceptance"] = {"rates": list(profile.rates_for(k))}
    return load_preset(preset, [{"speculation": speculation}])


@pytest.mark.parametrize(("preset", "arm"), [pytest.param(*a, id=" ".join(a)) for a in _arms()])
def test_every_bench_arm_runs_the_preset_at_its_k(preset: str, arm: str, vllm_parser):
    """A bench arm measures the preset at the arm's k: the launcher's vLLM command equals
    the Serve app's for the preset set to that k (and the profile's rates)."""
    from serving.bench.targets import local_setup, local_specs

    setup = local_setup(preset, [], kv_cache_gib=0)
    resolved = _preset_at(preset, arm)
    launcher = local_specs([arm], setup)[0]
    argvs = {"serve app": _serve_app_argv(resolved), "launcher": launcher.command[3:]}
    _assert_same_vllm_arguments(f"{preset} {arm}", argvs, vllm_parser)


@pytest.mark.parametrize("preset", list_presets())
def test_every_env_var_is_one_its_reader_knows(preset: str):
    import vllm.envs

    for name in load_preset(preset).env:
        if name.startswith("VLLM_"):
            # vLLM 0.32 only logs "Unknown vLLM environment variable" for the others.
            assert name in vllm.envs.environment_variables, f"{preset}: {name}"
        else:
            assert name in OTHER_ENV, f"{preset}: {name} needs its source in OTHER_ENV"


@pytest.mark.parametrize("preset", list_presets())
def test_every_speculative_method_is_one_vllm_accepts(preset: str):
    from vllm.config.speculative import DraftSampleMethod, SpeculativeMethod

    spec = load_preset(preset).engine_kwargs()["speculative_config"]
    methods = literal_values(SpeculativeMethod)
    assert {"mtp", "dspark"} <= methods
    assert spec["method"] in methods
    if "draft_sample_method" in spec:
        assert spec["draft_sample_method"] in literal_values(DraftSampleMethod)


def test_the_blackwell_fp4_indexer_name_is_vllm_032s():
    # The recipes' --attention_config.use_fp4_indexer_cache=True predates vLLM 0.32, which
    # rejects it; indexer_kv_dtype=mxfp4 is the same switch there.
    from vllm.config.attention import AttentionConfig

    with pytest.raises(Exception, match="use_fp4_indexer_cache"):
        AttentionConfig(use_fp4_indexer_cache=True)
    assert AttentionConfig(indexer_kv_dtype="mxfp4").indexer_kv_dtype == "mxfp4"


def test_replicas_of_a_small_model_can_share_a_gpu(monkeypatch):
    from ray.serve.llm import LLMConfig
    from vllm.v1.executor.ray_executor_v2 import RayExecutorV2

    from serving.config.llm_config import llm_config

    resolved = load_preset("gpu-golden", [parse_set("accelerator.gpu_share=0.45")])
    config = llm_config(resolved, "/models/m")
    engine = LLMConfig(**config).get_engine_config()
    assert [b["GPU"] for b in engine.placement_bundles] == [0.45]
    # The replica's runtime env (Ray's LLMServer.get_deployment_options merges it into
    # ray_actor_options) tells vLLM's Ray executor to ask no more than the bundle holds:
    # the H200 run without it failed "resource request {'GPU': 1.0} cannot fit".
    for name, value in config["runtime_env"]["env_vars"].items():
        monkeypatch.setenv(name, value)
    kwargs = RayExecutorV2._get_actor_resource_kwargs()
    # On a GPU {"num_gpus": share}; here vLLM's CPU platform names its own device key.
    asked = kwargs["num_gpus"] or next(iter(kwargs["resources"].values()))
    assert asked == 0.45, kwargs
    whole = load_preset("gpu-golden")
    whole_engine = LLMConfig(**llm_config(whole, "/models/m")).get_engine_config()
    assert [b["GPU"] for b in whole_engine.placement_bundles] == [1.0]
    assert "VLLM_RAY_PER_WORKER_GPUS" not in whole.engine_env()
    for preset in ("cpu-tiny", "b200-pro-mtp"):
        with pytest.raises(PresetError, match="gpu_share below 1 needs a GPU accelerator"):
            load_preset(preset, [parse_set("accelerator.gpu_share=0.5")])
    with pytest.raises(PresetError, match="accelerator.gpu_share: Input should be less than or"):
        load_preset("gpu-golden", [parse_set("accelerator.gpu_share=2")])


def test_speculation_info_names_the_draft_sampling_the_engine_will_use():
    from serving.config.preset import Speculation

    assert Speculation(method="none").info_labels() == {
        "method": "none",
        "num_speculative_tokens": "0",
        "draft_sample_method": "none",
    }
    mtp = Speculation(method="mtp", num_speculative_tokens=2)
    assert mtp.info_labels()["draft_sample_method"] == "greedy"  # vLLM's default
    chosen = Speculation(
        method="mtp", num_speculative_tokens=2, draft_sample_method="probabilistic"
    )
    assert chosen.info_labels()["draft_sample_method"] == "probabilistic"
    assert chosen.vllm_config()["draft_sample_method"] == "probabilistic"
    bench = load_preset("h200-flash-bench").speculation
    assert bench.info_labels()["draft_sample_method"] == "synthetic"


@pytest.mark.parametrize("preset", [p for p in list_presets() if "bench" not in p])
def test_the_documented_sets_turn_speculation_off_on_every_preset(preset: str):
    """docs/speculation.md's two --set flags, as a user passes them: no drafter is left,
    whatever draft sampling the preset chose (bench presets' made-up acceptance needs a
    drafter, and their k = 0 arm is the bench's own)."""
    sets = ["speculation.method=none", "speculation.num_speculative_tokens=0"]
    off = load_preset(preset, [parse_set(s) for s in sets])
    assert off.speculation.vllm_config() is None
    assert off.speculation.info_labels()["draft_sample_method"] == "none"
