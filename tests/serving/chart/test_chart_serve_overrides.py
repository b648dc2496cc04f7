"""serve.overrides: a map merged into the preset, as the app's builder resolves it from the
rendered serveConfigV2 (serving.config.build_args.resolve, what serving.app:build runs), with
serve.set applied after it and the chart's own keys refused by name."""

from pathlib import Path

import pytest

from serving.config.build_args import resolve
from tests.support.chart_render import render, serve_config


def _app_args(tmp_path: Path, values: dict) -> dict:
    (app,) = serve_config(render(tmp_path, values))["applications"]
    return app["args"]


def test_overrides_reach_the_preset_and_set_wins(tmp_path: Path):
    values = {
        "serve": {
            "overrides": {
                "speculation": {"num_speculative_tokens": 2},
                "engine_args": {"max_num_seqs": 64, "max_model_len": 131072},
            },
            "set": ["engine_args.max_model_len=65536"],
        }
    }
    args = _app_args(tmp_path, values)
    _, preset = resolve(args)
    assert preset.speculation.num_speculative_tokens == 2
    assert preset.engine_args["max_num_seqs"] == 64
    assert preset.engine_args["max_model_len"] == 65536  # serve.set after the map
    assert preset.engine_args["kv_cache_dtype"] == "fp8"  # the rest of the preset stays
    assert "overrides" not in _app_args(tmp_path, {})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"deployment": {"replicas": 3}}, "serve.overrides.deployment.replicas: the chart sets"),
        ({"model": {"source": "/x"}}, "serve.overrides.model.source: the chart sets"),
        ({"parallelism": {"tensor": 4}}, "serve.overrides.parallelism: the chart sets"),
        (
            {"disaggregation": {"connector": "nixl"}},
            "serve.overrides.disaggregation: the chart sets disaggregation itself; use the "
            "chart's disaggregation values",
        ),
    ],
)
def test_keys_the_chart_owns_are_refused(tmp_path: Path, overrides: dict, message: str):
    assert message in render(tmp_path, {"serve": {"overrides": overrides}}, expect_ok=False)


def test_a_bad_override_is_named_by_the_builder(tmp_path: Path):
    args = _app_args(tmp_path, {"serve": {"overrides": {"speculation": {"methd": "mtp"}}}})
    with pytest.raises(ValueError, match="speculation.methd: Extra inputs are not permitted"):
        resolve(args)
