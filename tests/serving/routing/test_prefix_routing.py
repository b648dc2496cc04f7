"""Prefix routing (``serving.routing: prefix``) on two replicas of the golden model
behind HAProxy and Ray's ingress router, end to end with the ``openai`` client:
- every turn of a conversation lands on one replica and reuses its prefix cache there
  (``usage.prompt_tokens_details.cached_tokens``), and the conversations spread over
  both replicas; the texts are the golden model's;
- one hot key fills its replica to the load bound and spills to the other;
- failover, one replica failing mid-stream (four streams, a new request every 0.25 s):
  - its replica process is killed: its streams end in an error the client sees (never
    a clean close that looks complete), the survivor's complete, and new requests are
    answered by the survivor while Serve starts a replacement;
  - its engine core dies inside a living replica: its streams end in an OpenAI
    ``error`` event, the survivor's complete, new requests still reach the survivor;
  - once Serve has replaced it, conversations use both replicas again.
Figures (the homes, the spill, how long the survivor served alone) are printed and
written to ``routing.json`` in the test's temporary directory. (Failover ran on a
default-routing app of its own too until 2026-12-03; the scenarios and assertions are
those, with the router in the path; default routing's two-replica path is Serve's own
router, and one replica killed under default routing is tests/serving/test_reliability.py.)
"""

import asyncio
import json
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from serving.bench.conversations import (
    REPLICA_HEADER,
    Client,
    ConversationWorkload,
    Session,
    run_sessions,
    sessions,
)
from serving.config.preset import PrefixRouting
from serving.golden import GoldenDesign
from serving.monitoring.metrics_page import RAY_EXPORT_PERIOD_S
from serving.routing.decisions import EXPORTED
from serving.routing.keys import key_hash, routing_key
from serving.routing.policy import rank
from tests.support.failover import (
    MODEL,
    REPLICA,
    fail_one,
    replica_ids_up,
    wait_for_replicas_up,
)
from tests.support.prom_samples import scrape, total
from tests.support.ray_app import ray_app

pytestmark = pytest.mark.ray
KEY = "prefix-routing-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
FIGURES: dict = {}
SETS = [
    "deployment.replicas=2",
    "serving.routing=prefix",
    "engine_args.enable_prompt_tokens_details=true",
]
WORKLOAD = ConversationWorkload(
    conversations=6, turns=3, system_words=800, user_words=40, unrelated=0, max_tokens=6,
    concurrency=1,
)  # fmt: skip


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("prefix-routing")
    extra = [arg for assignment in SETS for arg in ("--set", assignment)]
    with ray_app(tmp / "up.log", KEY, extra=extra) as running:
        running["tmp"], running["auth"] = tmp, AUTH
        wait_for_replicas_up(2, 300)
        yield running
    (tmp / "routing.json").write_text(json.dumps(FIGURES, indent=2))
    print("prefix routing figures:", json.dumps(FIGURES, indent=2))


def play(app, workload: ConversationWorkload = WORKLOAD, seed: int = 0):
    workload = ConversationWorkload(**{**workload.__dict__, "seed": seed})
    client = Client(f"{app['base']}/v1", MODEL, KEY)
    all_sessions = sessions(workload, GoldenDesign().words)
    turns, _ = asyncio.run(run_sessions(client, workload, all_sessions))
    return all_sessions, turns


def home(session: Session, replicas: set[str]) -> str:
    """The replica the router ranks first for a conversation: the rendezvous hash of its
    key (system prompt and first user message) over the live replica ids."""
    first = [
        {"role": "system", "content": session.system},
        {"role": "user", "content": session.users[0]},
    ]
    key = routing_key(SimpleNamespace(messages=first), key_chars=PrefixRouting().key_chars)
    return rank(key_hash(key), sorted(replicas))[0]


def seed_homed_on_all(replicas: set[str], first: int = 0) -> int:
    """The first workload seed whose conversations rank every live replica first for
    some of them. Replica ids are random, so a fixed seed puts all six conversations on
    one replica in 1 of 32 runs (a local fresh-clone run met one); choosing the seed from
    the ids makes "both replicas get some" a claim about the router, not about luck."""
    for seed in range(first, first + 200):
        workload = replace(WORKLOAD, seed=seed)
        if {home(s, replicas) for s in sessions(workload, GoldenDesign().words)} == replicas:
            return seed
    raise AssertionError(f"no seed of 200 homes conversations on every one of {replicas}")


def assert_turns_at_home(turns, all_sessions: list[Session], replicas: set[str]) -> None:
    """Every turn on its conversation's first-ranked replica (one conversation at a time:
    no replica nears the load bound, so none spills)."""
    homes = {s.name: home(s, replicas) for s in all_sessions}
    astray = [
        (t.session, t.turn, t.replica, homes[t.session])
        for t in turns
        if t.replica != homes[t.session]
    ]
    assert not astray, astray
    assert {t.replica for t in turns} == replicas


