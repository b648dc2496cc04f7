"""Shared fixtures: the golden checkpoint, written once per test session."""

from pathlib import Path

import pytest

from serving.golden import GoldenDesign, write_golden_model

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def golden_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_golden_model(tmp_path_factory.mktemp("golden"), GoldenDesign())


@pytest.fixture(scope="session")
def golden_design() -> GoldenDesign:
    return GoldenDesign()
