"""The rules and dashboard on a live Prometheus (Debian package, 127.0.0.1) scraping
the real running app: the Ray Serve app on the golden model (``ray_vllm_*`` and the
gateway) and vLLM's own server on a golden model whose draft agrees 20% of the time
(``vllm:*``). The Ray app runs the speculation guard (adaptive) and prefix routing (one
replica: every keyed pick is an affinity pick), so their gauges, counters, rules and
dashboard panels are read live too."""

import asyncio
import json
import shutil
import time
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from serving.chart import derived_files
from serving.config.vllm_args import to_cli_args
from serving.golden import GoldenDesign, write_golden_model
from serving.golden.golden_engine import (
    DEFAULT_SPEC_K,
    golden_engine_kwargs,
    mtp_config,
)
from serving.local.processes import free_port
from serving.monitoring.dashboard import DISAGGREGATION_ROW, dashboard, queries
from serving.monitoring.metrics_page import RAY_EXPORT_PERIOD_S
from tests.support.golden_prompts import engine_env, prompt_of
from tests.support.prom_samples import scrape, total
from tests.support.ray_app import ray_app
from tests.support.server_process import PYTHON, running_server

pytestmark = pytest.mark.ray
PROMETHEUS = shutil.which("prometheus")
KEY = "monitoring-test-key"
GOOD = "dsv4-golden"
WEAK = "dsv4-golden-weak"
WEAK_AGREEMENT = 0.2
SHORT_FOR = "3s"  # the test copy of the rules only: alerts go pending/firing within seconds
ACCEPTED = "ray_vllm_spec_decode_num_accepted_tokens_total"
DRAFTED = "ray_vllm_spec_decode_num_draft_tokens_total"
DRAFTS = "ray_vllm_spec_decode_num_drafts_total"
# One calibration cycle (6 steps), so the app's first requests run at the guard's k; prefix
# routing, so the router's counter is scraped too.
APP_SETS = [
    "--set",
    "speculation.guard.mode=adaptive",
    "--set",
    "speculation.guard.calibration_cycles=1",
    "--set",
    "serving.routing=prefix",
]


def _test_rules(path: Path) -> Path:
    groups = yaml.safe_load(derived_files.RULES_FILE.read_text())
    for group in groups["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rule["for"] = SHORT_FOR
    path.write_text(yaml.safe_dump(groups, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    assert PROMETHEUS, "prometheus missing: `make deps` installs the Debian package"
    tmp = tmp_path_factory.mktemp("monitoring-live")
    weak_dir = write_golden_model(tmp / "weak", GoldenDesign(draft_agreement=WEAK_AGREEMENT))
    vllm_port, prom_port = free_port(), free_port()
    vllm_cmd = [PYTHON, "-m", "vllm.entrypoints.openai.api_server"]
    vllm_cmd += to_cli_args(
        golden_engine_kwargs(
            weak_dir, served_model_name=WEAK, speculative_config=mtp_config(DEFAULT_SPEC_K)
        )
    )
    vllm_cmd += ["--host", "127.0.0.1", "--port", str(vllm_port)]
    vllm_health = f"http://127.0.0.1:{vllm_port}/health"
    with (
        running_server(vllm_cmd, vllm_health, tmp / "vllm.log", engine_env()),
        ray_app(tmp / "up.log", KEY, extra=APP_SETS) as app,
    ):
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(_test_rules(tmp / "rules.yaml"))],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
                for job, port in [
                    ("ray", app["ports"]["ray"]),
                    ("gateway", app["ports"]["gateway"]),
                    ("vllm", vllm_port),
                ]
            ],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        prom_cmd = [
            PROMETHEUS,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ]
        prom = f"http://127.0.0.1:{prom_port}"
        with running_server(prom_cmd, f"{prom}/-/ready", tmp / "prometheus.log", {}, 120):
            yield {
                "prom": prom,
                "app": app,
                "vllm": f"http://127.0.0.1:{vllm_port}/v1",
                "tmp": tmp,
            }


def query(prom: str, expr: str) -> list[dict]:
    body = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=30).json()
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def wait_for(what: str, check, timeout: float = 120, every: float = 1):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


def _burst(base_url: str, api_key: str, model: str, prompts: list[str], max_tokens: int):
    async def run():
        client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=300)
        await asyncio.gather(
            *[
                client.completions.create(
                    model=model, prompt=p, max_tokens=max_tokens, temperature=0
                )
                for p in prompts
            ]
        )
        await client.close()

    asyncio.run(run())


