"""The suite names each slow step as it ends (tests/support/slow_steps.py)."""

import pytest

pytest_plugins = ["pytester"]

CONFTEST = """
from tests.support.slow_steps import SlowSteps

def pytest_configure(config):
    config.pluginmanager.register(SlowSteps(config, slow_s=0.2), "slow")
"""
TESTS = """
import time

def test_slow():
    time.sleep(0.3)

def test_quick():
    pass
"""


def test_a_slow_step_is_named_when_it_ends_and_a_quick_one_is_not(pytester: pytest.Pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_steps=TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    lines = [x for x in result.outlines if "[slow step]" in x]
    assert len(lines) == 1 and lines[0].endswith(" call test_steps.py::test_slow"), lines
    assert lines[0].startswith("[slow step]"), lines  # on a line of its own
