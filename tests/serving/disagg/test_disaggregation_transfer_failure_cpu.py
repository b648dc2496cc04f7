"""A prefill engine that dies after handing a request over: decode recomputes the prompt and
answers with the right text, rather than failing the request (vLLM's default) or decoding
on KV it never received.

Two of vLLM's own OpenAI servers on the CPU, started from the engine arguments the preset's
`disaggregation` section gives each role (serving/disagg/configs.py), KV over NIXL in host
memory, on the golden model's "numeric" variant (its attention reaches the logits, so text
built on missing KV would differ). The client plays Ray Serve LLM's decode server: prefill
with one token and `do_remote_decode`, then decode with the `kv_transfer_params` it
returned. The Ray app itself is served disaggregated in test_disaggregation_cpu.py."""

import os
import random
import signal
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from serving.bench.targets import free_ports
from serving.config.preset import load_preset, parse_set
from serving.config.vllm_args import to_cli_args
from serving.disagg.configs import pd_llm_configs
from serving.golden import GoldenDesign, write_golden_model
from tests.support.parallel import BIND
from tests.support.prom_samples import scrape, total
from tests.support.server_process import PYTHON, running_server

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1200)]

MAX_TOKENS = 24
# This worker's core first (tests/support/parallel.py), then the others.
_OWN = os.environ.get(BIND) or "0"
CORES = [_OWN, *(str(c) for c in sorted(os.sched_getaffinity(0)) if str(c) != _OWN)]
BY_SOURCE = "vllm:prompt_tokens_by_source_total"
SETS = ("serving.path=ingress", "disaggregation.connector=nixl", "disaggregation.mtp_on=decode")


def _prompt(words: int, seed: int) -> str:
    vocab, rng = GoldenDesign().words, random.Random(seed)
    return " ".join(rng.choice(vocab) for _ in range(words))


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory):
    """{role: (base URL, server process)} for the prefill and decode servers, and
    "decode_log": the decode server's log."""
    model = write_golden_model(
        tmp_path_factory.mktemp("golden-numeric"), GoldenDesign(variant="numeric")
    )
    preset = load_preset("cpu-tiny", [parse_set(s) for s in SETS])
    configs = pd_llm_configs(preset, str(model))
    logs = tmp_path_factory.mktemp("pd-logs")
    http, side = free_ports(2), free_ports(2)
    with ExitStack() as stack:
        started = {}
        for i, role in enumerate(("prefill", "decode")):
            config = configs[f"{role}_config"]
            cmd = [PYTHON, "-m", "vllm.entrypoints.openai.api_server"]
            loading = config["model_loading_config"]
            cmd += ["--model", loading["model_source"], "--served-model-name", loading["model_id"]]
            cmd += to_cli_args(config["engine_kwargs"])
            cmd += ["--host", "127.0.0.1", "--port", str(http[i])]
            env = {
                **config["runtime_env"]["env_vars"],
                "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",
                "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side[i]),
                # One core each, as on two machines: with both engines bound to one core
                # decode's NIXL read never completed (seen on vLLM 0.32 CPU, NIXL 1.5.1).
                BIND: CORES[i % len(CORES)],
            }
            url = f"http://127.0.0.1:{http[i]}"
            log = logs / f"{role}.log"
            proc = stack.enter_context(running_server(cmd, f"{url}/health", log, env, timeout=900))
            started[role] = (url, proc)
        started["decode_log"] = logs / "decode.log"
        _first_hand_over_moves(started)
        yield started