OUTCOMES = ("affinity", "spill", "no_key")


def decisions(app) -> dict[str, float]:
    """The routers' picks by outcome, from Ray's metrics export port."""
    samples = scrape(f"http://127.0.0.1:{app['ports']['ray']}/metrics")
    return {o: total(samples, EXPORTED, outcome=o) for o in OUTCOMES}


def decisions_since(app, before: dict[str, float], requests: int) -> dict[str, float]:
    """What the routers counted since ``before``, once all ``requests`` (finished) are on
    Ray's export page (the agent takes the processes' increments about every 10 s). A pick
    may be counted twice: HAProxy asks the next router when one has not answered in 5 s
    (ray/serve/_private/ingress_request_router.lua.tmpl), and the first may have counted
    its pick; so the checks are bounds."""

    def since() -> dict[str, float]:
        now = decisions(app)
        return {o: now[o] - before[o] for o in OUTCOMES}

    deadline = time.monotonic() + 60
    while (counted := since())["affinity"] + counted["spill"] < requests:
        if time.monotonic() > deadline:
            break
        time.sleep(1)
    time.sleep(RAY_EXPORT_PERIOD_S)  # each process exports on its own clock
    return since()


def test_up_says_the_router_runs(app):
    log = Path(app["log"]).read_text()
    assert "routing prefix" in log and "Dsv4Router: HEALTHY" in log


def test_conversations_stick_to_a_replica_and_reuse_its_cache(app, golden_design):
    # One conversation at a time: with two, a turn sent the moment the one before it
    # ended can find that one still counted on its replica and spill within the bound
    # (the full suite saw one conversation move so); the hot-key test covers spills.
    live = replica_ids_up()
    assert len(live) == 2, live
    before = decisions(app)
    all_sessions, turns = play(app, WORKLOAD, seed_homed_on_all(live))
    assert all(t.ok for t in turns), [t.error for t in turns if not t.ok]
    assert_turns_at_home(turns, all_sessions, live)
    # The routers' metric counts each pick: every turn went to its key's own replica.
    counted = decisions_since(app, before, len(turns))
    # Besides, right after start-up the routers may count a pick without a key (one or two
    # in four of five runs; cause not determined): recorded, not held to a count.
    FIGURES["first_picks_without_key"] = counted["no_key"]
    assert counted["affinity"] >= len(turns) and counted["spill"] == 0, counted
    assert all(t.text == golden_design.chat_reply(WORKLOAD.max_tokens) for t in turns)
    by_session: dict[str, set[str]] = {}
    for t in turns:
        by_session.setdefault(t.session, set()).add(t.replica)
    assert all(len(replicas) == 1 for replicas in by_session.values()), by_session
    homes = Counter(next(iter(r)) for r in by_session.values())
    assert len(homes) == 2, homes  # six conversations: both replicas get some
    # A later turn extends the turn before on the same replica: whole blocks from cache.
    later = [t for t in turns if t.turn > 0]
    assert all(t.cached_tokens and t.cached_tokens >= 512 for t in later), [
        (t.session, t.turn, t.cached_tokens) for t in later
    ]
    FIGURES["sticky"] = {
        "homes": dict(homes),
        "cached_later_turns": sorted(t.cached_tokens for t in later),
    }


def test_a_hot_key_spills_to_the_other_replica_within_the_bound(app):
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "sinu tede zuto rabi"}],
        "max_tokens": 300,
        "temperature": 0,
        "ignore_eos": True,
    }

    async def one(client, delay: float) -> str:
        await asyncio.sleep(delay)
        response = await client.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        return response.headers[REPLICA_HEADER]

    async def burst() -> Counter:
        async with httpx.AsyncClient(base_url=app["base"], headers=AUTH, timeout=300) as c:
            return Counter(await asyncio.gather(*(one(c, 0.3 * i) for i in range(10))))

    before = decisions(app)
    landed = asyncio.run(burst())
    FIGURES["hot_key"] = dict(landed)
    assert len(landed) == 2, landed  # one key, yet both replicas
    # Those on the key's first-ranked replica were affinity picks, the rest spills.
    home_replica = rank(key_hash(routing_key(SimpleNamespace(**body))), sorted(landed))[0]
    counted = decisions_since(app, before, 10)
    at_home = landed[home_replica]
    assert counted["affinity"] >= at_home and counted["spill"] >= 10 - at_home, counted
    assert counted["no_key"] == 0, counted
    # Bound: ceil(1.2 x (in flight + 1) / 2); two router replicas each add what they
    # placed since the last probe, so allow one more than 6 of 10.
    assert max(landed.values()) <= 7, landed


