"""Two engine replicas behind HAProxy, one of them made to fail while streams run (test
helper of tests/serving/routing/test_prefix_routing.py)."""

import os
import signal
import subprocess
import threading
import time

import httpx

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


def pids(pattern: str) -> list[int]:
    """Processes matching ``pattern`` that belong to a live engine replica: the replica
    itself or its children (an engine core a killed replica left behind does not count)."""
    import psutil

    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    found = []
    for pid in sorted(int(p) for p in out.stdout.split()):
        try:
            proc = psutil.Process(pid)
            lineage = [proc, *proc.parents()]
            if any(REPLICA in " ".join(p.cmdline()) for p in lineage):
                found.append(pid)
        except psutil.Error:
            continue
    return found


def stream(
    base: str, auth: dict, endings: list[str], started: threading.Semaphore, max_tokens: int = 1500
) -> None:
    body = {"model": MODEL, "prompt": "neti", "max_tokens": max_tokens}
    endings.append(stream_ending(base, auth, body, timeout=120, started=started))


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
    """Four long streams, then a prober's short requests; kill the first process matching
    ``victim_pattern`` (one per replica). ``app``: ``base`` URL and ``auth`` headers."""
    endings: list[str] = []
    started = threading.Semaphore(0)
    streams = [
        threading.Thread(
            target=stream, args=(app["base"], app["auth"], endings, started), daemon=True
        )
        for _ in range(4)
    ]
    # One at a time, each streaming before the next starts: the router's load probe then
    # sees the ones before it, so the bound spreads them over both replicas (three and
    # one). Started together, each of the two ingress routers placed two before a probe
    # counted the other's, and all four could share the key's replica (CI did).
    for t in streams:
        t.start()
        wait_streaming(started, 1, endings)
    prober = Prober(app["base"], app["auth"], design)
    prober.start()
    time.sleep(1)
    victims = pids(victim_pattern)
    assert len(victims) == 2, f"expected one {victim_pattern} per replica, found {victims}"
    killed = time.monotonic()
    os.kill(victims[0], signal.SIGKILL)
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
        streaming = any(t.is_alive() for t in streams)
        if not streaming and (back_at is not None or (down_at is None and now - killed > 30)):
            break
        time.sleep(0.25)
    time.sleep(2)
    prober.stop.set()
    prober.join(60)
    after = [outcome for t, outcome in prober.results if t >= killed]
    figures = {
        "stream_endings": sorted(endings),
        "new_requests_after_kill": len(after),
        "new_requests_failed": [o for o in after if o != "ok"],
        "marked_down_after_s": round(down_at - killed, 1) if down_at else None,
        "survivor_alone_s": round(back_at - down_at, 1) if down_at and back_at else None,
    }
    return figures