def _first_hand_over_moves(started: dict, tries: int = 3) -> None:
    """Hand a short prompt over until decode reads it over NIXL, not judged. Decode's first
    read starts the NIXL handshake, whose metadata reply vLLM waits 5 s for
    (nixl/base_worker.py); on a busy 2-core CI run it timed out, and decode recomputed the
    prompt, as configured. A failed handshake is tried again with the next request."""
    (prefill, _), (decode, _) = started["prefill"], started["decode"]
    for attempt in range(tries):
        prompt = _prompt(20, seed=100 + attempt)  # a new prompt: no prefix-cache hit
        _, params = _reference_and_hand_over(prefill, prompt)
        before = _by_source(decode)
        _complete(decode, prompt, 2, params)
        if _by_source(decode)["external_kv_transfer"] > before["external_kv_transfer"]:
            return
    pytest.fail(f"decode never read a prompt over NIXL in {tries} hand-overs:\n"
                + nixl_lines(started["decode_log"]))  # fmt: skip


def nixl_lines(log: Path, last: int = 30) -> str:
    """The last lines of a server log that speak of NIXL or an error (vLLM logs a failed
    handshake or read as "NIXL transfer failure: <kind>")."""
    text = log.read_text(errors="replace").splitlines()
    return "\n".join([x for x in text if "nixl" in x.lower() or "error" in x.lower()][-last:])


def _complete(url: str, prompt: str, max_tokens: int, params: dict | None = None) -> httpx.Response:
    body = {
        "model": "dsv4-golden",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    if params is not None:
        body["kv_transfer_params"] = params
    return httpx.post(f"{url}/v1/completions", json=body, timeout=300)


def _text(reply: httpx.Response) -> str:
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]["text"]


def _reference_and_hand_over(prefill_url: str, prompt: str) -> tuple[str, dict]:
    """The prefill engine's own answer (decode's prefix cache never sees the prompt), then
    what Ray Serve LLM's decode server asks of it: one token, the KV kept for decode."""
    reference = _text(_complete(prefill_url, prompt, MAX_TOKENS))
    asked = {"do_remote_decode": True, "do_remote_prefill": False}
    asked |= dict.fromkeys(("remote_engine_id", "remote_block_ids", "remote_host", "remote_port"))
    reply = _complete(prefill_url, prompt, 1, asked)
    _text(reply)
    params = reply.json()["kv_transfer_params"]
    assert params["do_remote_prefill"] and params["remote_block_ids"], params
    return reference, params


def _by_source(url: str) -> dict[str, float]:
    samples = scrape(f"{url}/metrics")
    sources = ("local_compute", "external_kv_transfer")
    return {s: total(samples, BY_SOURCE, source=s) for s in sources}


def _tokens(url: str, prompt: str) -> int:
    body = {"model": "dsv4-golden", "prompt": prompt}
    return len(httpx.post(f"{url}/tokenize", json=body, timeout=30).json()["tokens"])


def test_decode_reads_a_handed_over_prompt_over_nixl(engines):
    (prefill, _), (decode, _) = engines["prefill"], engines["decode"]
    prompt = _prompt(300, seed=1)
    reference, params = _reference_and_hand_over(prefill, prompt)
    before = _by_source(decode)
    assert _text(_complete(decode, prompt, MAX_TOKENS, params)) == reference
    after = _by_source(decode)
    # Decode computed at most the prompt's last token: the rest came over NIXL.
    moved = after["external_kv_transfer"] - before["external_kv_transfer"]
    assert moved >= _tokens(decode, prompt) - 1, (before, after, nixl_lines(engines["decode_log"]))


def test_decode_recomputes_a_prompt_whose_prefill_engine_died(engines):
    (prefill, prefill_proc), (decode, _) = engines["prefill"], engines["decode"]
    prompt = _prompt(300, seed=2)
    reference, params = _reference_and_hand_over(prefill, prompt)
    os.killpg(prefill_proc.pid, signal.SIGKILL)  # the whole server: API process and engine
    prefill_proc.wait(timeout=30)
    before = _by_source(decode)
    assert _text(_complete(decode, prompt, MAX_TOKENS, params)) == reference
    after = _by_source(decode)
    assert after["external_kv_transfer"] == before["external_kv_transfer"], (before, after)
    assert after["local_compute"] - before["local_compute"] >= _tokens(decode, prompt) - 1
