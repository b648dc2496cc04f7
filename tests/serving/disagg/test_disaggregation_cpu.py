"""Prefill/decode disaggregation served by the Ray Serve app on the CPU: `dsv4-serve up
cpu-tiny` with a `disaggregation` section (one prefill and one decode engine, KV over NIXL
in host memory, MTP k=2 on decode only) behind our ingress and gateway, through the
official openai client. The checkpoint is the golden model's "numeric" variant, whose
attention, compressor and indexer reach the logits, so decode text built on wrong KV would
differ; the reference is one engine alone on the same checkpoint, started once the app has
stopped. Where the two texts part, the disaggregated continuation is judged token by token
by that engine teacher-forced on it: on CPUs without AVX-512 (eager ops) the bf16 sums
differ with batch shapes, and this checkpoint's greedy decode has near-ties that such
rounding reorders.

The app is asked everything in one module fixture (the texts, the counters, a prefill
replica killed mid-prompt), and the tests judge what it answered.

Every engine here runs one OpenMP thread on one core (VLLM_CPU_OMP_THREADS_BIND): vLLM gives
a NIXL engine two threads where a plain engine gets one, and bf16 sums differ with the
thread count."""

import contextlib
import json
import os
import random
import re
import signal
import threading
import time

import openai
import psutil
import pytest

from serving.bench.targets import RAY_REPORT_INTERVAL_ENV
from serving.golden import GoldenDesign, write_golden_model
from serving.records import disaggregation_table
from serving.records import store as records
from tests.support.child_result import child_result
from tests.support.parallel import BIND
from tests.support.prom_samples import scrape, total
from tests.support.ray_app import ray_app, ray_pids

# The app's whole run, then the reference engine, happen in the first test's setup: on an
# AVX2 CPU, where DSV4's ops run eager, more than the suite's 15 minutes may go to them.
pytestmark = [pytest.mark.ray, pytest.mark.timeout(1800)]

KEY = "test-key-pd-0123456789"
MODEL = "dsv4-golden"
MAX_TOKENS = 24
# The core this xdist worker binds its engines to (tests/support/parallel.py), else 0.
THREADS = {BIND: os.environ.get(BIND) or "0"}
EXTERNAL = "ray_vllm_prompt_tokens_by_source_total"
# How far below the top token a continuation token may be: what bf16 rounding moves a
# log-prob by, at most 0.499 on the one-ulp-jittered checkpoint (docs/plugin.md).
NEAR_TIE = 0.5


def prompts() -> dict[str, str]:
    words, rng = GoldenDesign().words, random.Random(1)
    return {
        "short": " ".join(words[10:12]),
        "mid": " ".join(rng.choice(words) for _ in range(40)),
        "medium": " ".join(rng.choice(words) for _ in range(300)),
        # over max_num_batched_tokens (2048): prefill takes two chunks
        "long": " ".join(rng.choice(words) for _ in range(2600)),
    }


@pytest.fixture(scope="module")
def numeric_dir(tmp_path_factory: pytest.TempPathFactory):
    return write_golden_model(
        tmp_path_factory.mktemp("golden-numeric"), GoldenDesign(variant="numeric")
    )


# A prompt no other test sends (a prefix-cache hit on prefill would answer at once), long
# enough that prefill is still computing it when its replica is killed.
KILLED = "killed"


def killed_prompt() -> str:
    words, rng = GoldenDesign().words, random.Random(2)
    return " ".join(rng.choice(words) for _ in range(2000))


def _served(base: str) -> dict[str, openai.types.Completion]:
    client = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0, timeout=600)
    return {
        name: client.completions.create(
            model=MODEL,
            prompt=text,
            max_tokens=MAX_TOKENS,
            temperature=0,
            extra_body={"ignore_eos": True},
        )
        for name, text in prompts().items()
    }


