"""Shared fixtures: the golden checkpoint, written once per test session."""

import os
from pathlib import Path

import pytest

from model_overrides.kernels import kernel_library
from serving.golden import GoldenDesign, write_golden_model
from tests.support import slow_steps
from tests.support.parallel import (
    bind_engines_to_this_workers_core,
    one_at_a_time_first,
    one_ray_at_a_time_scheduler,
)
from tests.support.paths import ROOT

# DSV4_CPU_KERNEL_LIBRARY=avx512|avx2 runs the whole suite as on a CPU with that ISA:
# this process too, before any test module makes vLLM load its kernels.
kernel_library.force_if_requested()
bind_engines_to_this_workers_core()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """tests/gpu needs a CUDA GPU: only ``-m gpu`` (make test-gpu) collects it."""
    if collection_path.name == "gpu" and collection_path.parent.name == "tests":
        return config.getoption("markexpr", "").strip() != "gpu" or None
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    return one_ray_at_a_time_scheduler(config, log)


# What a test needs (pyproject.toml's markers); any of them makes it slow, the tier
# `make test-fast` leaves out.
SLOW_NEEDS = ("engine", "ray", "image", "matrix")


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(need) for need in SLOW_NEEDS):
            item.add_marker(pytest.mark.slow)
    if hasattr(config, "workerinput"):  # an xdist worker: what it collects is the queue
        one_at_a_time_first(items)


def pytest_configure(config: pytest.Config) -> None:
    slow_steps.register(config)


@pytest.fixture(scope="session")
def golden_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_golden_model(tmp_path_factory.mktemp("golden"), GoldenDesign())


@pytest.fixture(scope="session")
def golden_design() -> GoldenDesign:
    return GoldenDesign()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """Reference schemas (CRDs, Grafana's dashboard schema): the vendored copy in
    tests/support/reference, or $DSV4_SHARED_DIR with the same layout."""
    path = Path(os.environ.get("DSV4_SHARED_DIR", ROOT / "tests" / "support" / "reference"))
    assert (path / "crds").is_dir(), f"reference data not found at {path}; set DSV4_SHARED_DIR"
    return path
