"""Ray Serve app vs vLLM's own OpenAI server: same golden model, same engine arguments.

Both servers run MTP k=2 with the cpu-tiny preset's arguments. Each is started alone
(start-to-ready is timed without the other loading), then both stay up and are
measured in alternating rounds: concurrency 8, streamed completions, 64 tokens each.

    .venv/bin/python benchmarks/serving_overhead.py [--rounds 3]
"""

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from serving.golden import GoldenDesign  # noqa: E402
from serving.golden_engine import SERVED_MODEL_NAME  # noqa: E402

CONCURRENCY, MAX_TOKENS = 8, 64


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(base: str) -> bool:
    body = {"model": SERVED_MODEL_NAME, "prompt": "neti", "max_tokens": 2, "temperature": 0}
    try:
        return httpx.post(f"{base}/v1/completions", json=body, timeout=30).status_code == 200
    except httpx.HTTPError:
        return False


def start(name: str, cmd: list[str], base: str, log: Path) -> tuple[subprocess.Popen, float]:
    print(f"starting {name} ...", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT
    )
    while not _ready(base):
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited early; see {log}")
        if time.monotonic() - t0 > 600:
            raise SystemExit(f"{name} not ready after 600 s; see {log}")
        time.sleep(0.5)
    ready = time.monotonic() - t0
    print(f"  {name} ready in {ready:.1f} s", file=sys.stderr, flush=True)
    return proc, ready


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


async def one(client: httpx.AsyncClient, base: str, prompt: str) -> tuple[float, int]:
    body = {
        "model": SERVED_MODEL_NAME,
        "prompt": prompt,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
    }
    t0 = time.perf_counter()
    ttft, chunks = None, 0
    async with client.stream("POST", f"{base}/v1/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            if json.loads(line[6:])["choices"][0]["text"]:
                ttft = ttft if ttft is not None else time.perf_counter() - t0
                chunks += 1
    return ttft or float("nan"), chunks


async def round_(base: str, design: GoldenDesign, seed: int) -> dict:
    prompts = [
        " ".join(design.words[(seed * 8 + i) % 200 : (seed * 8 + i) % 200 + 3])
        for i in range(CONCURRENCY)
    ]
    async with httpx.AsyncClient(timeout=300) as client:
        t0 = time.perf_counter()
        results = await asyncio.gather(*[one(client, base, p) for p in prompts])
        wall = time.perf_counter() - t0
    return {"tok_s": CONCURRENCY * MAX_TOKENS / wall, "ttfts": [r[0] for r in results]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results/serving_overhead.json")
    args = parser.parse_args()
    logs = args.out.parent
    logs.mkdir(parents=True, exist_ok=True)
    cli = [str(ROOT / ".venv/bin/dsv4-serve")]
    vllm_port, ray_port = _port(), _port()
    servers = {
        "vllm": (cli + ["serve-vllm", "--port", str(vllm_port)], f"http://127.0.0.1:{vllm_port}"),
        "ray-serve": (
            cli
            + [
                "up",
                "cpu-tiny",
                "--port",
                str(ray_port),
                "--ray-metrics-port",
                str(_port()),
                "--gateway-metrics-port",
                str(_port()),
            ],
            f"http://127.0.0.1:{ray_port}",
        ),
    }
    procs, report = {}, {}
    try:
        for name, (cmd, base) in servers.items():
            procs[name], ready = start(name, cmd, base, logs / f"{name}.log")
            report[name] = {"start_to_ready_s": ready, "rounds": []}
        design = GoldenDesign()
        for r in range(args.rounds + 1):  # round 0 warms both up
            for name, (_, base) in servers.items():
                print(f"round {r} {name} ...", file=sys.stderr, flush=True)
                result = asyncio.run(round_(base, design, r))
                if r:
                    report[name]["rounds"].append(result)
    finally:
        for proc in procs.values():
            stop(proc)
    for entry in report.values():
        entry["tok_s_median"] = statistics.median(x["tok_s"] for x in entry["rounds"])
        entry["ttft_p50_s"] = statistics.median(t for x in entry["rounds"] for t in x["ttfts"])
    args.out.write_text(json.dumps(report, indent=2))
    v, r = report["vllm"], report["ray-serve"]
    print("| server | start-to-ready s | tok/s c=8 | p50 TTFT ms |\n|---|---|---|---|")
    for name, e in report.items():
        print(
            f"| {name} | {e['start_to_ready_s']:.1f} | {e['tok_s_median']:.1f} "
            f"| {e['ttft_p50_s'] * 1e3:.0f} |"
        )
    print(
        f"\nthroughput ratio ray/vllm {r['tok_s_median'] / v['tok_s_median']:.3f}, "
        f"added p50 TTFT {(r['ttft_p50_s'] - v['ttft_p50_s']) * 1e3:.0f} ms, "
        f"start-to-ready ratio {r['start_to_ready_s'] / v['start_to_ready_s']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