def _failed_over(app, golden_design, victim: str, name: str) -> dict[str, list[str]]:
    """One replica fails (``victim``: its process or its engine core), the one that took
    the most of the four streams; the checks both scenarios share. Returns the streams'
    endings on the victim and on the survivor."""
    figures = fail_one(app, golden_design, victim)
    FIGURES[name] = figures
    print(name, figures)
    endings = figures["stream_endings"]
    assert endings["victim"] and "hang" not in endings["victim"], endings
    assert endings["survivor"] == ["complete"] * len(endings["survivor"]), endings
    # A request HAProxy hands the failing replica in that instant can be cut (an error the
    # client sees), or get a clean HTTP error (one CI run: one 500 of 133, HAProxy's 5xx
    # as the replica went).
    failed = figures["new_requests_failed"]
    clean_or_cut = all(f == "RemoteProtocolError" or f[:3].isdigit() for f in failed)
    assert len(failed) <= 2 and clean_or_cut, figures
    return endings


def test_the_routing_bench_plays_each_cell_cold_on_one_app(app, tmp_path):
    """`bench --routing` with two system-prompt lengths on one running app: each cell's
    own seed keeps the other cell's prompts out of its cache (its first turn finds nothing
    cached), its later turns hit, and each cell is written as a one-cell run of its own."""
    from serving.bench import routing_bench
    from serving.bench.load import Target

    # Seeds of their own: a seed gives the same first words at any length, and the other
    # tests draw theirs from 0-199 and 1000-1199 (a cell on the sticky test's seed found
    # its 800-word prompt's first 512 tokens cached; CI did).
    base = ConversationWorkload(
        conversations=2, turns=2, user_words=20, unrelated=0, max_tokens=4, concurrency=1,
        seed=500,
    )  # fmt: skip
    # 600 words and more: a later turn's prompt then spans three 256-token blocks, of which
    # a hit keeps two less the one MTP's draft recomputes (docs/routing.md); 300 words
    # (384 tokens) could never hit.
    played = routing_bench.cells([replace(base, system_words=w) for w in (600, 900)])
    # A router just started may send its first picks astray (docs/routing.md): warm it.
    play(app, replace(WORKLOAD, conversations=2, turns=1), seed=99)
    target = Target("prefix", f"{app['base']}/v1", MODEL, api_key=KEY)
    result = routing_bench.run_all(
        None, [], [target], played, 1, GoldenDesign().words, tmp_path / "logs", print
    )
    assert list(result["cells"]) == ["prefix-600-c-1", "prefix-900-c-1"]
    turns = {name: cell["raw"]["prefix"][0]["turns"] for name, cell in result["cells"].items()}
    assert all(len(t) == 4 and all(x["ok"] for x in t) for t in turns.values()), turns
    seen = {
        name: [(x["session"], x["turn"], x["replica"], x["prompt_tokens"], x["cached_tokens"])
               for x in t]
        for name, t in turns.items()
    }  # fmt: skip
    # Each cell's first request is its first sight of its prefix (the 900-word cell would
    # otherwise find the 600-word cell's first blocks); its later turns hit.
    assert [t[0]["cached_tokens"] for t in turns.values()] == [0, 0], seen
    assert all(max(x["cached_tokens"] for x in t[1:]) > 0 for t in turns.values()), seen
    paths = routing_bench.write(result, tmp_path / "out")
    assert tmp_path / "out" / "prefix-900-c-1" / "routing.json" in paths
    assert sum(1 for _ in routing_bench.each_cell(result)) == 2


def test_killed_replica_process(app, golden_design):
    endings = _failed_over(app, golden_design, REPLICA, "replica_killed")
    # Its streams end in an error the client sees, never a clean close that looks complete.
    assert not any(e.startswith(("closed", "complete")) for e in endings["victim"]), endings
    assert FIGURES["replica_killed"]["new_requests_after_kill"] > 10


def test_dead_engine_inside_a_living_replica(app, golden_design):
    wait_for_replicas_up(2, 600)
    endings = _failed_over(app, golden_design, "VLLM::EngineCore", "engine_core_killed")
    # Every stream on the dead engine ends in an error event; the replica ends itself as
    # soon as a request meets the dead engine.
    assert endings["victim"] == ["error event"] * len(endings["victim"]), endings


def test_conversations_resume_on_both_replicas_after_the_replacement(app, golden_design):
    wait_for_replicas_up(2, 600)
    live = replica_ids_up()
    assert len(live) == 2, live
    # A seed other than the sticky test's: these prompts are new to both caches.
    seed = seed_homed_on_all(live, first=1000)
    all_sessions, turns = play(app, WORKLOAD, seed)
    assert all(t.ok and t.text == golden_design.chat_reply(WORKLOAD.max_tokens) for t in turns)
    # The replacement's id is new: a router that had not learnt it would send its
    # conversations to the survivor.
    assert_turns_at_home(turns, all_sessions, live)


def test_figures_are_written():
    assert {"sticky", "hot_key", "replica_killed", "engine_core_killed"} <= set(FIGURES)
