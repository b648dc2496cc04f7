"""tests/ is laid out like the code: each package of serving/ and model_overrides/ has its
tests in the same path under tests/, where a newcomer changing it looks for them."""

from pathlib import Path

import pytest

from tests.support.paths import ROOT

PACKAGES = sorted(
    path.parent.relative_to(ROOT)
    for top in ("serving", "model_overrides")
    for path in (ROOT / top).glob("*/__init__.py")
)


def test_the_packages_are_found():
    assert Path("serving/warm") in PACKAGES and Path("model_overrides/jit_pool") in PACKAGES


@pytest.mark.parametrize("package", PACKAGES, ids=str)
def test_each_package_has_its_tests_under_the_same_path(package: Path):
    tests = ROOT / "tests" / package
    assert list(tests.glob("test_*.py")), f"{package}'s tests belong in tests/{package}/"


TEST_FOLDERS = sorted(
    path.parent.relative_to(ROOT / "tests")
    for top in ("serving", "model_overrides")
    for path in (ROOT / "tests" / top).glob("*/test_*.py")
)


@pytest.mark.parametrize("folder", sorted(set(TEST_FOLDERS)), ids=str)
def test_each_test_folder_names_a_package(folder: Path):
    """The other way round: a test folder under tests/serving or tests/model_overrides is
    named for the package it tests, so a folder whose package moved or went is noticed."""
    assert (ROOT / folder / "__init__.py").is_file(), f"tests/{folder} tests no package {folder}/"
