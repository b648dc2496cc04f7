"""The preset check, run as the version matrix runs it: every shipped preset against the
installed vLLM's parser, environment table and speculative methods, and a broken preset
named for each thing vLLM would refuse."""

import json

import pytest
import yaml
from vllm.utils.argparse_utils import FlexibleArgumentParser

from serving.compat import preset_vllm_check
from serving.compat.vllm_cli_args import cli_args
from serving.config.preset import list_presets, raw_preset


@pytest.fixture(scope="module")
def parser():
    return cli_args().make_arg_parser(FlexibleArgumentParser())


def test_every_shipped_preset_passes(capsys):
    preset_vllm_check.main()
    (line,) = capsys.readouterr().out.splitlines()
    tag, _, body = line.partition(" ")
    found = json.loads(body)
    assert tag == "PRESETS" and set(found) == set(list_presets())
    assert found == {name: [] for name in list_presets()}


def test_a_preset_vllm_would_refuse_is_named_for_each_problem(tmp_path, parser):
    data = raw_preset("cpu-tiny")
    data["engine_args"]["no_such_engine_argument"] = 1
    data["env"] = {**data.get("env", {}), "VLLM_NO_SUCH_SWITCH": "1", "SOME_TOOL_FLAG": "1"}
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data))
    found = preset_vllm_check.problems(str(path), parser)
    assert any(
        p.startswith("vLLM's parser rejects") and "--no-such-engine-argument" in p for p in found
    )
    assert "VLLM_NO_SUCH_SWITCH is not in vllm.envs" in found
    assert "SOME_TOOL_FLAG: no reader named in OTHER_ENV" in found


def test_literal_values_reads_nested_literals():
    from typing import Literal

    assert preset_vllm_check.literal_values(Literal["a", "b"] | Literal["c"] | None) == {
        "a",
        "b",
        "c",
    }
    assert preset_vllm_check.literal_values(int) == set()
