"""The command line as a user meets it: operator commands first, a deployment's config
only for a preset named, one-line errors with exit code 2."""

import pytest

from serving.cli import build_parser, main


def test_help_lists_operator_commands_before_developer_ones(capsys: pytest.CaptureFixture):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    order = [out.index(f"    {name}") for name in ("up", "render-serve-config", "doctor")]
    order += [out.index(f"    {name}") for name in ("golden-model", "generate")]
    assert order == sorted(order)
    assert "Exit codes: 0" in " ".join(out.split())


def test_rendering_a_deployment_needs_a_preset(capsys: pytest.CaptureFixture):
    with pytest.raises(SystemExit) as done:
        main(["render-serve-config"])
    assert done.value.code == 2
    assert "the following arguments are required: preset" in capsys.readouterr().err
    # `up` and `check` keep the local default.
    assert build_parser().parse_args(["check"]).preset == "cpu-tiny"


def test_a_bad_preset_is_one_line_and_exit_2(capsys: pytest.CaptureFixture):
    assert main(["check", "no-such-preset"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dsv4-serve check: unknown preset 'no-such-preset'")
    assert len(err.splitlines()) == 1
