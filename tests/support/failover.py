"""Two engine replicas behind HAProxy, one of them made to fail while streams run (test
helper of tests/serving/routing/test_prefix_routing.py)."""

import os
import re
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass

import httpx

from serving.bench.conversations import REPLICA_HEADER
from serving.config.proxy import haproxy_config
from serving.golden import GoldenDesign
from tests.support.golden_prompts import prompt_of
from tests.support.streams import stream_ending, wait_streaming

MODEL = "dsv4-golden"
HAPROXY_STATS = "http://127.0.0.1:8404/stats;csv"  # Ray's HAProxy stats frontend


def replica_ids_up() -> set[str]:
    """Serve ids of the engine replicas HAProxy currently sends traffic to. Ray names each
    server after the replica's actor, ``SERVE_REPLICA::<app>#<deployment>#<id>`` made safe
    for HAProxy (ray/serve/_private/haproxy.py ``get_safe_name``: ``#`` -> ``-``)."""
    try:
        rows = httpx.get(HAPROXY_STATS, timeout=5).text.splitlines()
    except httpx.HTTPError:
        return set()
    return {
        fields[1].rsplit("-", 1)[-1]
        for fields in (row.split(",") for row in rows)
        if fields[0] == "http-dsv4"
        and fields[1].startswith("SERVE_REPLICA_")
        and fields[17].startswith("UP")
    }


def replicas_up() -> int:
    """Engine replicas HAProxy currently sends traffic to."""
    return len(replica_ids_up())


def wait_for_replicas_up(count: int, timeout_s: float) -> float:
    started = time.monotonic()
    while replicas_up() < count:
        assert time.monotonic() - started < timeout_s, f"fewer than {count} replicas UP"
        time.sleep(0.5)
    return time.monotonic() - started


REPLICA = "ServeReplica:dsv4:Dsv4Server"


def replica_process(replica_id: str):
    """The process of the engine replica with Serve id ``replica_id``: the one listening on
    the address HAProxy's config gives its server (Ray's template,
    ray/serve/_private/haproxy_templates.py: ``server <name> <host>:<port>``). Ray's
    process title names the deployment only, and an engine replica keeps no file of its
    own open."""
    import psutil

    configs = {
        config
        for proc in psutil.process_iter(["cmdline"])
        if (config := haproxy_config(proc.info["cmdline"] or [])) is not None
    }
    server = rf"^\s*server SERVE_REPLICA_\S+-{replica_id} \S+:(\d+)\s"
    ports = {int(m.group(1)) for c in configs for m in re.finditer(server, c.read_text(), re.M)}
    assert len(ports) == 1, f"replica {replica_id}'s port in HAProxy's {configs}: {ports}"
    port = ports.pop()
    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            return psutil.Process(conn.pid)
    raise AssertionError(f"nothing listens on replica {replica_id}'s port {port}")


def victim_pid(pattern: str, replica_id: str) -> int:
    """The process matching ``pattern`` of replica ``replica_id``: the replica itself or
    one of its children (its engine core)."""
    import psutil

    proc = replica_process(replica_id)
    for candidate in (proc, *proc.children(recursive=True)):
        try:
            if pattern in " ".join(candidate.cmdline()):
                return candidate.pid
        except psutil.Error:
            continue
    raise AssertionError(f"replica {replica_id} has no {pattern} process")


@dataclass
class Stream:
    """One long streamed completion: the replica that took it (our gateway's
    ``x-dsv4-replica`` header) and how it ended."""

    replica: str = ""
    ending: str = ""

    def run(self, base: str, auth: dict, started: threading.Semaphore) -> None:
        def opened(response: httpx.Response) -> None:
            self.replica = response.headers.get(REPLICA_HEADER, "")

        body = {"model": MODEL, "prompt": "neti", "max_tokens": 1500}
        self.ending = stream_ending(base, auth, body, timeout=120, started=started, on_open=opened)


class Prober(threading.Thread):
    """New short requests every 0.25 s while a replica fails: what a new client sees."""

    def __init__(self, base: str, auth: dict, design: GoldenDesign) -> None:
        super().__init__(daemon=True)
        self.base, self.auth, self.design = base, auth, design
        self.results: list[tuple[float, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.base, headers=self.auth, timeout=60) as client:
            seed = 0
            while not self.stop.is_set():
                seed += 1
                prompt = prompt_of(self.design, 2, seed=900 + seed)
                body = {"model": MODEL, "prompt": prompt, "max_tokens": 4, "temperature": 0}
                t0 = time.monotonic()
                try:
                    response = client.post("/v1/completions", json=body)
                    text = response.json()["choices"][0]["text"] if response.is_success else ""
                    ok = text == self.design.continuation(prompt, 4)
                    outcome = "ok" if ok else f"{response.status_code} {response.text[:120]}"
                except httpx.HTTPError as exc:
                    outcome = type(exc).__name__
                self.results.append((t0, outcome))
                time.sleep(0.25)


def fail_one(app: dict, design: GoldenDesign, victim_pattern: str) -> dict:
    """Four long streams, then a prober's short requests; kill the ``victim_pattern``
    process of the replica that took the most streams. ``app``: ``base`` URL and ``auth``
    headers. Where the streams landed is read, not assumed: with the rest of the suite
    on two cores a load probe can miss its deadline, and then the two ingress routers,
    each counting only what it placed itself, can put all four on one replica (CI did)."""
    started = threading.Semaphore(0)
    streams = [Stream() for _ in range(4)]
    threads = [
        threading.Thread(target=s.run, args=(app["base"], app["auth"], started), daemon=True)
        for s in streams
    ]
    # One at a time, each streaming before the next starts: clients arriving apart.
    for t in threads:
        t.start()
        wait_streaming(started, 1, [s.ending for s in streams])
    landed = Counter(s.replica for s in streams)
    assert "" not in landed, f"a stream without the {REPLICA_HEADER} header: {landed}"
    victim = landed.most_common(1)[0][0]
    prober = Prober(app["base"], app["auth"], design)
    prober.start()
    time.sleep(1)
    pid = victim_pid(victim_pattern, victim)
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    # Until the streams have ended and HAProxy has both replicas again: when it marked
    # the victim down and when the replacement came up (never down: its engine died
    # inside a replica HAProxy kept sending to, until Serve replaced it).
    down_at = back_at = None
    while time.monotonic() - killed < 600:
        up, now = replicas_up(), time.monotonic()
        if up < 2 and down_at is None:
            down_at = now
        if down_at is not None and up >= 2 and back_at is None:
            back_at = now
        streaming = any(t.is_alive() for t in threads)
        if not streaming and (back_at is not None or (down_at is None and now - killed > 30)):
            break
        time.sleep(0.25)
    time.sleep(2)
    prober.stop.set()
    prober.join(60)
    after = [outcome for t, outcome in prober.results if t >= killed]
    return {
        "stream_endings": {
            "victim": sorted(s.ending for s in streams if s.replica == victim),
            "survivor": sorted(s.ending for s in streams if s.replica != victim),
        },
        "new_requests_after_kill": len(after),
        "new_requests_failed": [o for o in after if o != "ok"],
        "marked_down_after_s": round(down_at - killed, 1) if down_at else None,
        "survivor_alone_s": round(back_at - down_at, 1) if down_at and back_at else None,
    }
