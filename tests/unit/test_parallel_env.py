"""How `make test` gives each xdist worker's engines a core (tests/support/parallel.py)."""

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
