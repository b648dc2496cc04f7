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

from model_overrides.kernels import kernel_library
from serving.bench.patch_record import registered_patches
from serving.gateway.keys import key_id
from serving.gateway.routes import TABLE, Kind
from serving.golden import GoldenDesign
from tests.support.golden_prompts import prompt_of
from tests.support.prom_samples import scrape, total
from tests.support.ray_app import ray_app, ray_pids
from tests.support.server_process import PYTHON

pytestmark = pytest.mark.ray
KEY = "test-key-0123456789"
ADMIN_KEY = "test-admin-key-0123456789"
MODEL = "dsv4-golden"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DSV4_ADMIN_KEYS", ADMIN_KEY)
        with ray_app(tmp_path_factory.mktemp("serve-app") / "up.log", KEY) as running:
            yield running


@pytest.fixture(scope="module")
def client(app):
    return openai.OpenAI(base_url=app["base"] + "/v1", api_key=KEY, max_retries=0, timeout=120)


def test_start_up_says_how_to_reach_it(app):
    text = app["log"].read_text()
    assert "auth ON: 1 key(s) from DSV4_API_KEYS" in text
    assert KEY not in text and ADMIN_KEY not in text  # keys are never logged
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


def _get(app, path: str, key: str | None, method: str = "GET", **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.request(method, app["base"] + path, headers=headers, timeout=60, **kw)


def test_the_replica_mounts_only_routes_the_table_classifies(app):
    # What the replica's gateway found in the app it serves (vLLM's and Ray Serve LLM's
    # routes): every one classified by serving/gateway/routes.py.
    gw = scrape(f"http://127.0.0.1:{app['ports']['gateway']}/metrics")
    assert ("dsv4_gateway_unclassified_routes", ()) in gw
    assert total(gw, "dsv4_gateway_unclassified_routes") == 0


def test_the_served_schema_lists_what_each_key_reaches(app):
    inference = set(_get(app, "/openapi.json", KEY).json()["paths"])
    admin = set(_get(app, "/openapi.json", ADMIN_KEY).json()["paths"])
    for path in inference | admin:  # every advertised path is the table's, and reachable
        assert TABLE.match(path) is not None, path
    assert {TABLE.match(p).kind for p in inference} == {Kind.INFERENCE, Kind.PROBE}
    assert {TABLE.match(p).kind for p in admin - inference} == {Kind.CONTROL, Kind.METRICS}
    assert {"/v1/completions", "/v1/chat/completions", "/v1/models/{model}"} <= inference
    assert {"/load", "/kv_event_sources", "/metrics"} <= admin
    # off in this deployment: elastic EP is not enabled, SageMaker's and batch routes are off
    hidden = {"/scale_elastic_ep", "/invocations", "/v1/chat/completions/batch", "/ping"}
    assert not hidden & admin
    assert _get(app, "/openapi.json", None).status_code == 401


def test_an_inference_key_cannot_reach_control_routes(app):
    # The report: an inference key rescaled the engine (500 "Scale failed").
    scale = _get(app, "/scale_elastic_ep", KEY, "POST", json={"new_data_parallel_size": 2})
    assert scale.status_code == 404 and scale.json()["error"]["code"] == "feature_off"
    for path in ("/load", "/kv_event_sources", "/version", "/metrics"):
        denied = _get(app, path, KEY)
        assert denied.status_code == 403, (path, denied.text)
        assert denied.json()["error"]["code"] == "admin_key_required"
    assert _get(app, "/is_scaling_elastic_ep", KEY, "POST").status_code == 404
    assert _get(app, "/invocations", KEY, "POST", json={}).status_code == 404
    assert _get(app, "/v1/brand-new", KEY).status_code == 404


def test_an_admin_key_reaches_control_routes(app):
    assert "server_load" in _get(app, "/load", ADMIN_KEY).json()
    assert _get(app, "/kv_event_sources", ADMIN_KEY).status_code == 200
    page = _get(app, "/metrics", ADMIN_KEY)  # vLLM's registry in the replica process
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    # Still off: this deployment does not enable elastic EP.
    assert _get(app, "/scale_elastic_ep", ADMIN_KEY, "POST", json={}).status_code == 404


def test_gateway_counts_requests_per_key_by_hash(app, client):
    client.models.list()
    gw = scrape(f"http://127.0.0.1:{app['ports']['gateway']}/metrics")
    kid = key_id(KEY.encode())
    assert total(gw, "dsv4_gateway_key_requests_total", key_id=kid, status="200") >= 1
    page = httpx.get(f"http://127.0.0.1:{app['ports']['gateway']}/metrics", timeout=30).text
    assert KEY not in page and ADMIN_KEY not in page


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
    match = {"route": "/v1/completions", "model_name": MODEL}
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
    # Every registered patch has a line, an outcome or why the target's page has none.
    assert list(report["patches"]["app"]) == registered_patches()
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
