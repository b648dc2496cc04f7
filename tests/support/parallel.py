"""How `make test` shares the suite between pytest-xdist workers.

- Everything that starts Ray, or HAProxy (whose processes the Ray tests account for), is
  one work unit that one worker runs module after module, as a plain pytest run would:
  Ray's GCS and Serve's HAProxy stats port exist once per host. It goes first: it is
  about half of the suite's time.
- Every other test module is a unit of its own, so its module-scoped engine, app or image
  is set up once, on one worker.
- vLLM's CPU backend binds an engine's OpenMP threads to core 0 unless told otherwise:
  each worker binds its engines (and the Ray app's, whose processes inherit the
  environment) to a core of its own, so two engines never share one.
- vLLM binds only the engines its multiprocessing executor starts; an in-process engine
  (the runners' ``VLLM_ENABLE_V1_MULTIPROCESSING=0``) would start one OpenMP thread per
  core and spin at every barrier while the other worker holds the other core. Each
  worker's processes run one OpenMP thread: with the other core busy, a prefix-cache
  runner took 109 s and 95 CPU-s that way, 139 s and 166 CPU-s with two threads.

The units come from our own scheduler (xdist's ``pytest_xdist_make_scheduler`` hook), not
from ``xdist_group`` marks: xdist 3.8 applies those by rewriting ``item._nodeid``, which
pytest 9.2's nodes no longer read (``Node.nodeid`` is built from ``_id``).
"""

import os

import pytest

ONE_AT_A_TIME = "ray-and-haproxy"
ONE_AT_A_TIME_PATHS = (
    "tests/serving/local/test_console_and_stop.py",
    "tests/serving/disagg/test_disaggregation_cpu.py",
    "tests/serving/gateway/test_key_limits.py",
    "tests/serving/routing/test_prefix_routing.py",
    "tests/serving/test_reliability.py",
    "tests/serving/test_serving_app.py",
    "tests/serving/monitoring/test_monitoring_live.py",
    "tests/serving/local/test_haproxy_tracking.py",
    "tests/serving/local/test_start_failure.py",
)
BIND = "VLLM_CPU_OMP_THREADS_BIND"


def worker_index() -> int | None:
    """0, 1, ... inside an xdist worker ("gw0", "gw1", ...); None in a plain run."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else None


def bind_engines_to_this_workers_core() -> None:
    index, cores = worker_index(), sorted(os.sched_getaffinity(0))
    if index is not None and len(cores) > 1 and BIND not in os.environ:
        os.environ[BIND] = str(cores[index % len(cores)])
        os.environ.setdefault("OMP_NUM_THREADS", "1")


def unit_of(nodeid: str) -> str:
    """The work unit of a test: its module, or the one-at-a-time unit."""
    path = nodeid.split("::", 1)[0]
    return ONE_AT_A_TIME if path in ONE_AT_A_TIME_PATHS else path


def one_at_a_time_first(items: list[pytest.Item]) -> None:
    """Collection order with the one-at-a-time unit first (xdist queues units in the
    order their first test was collected; run it with ``--no-loadscope-reorder``)."""
    items.sort(key=lambda item: unit_of(item.nodeid) != ONE_AT_A_TIME)


def one_ray_at_a_time_scheduler(config: pytest.Config, log):
    """xdist's module-at-a-time scheduling with the Ray and HAProxy modules as one unit.
    (xdist is imported here: the GPU suite's interpreter may not have it.)"""
    from xdist.scheduler import LoadScopeScheduling

    class OneRayAtATime(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return OneRayAtATime(config, log)
