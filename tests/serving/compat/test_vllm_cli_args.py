"""vLLM's server arguments are found where the installed vLLM keeps them."""

import importlib

import pytest
from vllm.utils.argparse_utils import FlexibleArgumentParser

from serving.compat import vllm_cli_args


def test_the_installed_vllms_parser_is_found_and_parses_a_serve_line():
    module = vllm_cli_args.cli_args()
    assert module.__name__ in vllm_cli_args.MODULES
    args = module.make_arg_parser(FlexibleArgumentParser()).parse_args(
        ["--model", "/models/m", "--speculative-config", '{"method": "mtp"}']
    )
    assert args.model == "/models/m" and args.speculative_config == {"method": "mtp"}


def test_a_vllm_without_either_module_is_said_plainly(monkeypatch):
    monkeypatch.setattr(vllm_cli_args, "MODULES", ("vllm.no_such_module_a", "vllm.no_such_b"))
    with pytest.raises(ModuleNotFoundError, match="none of vllm.no_such_module_a"):
        vllm_cli_args.cli_args()


def test_a_module_that_exists_but_fails_to_import_is_not_hidden(monkeypatch):
    real = importlib.import_module

    def failing(name, *args):
        if name == "vllm.entrypoints.common.cli_args":
            raise ModuleNotFoundError("No module named 'fastapi_x'", name="fastapi_x")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", failing)
    with pytest.raises(ModuleNotFoundError, match="fastapi_x"):
        vllm_cli_args.cli_args()
