"""How `make test` shares the suite between pytest-xdist workers (``--dist loadgroup``).

- Everything that starts Ray, or HAProxy (whose processes the Ray tests account for), is
  one group that one worker runs module after module, as a plain pytest run would: Ray's
  GCS and Serve's HAProxy stats port exist once per host. It goes first: it is about half
  of the suite's time.
- Every other test module is a group of its own, so its module-scoped engine, app or
  image is set up once, on one worker.
- vLLM's CPU backend binds an engine's OpenMP threads to core 0 unless told otherwise:
  each worker binds its engines (and the Ray app's, whose processes inherit the
  environment) to a core of its own, so two engines never share one.
"""

import os
from pathlib import Path

import pytest

ONE_AT_A_TIME = "ray-and-haproxy"
ONE_AT_A_TIME_PATHS = (
    "tests/serving/",
    "tests/monitoring/test_monitoring_live.py",
    "tests/unit/test_haproxy_tracking.py",
    "tests/unit/test_start_failure.py",
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


def group_of(path: str) -> str:
    return ONE_AT_A_TIME if path.startswith(ONE_AT_A_TIME_PATHS) else path


def assign_groups(items: list[pytest.Item], root: Path) -> None:
    """Mark each item with its group; the one-at-a-time group first (stable otherwise)."""
    groups = {}
    for item in items:
        groups[item] = group_of(Path(item.path).relative_to(root).as_posix())
        item.add_marker(pytest.mark.xdist_group(groups[item]))
    items.sort(key=lambda item: groups[item] != ONE_AT_A_TIME)
