"""Shared fixtures: the golden checkpoint, written once per test session."""

import os
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


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """Reference data (CRDs, Grafana schema): ../shared, or $DSV4_SHARED_DIR."""
    path = Path(os.environ.get("DSV4_SHARED_DIR", ROOT.parent / "shared"))
    assert (path / "crds").is_dir(), f"reference data not found at {path}; set DSV4_SHARED_DIR"
    return path