def test_recorded_acceptance_rate_equals_engine_counters(stack, golden_design: GoldenDesign):
    prom, ray_metrics = stack["prom"], f"http://127.0.0.1:{stack['app']['ports']['ray']}/metrics"
    prompts = [prompt_of(golden_design, 3, seed=s) for s in range(8)]

    def settled():  # engine counters stopped moving and Prometheus holds their last values
        engine = scrape(ray_metrics)
        counters = [total(engine, n, model_name=GOOD) for n in (ACCEPTED, DRAFTED, DRAFTS)]
        stored = [
            sum(float(r["value"][1]) for r in query(prom, f'{n}{{model_name="{GOOD}"}}'))
            for n in (ACCEPTED, DRAFTED, DRAFTS)
        ]
        return counters if counters == stored and counters[1] > 0 else None

    def stable_after(previous: list[float]):
        # Ray exports engine metrics every few seconds: wait for the burst to show up,
        # then for two readings one export period apart to agree.
        first = settled()
        if not first or first == previous:
            return None
        time.sleep(RAY_EXPORT_PERIOD_S)
        return first if settled() == first else None

    # First make the counters exist in Prometheus, then measure a burst on top of them.
    _burst(stack["app"]["base"] + "/v1", KEY, GOOD, prompts[:2], 24)
    before = wait_for("counters to appear in Prometheus", lambda: stable_after([]), every=3)
    _burst(stack["app"]["base"] + "/v1", KEY, GOOD, prompts, 40)
    now = wait_for("the burst in Prometheus", lambda: stable_after(before))
    time.sleep(3)  # a rule evaluation after the last scrape

    def first_in_window(name: str) -> float:
        series = query(prom, f'{name}{{model_name="{GOOD}"}}[5m]')
        return sum(float(s["values"][0][1]) for s in series)

    # rate() over the counters shares sample times, so a recorded ratio is the ratio of
    # the engine's own counter increases over the window.
    accepted, drafted, drafts = (
        n - first_in_window(m) for n, m in zip(now, (ACCEPTED, DRAFTED, DRAFTS), strict=True)
    )
    recorded = query(prom, f'dsv4:spec_decode_acceptance_rate:ratio5m{{model_name="{GOOD}"}}')
    assert len(recorded) == 1
    value = float(recorded[0]["value"][1])
    print(f"recorded acceptance {value:.4f}, engine counters {accepted / drafted:.4f}")
    assert value == pytest.approx(accepted / drafted, abs=0.005)
    assert value > 0.9  # the golden draft agrees fully, whatever k the guard drafts
    length = query(prom, f'dsv4:spec_decode_acceptance_length:ratio5m{{model_name="{GOOD}"}}')
    assert float(length[0]["value"][1]) == pytest.approx(1 + accepted / drafts, abs=0.01)
    assert float(length[0]["value"][1]) > 1.9  # drafts of 1 or 2 tokens, all accepted


def test_the_guards_gauges_and_rules_read_live(stack):
    prom = stack["prom"]
    ks = query(prom, f'dsv4_spec_guard_k{{model_name="{GOOD}"}}')
    assert len(ks) == 1 and 0 <= float(ks[0]["value"][1]) <= DEFAULT_SPEC_K
    (k_max,) = query(prom, f'dsv4_spec_guard_k_max{{model_name="{GOOD}"}}')
    assert float(k_max["value"][1]) == DEFAULT_SPEC_K
    first = query(prom, f'dsv4_spec_guard_acceptance{{model_name="{GOOD}", position="0"}}')
    assert float(first[0]["value"][1]) > 0.8  # it sees the full agreement too
    reasons = {
        r["metric"]["reason"]
        for r in query(prom, f'dsv4_spec_guard_decisions_total{{model_name="{GOOD}"}}')
    }
    assert "calibrate" in reasons
    (recorded,) = query(prom, f'dsv4:spec_guard_k:max{{model_name="{GOOD}"}}')
    assert 0 <= float(recorded["value"][1]) <= DEFAULT_SPEC_K
    off = query(prom, f'dsv4:spec_guard_drafting_off_seconds:min{{model_name="{GOOD}"}}')
    assert len(off) == 1 and float(off[0]["value"][1]) >= 0
    threshold = query(prom, f'dsv4:threshold:guard_off_alert_seconds{{model_name="{GOOD}"}}')
    assert float(threshold[0]["value"][1]) == 600


def test_acceptance_collapse_alert_fires_for_the_weak_draft(stack, golden_design: GoldenDesign):
    prompts = [prompt_of(golden_design, 3, seed=100 + s) for s in range(8)]
    _burst(stack["vllm"], "unused", WEAK, prompts, 48)

    def collapse_alerts():
        alerts = httpx.get(f"{stack['prom']}/api/v1/alerts", timeout=30).json()["data"]["alerts"]
        (stack["tmp"] / "alerts.json").write_text(json.dumps(alerts, indent=1))
        hits = [
            a
            for a in alerts
            if a["labels"]["alertname"] == "DSV4MTPAcceptanceCollapse"
            and a["labels"].get("model_name") == WEAK
        ]
        return (hits, alerts) if hits else None

    hits, alerts = wait_for("DSV4MTPAcceptanceCollapse on the weak model", collapse_alerts)
    assert hits[0]["state"] in ("pending", "firing")
    rate = query(stack["prom"], f'dsv4:spec_decode_acceptance_rate:ratio5m{{model_name="{WEAK}"}}')
    print(f"weak draft acceptance {float(rate[0]['value'][1]):.3f}")
    print("active alerts:", sorted({(a["labels"]["alertname"], a["state"]) for a in alerts}))
    assert float(rate[0]["value"][1]) < 0.3
    fired_for_good = [
        a
        for a in alerts
        if a["labels"]["alertname"] == "DSV4MTPAcceptanceCollapse"
        and a["labels"].get("model_name") == GOOD
    ]
    assert fired_for_good == []


def test_every_dashboard_query_returns_data(stack):
    # Neither engine here serves disaggregated: the KV transfer row has nothing to show
    # (tests/serving/disagg/test_disaggregation_cpu.py reads those series from a P/D app).
    board = queries(dashboard(), concrete=True, skip_rows=(DISAGGREGATION_ROW,))
    empty = [q for q in board if not query(stack["prom"], q)]
    assert empty == []


def test_template_variables_find_both_models_and_their_replicas(stack):
    models = {r["metric"]["model_name"] for r in query(stack["prom"], "dsv4:engines:count")}
    assert models == {GOOD, WEAK}
    replicas = query(stack["prom"], "dsv4:generation_tokens:replica_rate5m")
    assert {r["metric"]["model_name"] for r in replicas} == {GOOD, WEAK}
    # Ray's ReplicaId for the app's engine, the scrape instance for vLLM's own server.
    by_model = {r["metric"]["model_name"]: r["metric"]["replica"] for r in replicas}
    assert by_model[WEAK].startswith("127.0.0.1:") and not by_model[GOOD].startswith("127.")
