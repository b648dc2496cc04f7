"""The Ray Serve app (`dsv4-serve up cpu-tiny`) on the golden DSV4 with MTP, through the
official openai client: one app for the whole module."""

import asyncio
import json
import os
import signal
import subprocess
import time

import httpx
import openai
import psutil
import pytest

from model_overrides import kernel_library
from serving.golden import GoldenDesign
from tests.support.golden_prompts import prompt_of
from tests.support.prom_samples import scrape, total
from tests.support.ray_app import ray_app, ray_pids
from tests.support.server_process import PYTHON

pytestmark = pytest.mark.slow
KEY = "test-key-0123456789"
MODEL = "dsv4-golden"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory):
    with ray_app(tmp_path_factory.mktemp("serve-app") / "up.log", KEY) as running:
        yield running


@pytest.fixture(scope="module")
def client(app):
    return openai.OpenAI(base_url=app["base"] + "/v1", api_key=KEY, max_retries=0, timeout=120)


def test_start_up_says_how_to_reach_it(app):
    text = app["log"].read_text()
    assert "auth ON: 1 key(s) from DSV4_API_KEYS" in text
    assert KEY not in text  # keys are never logged
    assert "ready in" in text and "curl -s" in text and "/metrics" in text


def test_the_engine_replica_is_the_ingress_behind_haproxy(app):
    text = app["log"].read_text()
    assert "serving path direct, proxy haproxy" in text
    assert "Dsv4Server" in text and "Dsv4Ingress" not in text  # one deployment, no ingress
    stages = next(x for x in text.splitlines() if "[dsv4-serve] stages:" in x)
    assert all(f"{stage} " in stages for stage in ("ray", "serve", "replica"))


def test_models(client):
    assert [m.id for m in client.models.list().data] == [MODEL]


@pytest.mark.parametrize("stream", [False, True])
def test_completions_golden_text(client, golden_design: GoldenDesign, stream: bool):
    prompt = prompt_of(golden_design, 4, seed=5)
    out = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=12, temperature=0, stream=stream
    )
    if stream:
        text = "".join(c.choices[0].text for c in out)
    else:
        text = out.choices[0].text
        assert out.usage.completion_tokens == 12 and out.usage.prompt_tokens == 4
        assert out.choices[0].finish_reason == "length"
    assert text == golden_design.continuation(prompt, 12)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_golden_reply(client, golden_design: GoldenDesign, stream: bool):
    messages = [{"role": "user", "content": "neti sinu"}]
    out = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=6, temperature=0, stream=stream
    )
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in out if c.choices)
    else:
        text = out.choices[0].message.content
        assert out.usage.completion_tokens == 6
    assert text == golden_design.chat_reply(6)


def test_stop_sequence_and_max_tokens(client, golden_design: GoldenDesign):
    prompt = "neti"
    full = golden_design.continuation(prompt, 10)
    stop_word = full.split()[3]
    out = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=10, temperature=0, stop=[f" {stop_word}"]
    )
    assert out.choices[0].text == full[: full.index(f" {stop_word}")]
    assert out.choices[0].finish_reason == "stop"
    short = client.completions.create(model=MODEL, prompt=prompt, max_tokens=2, temperature=0)
    assert short.choices[0].text == golden_design.continuation(prompt, 2)


def test_sixteen_concurrent_requests_all_correct(app, golden_design: GoldenDesign):
    async def run() -> list[tuple[str, str]]:
        aclient = openai.AsyncOpenAI(
            base_url=app["base"] + "/v1", api_key=KEY, max_retries=0, timeout=300
        )
        prompts = [prompt_of(golden_design, 1 + i % 5, seed=100 + i) for i in range(16)]
        outs = await asyncio.gather(
            *[
                aclient.completions.create(model=MODEL, prompt=p, max_tokens=24, temperature=0)
                for p in prompts
            ]
        )
        await aclient.close()
        return [(p, o.choices[0].text) for p, o in zip(prompts, outs, strict=True)]

    results = asyncio.run(run())
    assert [text for _, text in results] == [golden_design.continuation(p, 24) for p, _ in results]


