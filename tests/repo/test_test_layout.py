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