def _counted(ray_port: int, prompt_tokens: int) -> dict:
    """The Ray app's scrape once both engines' by-source counters reached ``prompt_tokens``:
    Ray exports each engine's counters every few seconds, prefill's and decode's apart."""
    deadline = time.monotonic() + 120
    while True:
        samples = scrape(f"http://127.0.0.1:{ray_port}/metrics")
        moved = total(samples, EXTERNAL, source="external_kv_transfer")
        computed = total(samples, EXTERNAL, source="local_compute")
        if min(moved, computed) >= prompt_tokens or time.monotonic() > deadline:
            return samples
        time.sleep(2)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, numeric_dir) -> dict:
    """Everything asked of the app, and what it answered. The app stops before any judging:
    each NIXL engine's worker keeps a core busy while idle (NIXL's UCX progress thread), so
    a reference engine started beside it crawled (past 15 minutes on a busy 2-core CI run)."""
    sets = [
        "serving.path=ingress",
        "disaggregation.connector=nixl",
        "disaggregation.mtp_on=decode",
        f"model.source={numeric_dir}",
        f'env.{BIND}="{THREADS[BIND]}"',
    ]
    extra = [arg for item in sets for arg in ("--set", item)]
    log = tmp_path_factory.mktemp("pd-app") / "up.log"
    with pytest.MonkeyPatch.context() as env:
        # Ray's processes report metrics every 10 s by default; on a busy machine the
        # engines' last counters then reached /metrics about a minute late.
        env.setenv(RAY_REPORT_INTERVAL_ENV, "1000")
        with ray_app(log, KEY, extra=extra) as app:
            served = _served(app["base"])
            prompt_tokens = sum(answer.usage.prompt_tokens for answer in served.values())
            samples = _counted(app["ports"]["ray"], prompt_tokens)
            killed = _kill_prefill_while_it_computes(app)
            log_text = app["log"].read_text()
    return {
        "log": log_text,
        "served": served,
        "prompt_tokens": prompt_tokens,
        "samples": samples,
        "killed": killed,
    }


@pytest.fixture(scope="module")
def reference(numeric_dir, run) -> dict[str, dict]:
    """Per prompt: one engine's text and a verdict for each served text that parts from it
    (tests/support/greedy_reference_runner.py; one engine run, after the app stopped)."""
    served = {name: [answer.choices[0].text] for name, answer in run["served"].items()}
    killed = run["killed"]
    served[KILLED] = [killed["outcome"]["text"]] if "text" in killed["outcome"] else []
    served["medium"].append(killed["after"]["text"])
    text_of = {**prompts(), KILLED: killed_prompt()}
    cases = [{"prompt": text_of[name], "served": texts} for name, texts in served.items()]
    out = child_result(
        "tests.support.greedy_reference_runner",
        str(numeric_dir),
        json.dumps(cases),
        str(MAX_TOKENS),
        env=THREADS,
    )
    judged = {
        name: {"reference": result["reference"], "served": texts, "verdicts": result["verdicts"]}
        for (name, texts), result in zip(served.items(), out, strict=True)
    }
    print("parted from the reference:", {n: j["verdicts"] for n, j in judged.items()})
    records.write(disaggregation_table.RECORD, figures(run, judged), disaggregation_table.COMMAND)
    return judged


def figures(run: dict, judged: dict) -> dict:
    """What docs/disaggregation.md's CPU table shows (serving/records/disaggregation_table.py);
    `make record-disaggregation` keeps it only when every test here passed."""
    samples, killed = run["samples"], run["killed"]

    def text(name: str) -> dict:
        served, expected = judged[name]["served"][0], judged[name]["reference"]
        verdict = judged[name]["verdicts"][0]
        if verdict is None:
            return {"parted_at": None, "max_gap": None}
        words, expected_words = served.split(), expected.split()
        pairs = zip(words, expected_words, strict=False)
        common = min(len(words), len(expected_words))
        parted = next((i for i, (a, b) in enumerate(pairs) if a != b), common)
        return {"parted_at": parted + 1, "max_gap": max(verdict["gaps"])}

    return {
        "prompts": {name: a.usage.prompt_tokens for name, a in run["served"].items()},
        "prompt_tokens": run["prompt_tokens"],
        "texts": {name: text(name) for name in prompts()},
        "kv": {
            "moved_tokens": total(samples, EXTERNAL, source="external_kv_transfer"),
            "computed_tokens": total(samples, EXTERNAL, source="local_compute"),
            "transfers": total(samples, "ray_vllm_nixl_xfer_time_seconds_count"),
            "bytes": total(samples, "ray_vllm_nixl_bytes_transferred_sum"),
            "failed": total(samples, "ray_vllm_nixl_num_failed_transfers_total"),
        },
        "killed_prefill": {
            "status": killed["outcome"].get("status"),
            "answered_s": round(killed["answered_s"], 1),
            "whole_again_s": round(killed["whole_again_s"]),
        },
    }