def test_auth_401_without_or_with_a_wrong_key(app):
    body = {"model": MODEL, "prompt": "neti", "max_tokens": 2}
    missing = httpx.post(app["base"] + "/v1/completions", json=body, timeout=30)
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "missing_api_key"
    wrong = openai.OpenAI(base_url=app["base"] + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.completions.create(model=MODEL, prompt="neti", max_tokens=2)
    assert httpx.get(app["base"] + "/v1/models", timeout=30).status_code == 401


def test_engine_and_gateway_metrics_advance(app, client, golden_design: GoldenDesign):
    ray_url = f"http://127.0.0.1:{app['ports']['ray']}/metrics"
    gw_url = f"http://127.0.0.1:{app['ports']['gateway']}/metrics"
    accepted = "ray_vllm_spec_decode_num_accepted_tokens_total"
    drafted = "ray_vllm_spec_decode_num_draft_tokens_total"
    engine_before = scrape(ray_url)
    before_gw = scrape(gw_url)
    for seed in range(3):
        prompt = prompt_of(golden_design, 2, seed=seed)
        client.completions.create(model=MODEL, prompt=prompt, max_tokens=30, temperature=0)
    deadline = time.monotonic() + 60
    while True:
        engine_after = scrape(ray_url)
        d_accepted = total(engine_after, accepted, model_name=MODEL) - total(
            engine_before, accepted, model_name=MODEL
        )
        d_drafted = total(engine_after, drafted, model_name=MODEL) - total(
            engine_before, drafted, model_name=MODEL
        )
        if d_accepted >= 3 * 20:  # 30 tokens at k=2: at least 10 fully accepted steps each
            break
        assert time.monotonic() < deadline, (
            "engine spec-decode counters did not advance on Ray's port"
        )
        time.sleep(2)
    # Full agreement: every draft that reached verification was accepted; the server's
    # async scheduling may draft one step past a request's end (counted, not accepted).
    assert d_accepted / d_drafted >= 0.9
    after_gw = scrape(gw_url)
    name = "dsv4_gateway_request_duration_seconds_count"
    match = {"route": "/v1/completions", "model": MODEL}
    assert total(after_gw, name, **match) - total(before_gw, name, **match) == 3
    assert total(after_gw, "dsv4_gateway_time_to_first_token_seconds_count", **match) >= 3
    # Reported by the process that runs the model (vLLM's worker, which the replica's
    # engine started), not by the replica that serves the API.
    patch = {"patch": "dsv4-cpu-mtp-draft", "status": "applied"}
    reporters = {
        dict(labels)["engine_pid"]
        for (name, labels) in after_gw
        if name == "dsv4_overrides_patch_info"
    }
    assert len(reporters) == 1, reporters
    where = {"engine_pid": reporters.pop()}
    replica = subprocess.run(["pgrep", "-f", "ServeReplica:dsv4"], capture_output=True, text=True)
    (replica_pid,) = [int(p) for p in replica.stdout.split()]
    ancestors = [p.pid for p in psutil.Process(int(where["engine_pid"])).parents()]
    assert int(where["engine_pid"]) != replica_pid and replica_pid in ancestors, ancestors
    assert total(after_gw, "dsv4_overrides_patch_info", **patch, **where) == 1
    library = kernel_library.expected_library()
    assert total(after_gw, "dsv4_cpu_kernel_library_info", library=library, **where) == 1


def test_bench_smoke_run_writes_a_complete_report(app, tmp_path):
    ray_metrics = f"http://127.0.0.1:{app['ports']['ray']}/metrics"
    out_dir = tmp_path / "bench"
    cmd = [
        PYTHON,
        "-m",
        "serving.cli",
        "bench",
        "--target",
        f"app={app['base']},metrics={ray_metrics}",
    ]
    cmd += ["--concurrency", "1", "2", "--requests", "3", "--rounds", "1", "--max-tokens", "12"]
    cmd += ["--out", str(out_dir)]
    run = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "DSV4_API_KEY": KEY}
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "[bench] c=2 round 1/1 app" in run.stderr  # progress lines
    assert "Client machine: " in (out_dir / "bench.md").read_text()
    report = json.loads((out_dir / "bench.json").read_text())
    assert sorted(e["concurrency"] for e in report["levels"]) == [1, 2]
    for level in report["levels"]:
        assert level["failed"] == 0 and level["output_tokens"] == 3 * 12
        assert level["ttft_s"]["p50"] is not None and level["tpot_s"]["p90"] is not None
        assert level["spec_decode"]["acceptance_length"] is not None
    for name in ("bench.md", "throughput.png", "latency.png", "acceptance.png"):
        assert (out_dir / name).stat().st_size > 0
    # vLLM's benchmark client sends the key; a wrong one fails every request, by name.
    cmd[cmd.index("--out") + 1] = str(tmp_path / "denied")
    denied = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "DSV4_API_KEY": "x"}
    )
    assert denied.returncode == 1, denied.stderr[-3000:]
    levels = json.loads((tmp_path / "denied" / "bench.json").read_text())["levels"]
    assert all(e["failed"] == e["requests"] == 3 for e in levels), levels
    assert all(e["errors"] == ["Unauthorized"] for e in levels), levels


def test_ctrl_c_stops_everything_without_orphans(app):
    # SIGINT is what Ctrl-C sends (SIGTERM takes the same path; both are taken back from Ray).
    proc = app["proc"]
    os.kill(proc.pid, signal.SIGINT)
    proc.wait(120)
    assert proc.returncode == 0
    deadline = time.monotonic() + 60
    while ray_pids() - app["ray_before"]:
        assert time.monotonic() < deadline, (
            f"orphaned Ray processes: {ray_pids() - app['ray_before']}"
        )
        time.sleep(2)
    assert "[dsv4-serve] stopped" in app["log"].read_text()
