"""How `make test` gives each xdist worker's engines a core (tests/support/parallel.py)."""

import ast
import os

import pytest

from tests.support.parallel import BIND, bind_engines_to_this_workers_core


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: nothing to share out")
def test_a_worker_binds_its_engines_to_its_own_core_with_one_openmp_thread(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.delenv(BIND, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    bind_engines_to_this_workers_core()
    assert os.environ[BIND] == str(sorted(os.sched_getaffinity(0))[1])
    assert os.environ["OMP_NUM_THREADS"] == "1"


def test_a_plain_run_leaves_the_engines_alone(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv(BIND, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    bind_engines_to_this_workers_core()
    assert BIND not in os.environ and "OMP_NUM_THREADS" not in os.environ


def test_every_module_marked_ray_runs_in_the_one_at_a_time_unit():
    """A module that starts Ray (the `ray` marker) outside the unit would start a second
    Ray beside the unit's on the other worker; a path in the unit that is gone would
    leave a moved module out of it."""
    from tests.support.parallel import ONE_AT_A_TIME_PATHS
    from tests.support.paths import ROOT

    def marks_ray(path) -> bool:
        return any(
            isinstance(node, ast.Attribute)
            and node.attr == "ray"
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "mark"
            for node in ast.walk(ast.parse(path.read_text()))
        )

    tests = (ROOT / "tests").rglob("test_*.py")
    marked = {str(path.relative_to(ROOT)) for path in tests if marks_ray(path)}
    assert marked and marked <= set(ONE_AT_A_TIME_PATHS), marked - set(ONE_AT_A_TIME_PATHS)
    assert all((ROOT / p).is_file() for p in ONE_AT_A_TIME_PATHS)