def test_the_app_runs_prefill_and_decode_engines_behind_the_ingress(run):
    assert "serving path ingress" in run["log"]
    for deployment in ("Prefill:dsv4-golden", "Decode:dsv4-golden", "Dsv4Ingress"):
        assert deployment in run["log"]


def assert_one_engine_s_text(judged: dict, index: int) -> None:
    """The ``index``-th text served for a prompt is the reference's, or where they part a
    continuation greedy up to a near-tie."""
    text, verdict, expected = (
        judged["served"][index],
        judged["verdicts"][index],
        judged["reference"],
    )
    if text == expected:
        return
    assert verdict is not None, (text, expected)
    assert verdict["tokens"] == MAX_TOKENS, verdict
    assert max(verdict["gaps"]) <= NEAR_TIE, (text, expected, verdict)


@pytest.mark.parametrize("name", list(prompts()))
def test_disaggregated_text_is_one_engine_s_text(run, reference, name: str):
    assert run["served"][name].usage.completion_tokens == MAX_TOKENS
    assert_one_engine_s_text(reference[name], 0)


def test_decode_took_every_prompt_token_from_prefill_over_nixl(run):
    samples, prompt_tokens = run["samples"], run["prompt_tokens"]
    assert prompt_tokens > 2600
    assert total(samples, EXTERNAL, source="external_kv_transfer") == prompt_tokens
    # Prefill computed each prompt once; decode computed none of it.
    assert total(samples, EXTERNAL, source="local_compute") == prompt_tokens
    assert total(samples, "ray_vllm_nixl_xfer_time_seconds_count") >= len(run["served"])
    assert total(samples, "ray_vllm_nixl_bytes_transferred_sum") > 0


def test_the_kv_transfer_rules_find_their_series_and_each_engine_s_role(run):
    """What serving/monitoring/rules.py reads under P/D, in the Ray app's own scrape: the
    NIXL histograms, and for each engine's ReplicaId a Ray Serve series whose replica and
    deployment give its role (dsv4:serve_replica_role:info)."""
    from serving.monitoring.rules import (
        NIXL_BYTES,
        NIXL_XFER_SECONDS,
        ROLE_DEPLOYMENTS,
        SERVE_REPLICA_SERIES,
    )

    samples = run["samples"]
    names = {name for name, _ in samples}
    for suffix in ("bucket", "count"):
        assert f"ray_vllm_{NIXL_XFER_SECONDS}_{suffix}" in names
    for suffix in ("sum", "count"):
        assert f"ray_vllm_{NIXL_BYTES}_{suffix}" in names
    # Nothing failed here: Ray exports a counter only once it moved.
    assert total(samples, "ray_vllm_nixl_num_failed_transfers_total") == 0
    deployments = {
        dict(labels)["replica"]: dict(labels)["deployment"]
        for name, labels in samples
        if name in SERVE_REPLICA_SERIES and dict(labels).get("replica")
    }
    engines = {
        dict(labels)["ReplicaId"]
        for name, labels in samples
        if name == "ray_vllm_request_queue_time_seconds_bucket"
    }
    roles = {
        role
        for replica in engines
        for role, pattern in ROLE_DEPLOYMENTS.items()
        if re.fullmatch(pattern, deployments.get(replica, ""))
    }
    assert len(engines) == 2 and roles == {"prefill", "decode"}, (engines, deployments)
    # Transfers are recorded by the engine that reads the KV: decode.
    readers = {
        dict(labels)["ReplicaId"]
        for (name, labels), value in samples.items()
        if name == f"ray_vllm_{NIXL_XFER_SECONDS}_count" and value > 0
    }
    assert [deployments[r].split(":")[0] for r in readers] == ["Decode"]


