"""bench.json's patches: every registered patch, with the outcome its engine reported.

A remote target's outcomes are read from the gateway's own gauge, published the way the
gateway publishes it (from the overrides' status report of a real process) and served by
prometheus-client's HTTP server; a local target's come from its engine log."""

import asyncio
import socket

import pytest
from prometheus_client import start_http_server

from model_overrides.engine_status import report
from serving.bench import patch_record
from serving.bench.stages import patch_statuses
from serving.gateway import metrics


@pytest.fixture(scope="module")
def names() -> list[str]:
    return patch_record.registered_patches()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(server, thread) -> None:
    server.shutdown()
    server.server_close()  # the port refuses from here on
    thread.join(5)


def test_a_remote_targets_patches_come_from_its_gateway_gauge(names):
    status = report()

    async def rpc(method: str) -> list[dict]:
        return [status]

    metrics.PATCHES.clear()
    asyncio.run(metrics.publish_engine_status(rpc))
    port = _free_port()
    server, thread = start_http_server(port, "127.0.0.1", registry=metrics.REGISTRY)
    try:
        found = patch_record.remote(f"http://127.0.0.1:{port}/metrics", names)
    finally:
        _stop(server, thread)
        metrics.PATCHES.clear()
    assert list(found) == names
    assert found == {p["name"]: p["status"] for p in status["patches"]}


def test_a_page_without_the_gauge_or_no_page_says_so_for_every_patch(names):
    port = _free_port()
    server, thread = start_http_server(port, "127.0.0.1", registry=metrics.REGISTRY)
    try:
        metrics.PATCHES.clear()
        url = f"http://127.0.0.1:{port}/metrics"
        silent = patch_record.remote(url, names)
    finally:
        _stop(server, thread)
    assert set(silent.values()) == {f"not reported (no dsv4_overrides_patch_info at {url})"}
    assert list(silent) == names
    gone = patch_record.remote(url, names)  # the server has stopped
    assert set(gone.values()) == {f"not reported ({url}: ConnectError)"}
    none = patch_record.remote(None, names)
    assert set(none.values()) == {"not reported (no metrics URL for this target)"}


def test_a_local_targets_log_fills_what_it_says_and_names_the_rest(names):
    log = (
        "(EngineCore pid=7) INFO [registry.py:155] [dsv4-overrides] dsv4-dummy-weights: "
        "applied (vLLM fills FP4 bytes)\n"
    )
    found = patch_record.complete(patch_statuses(log), names, "not in its log")
    assert found["dsv4-dummy-weights"] == "applied"
    assert list(found) == names
    assert {v for k, v in found.items() if k != "dsv4-dummy-weights"} == {
        "not reported (not in its log)"
    }
