"""The speculation guard's gauges, read from the state file its engine writes.

The guard runs in vLLM's EngineCore process, a child of the engine replica; it rewrites
a small JSON state file (``DSV4_SPEC_GUARD_STATE``, set here before the engine starts)
every quarter second. This collector reads it at each scrape of the replica's gateway
metrics port, so the values are at most that old, with no channel into vLLM needed.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from model_overrides.guard.spec_guard_config import GUARD_ENV, STATE_ENV

STALE_AFTER_S = 30.0  # a state this old is checked against its engine's process


def prepare_state_path() -> Path | None:
    """Point the engine this process starts at a state file of its own (None: no guard)."""
    if not os.environ.get(GUARD_ENV):
        return None
    path = os.environ.get(STATE_ENV)
    if not path:
        path = str(Path(tempfile.gettempdir()) / f"dsv4-spec-guard-{os.getpid()}.json")
        os.environ[STATE_ENV] = path  # inherited by vLLM's EngineCore process
    return Path(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


class GuardCollector(Collector):
    def __init__(self, state_path: Path, model: str) -> None:
        self.state_path, self.model = state_path, model
        self.host = socket.gethostname()

    def read(self) -> dict | None:
        try:
            state = json.loads(self.state_path.read_text())
        except (OSError, ValueError):  # not written yet, or the engine is gone
            return None
        # The engine writes only while it steps: an idle one keeps its last state, a
        # gone one (its process ended) publishes nothing.
        if time.time() - state.get("time", 0) > STALE_AFTER_S and not _alive(state["pid"]):
            return None
        return state

    def collect(self) -> Iterator[Metric]:
        state = self.read()
        if state is None:
            return
        names = ["model_name", "engine_host", "engine_pid"]
        where = [self.model, self.host, str(state["pid"])]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=names)
            family.add_metric(where, value)
            return family

        yield gauge("dsv4_spec_guard_k", "Draft tokens per step the guard holds", state["k"])
        yield gauge("dsv4_spec_guard_k_max", "Most draft tokens per step", state["k_max"])
        yield gauge(
            "dsv4_spec_guard_drafting_off_seconds",
            "Seconds since the guard turned drafting off (0 while it drafts)",
            state["drafting_off_s"],
        )
        acceptance = GaugeMetricFamily(
            "dsv4_spec_guard_acceptance",
            "The guard's estimate of acceptance at each draft position (given the one before)",
            labels=[*names, "position"],
        )
        for position, rate in enumerate(state["acceptance"]):
            acceptance.add_metric([*where, str(position)], rate)
        yield acceptance
        decisions = CounterMetricFamily(
            "dsv4_spec_guard_decisions",
            "Scheduler steps by the guard's decision (up, down, probe, hold, calibrate)",
            labels=[*names, "reason"],
        )
        for reason, count in sorted(state["decisions"].items()):
            decisions.add_metric([*where, reason], count)
        yield decisions


def register(registry: CollectorRegistry, model: str) -> GuardCollector | None:
    path = prepare_state_path()
    if path is None:
        return None
    collector = GuardCollector(path, model)
    registry.register(collector)
    return collector