def _prefill_replica(app) -> psutil.Process:
    """The app's one prefill replica process (Ray names it after its deployment)."""
    found, titles = [], []
    for pid in ray_pids() - app["ray_before"]:
        try:
            proc = psutil.Process(pid)
            title = " ".join(proc.cmdline())
        except psutil.NoSuchProcess:
            continue
        titles.append(title)
        # "ray::SERVE_REPLICA::<app>#Prefill:<model>#..." while it starts, then
        # "ray::ServeReplica:<app>:Prefill:<model>..." (Ray's actor process titles).
        if re.match(r"ray::(SERVE_REPLICA::\S+#|ServeReplica:[^:]+:)Prefill:", title):
            found.append(proc)
    assert len(found) == 1, titles
    return found[0]


def _complete(client: openai.OpenAI, prompt: str, outcome: dict) -> None:
    try:
        answer = client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0,
            extra_body={"ignore_eos": True},
        )  # fmt: skip
        outcome["text"] = answer.choices[0].text
    except openai.APIStatusError as exc:
        outcome["status"], outcome["body"] = exc.status_code, exc.response.text
    except openai.APIError as exc:  # no HTTP answer at all: not a clean error
        outcome["broken"] = repr(exc)


# CPU-seconds the prefill replica's processes spend on the prompt before the kill: a
# request still on its way spends none, so the kill lands while prefill computes it.
COMPUTING_CPU_S = 1.0


def _cpu_seconds(replica: psutil.Process) -> float:
    spent = 0.0
    for proc in [replica, *replica.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            spent += times.user + times.system
    return spent


def _kill_prefill_while_it_computes(app) -> dict:
    """SIGKILL the prefill replica's process (and its engine) while it computes a 2000-token
    prompt, as a node loss would; then ask again until Serve's new prefill replica answers.
    What the client got, when, how far prefill had got, and whether the replica was
    replaced."""
    client = openai.OpenAI(base_url=app["base"] + "/v1", api_key=KEY, max_retries=0, timeout=900)
    replica = _prefill_replica(app)
    outcome: dict = {}
    request = threading.Thread(target=_complete, args=(client, killed_prompt(), outcome))
    idle = _cpu_seconds(replica)
    request.start()
    deadline = time.monotonic() + 120
    while _cpu_seconds(replica) - idle < COMPUTING_CPU_S and time.monotonic() < deadline:
        time.sleep(0.05)
    computing = _cpu_seconds(replica) - idle
    for proc in [*replica.children(recursive=True), replica]:  # the engine core with it
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    request.join(900)
    answered = time.monotonic() - killed
    # Serve replaces the replica (a new engine start); then the app is whole again.
    deadline = time.monotonic() + 600
    while True:
        after: dict = {}
        _complete(client, prompts()["medium"], after)
        if "text" in after or time.monotonic() > deadline:
            break
        time.sleep(5)
    return {
        "outcome": outcome,
        "computing_cpu_s": computing,
        "hung": request.is_alive(),
        "answered_s": answered,
        "whole_again_s": time.monotonic() - killed,
        "after": after,
        "replaced": "text" in after and _prefill_replica(app).pid != replica.pid,
    }


def test_a_prefill_replica_killed_mid_prompt_gives_a_clean_error_and_is_replaced(run, reference):
    """Killed while it computes the prompt (it had spent CPU time on it), the prefill replica
    takes the request with it: the client gets a clean HTTP error, not text (the request is
    not retried); Serve starts a new prefill replica and the app answers rightly again."""
    killed = run["killed"]
    outcome, after = killed["outcome"], killed["after"]
    assert killed["computing_cpu_s"] >= COMPUTING_CPU_S, "the kill came before prefill computed"
    assert not killed["hung"] and "broken" not in outcome, outcome
    assert "text" not in outcome, "a prefill killed mid-prompt cannot have answered"
    assert outcome["status"] >= 500 and json.loads(outcome["body"])["error"], outcome
    assert "text" in after, after
    assert killed["replaced"]
    assert_one_engine_s_text(reference["medium"], 1)
    # What the client got and when (pytest -s shows it; docs/disaggregation.md quotes it).
    print(f"killed prefill: HTTP {outcome['status']} {killed['answered_s']:.1f} s after the kill, "
          f"whole again {killed['whole_again_s']:.0f} s after it")  # fmt: skip
