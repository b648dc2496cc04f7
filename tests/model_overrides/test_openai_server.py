"""vLLM's own OpenAI server on the golden DSV4 with MTP (k=2, as `make serve`), through
the official ``openai`` client."""

from pathlib import Path

import openai
import pytest

from serving.golden import GoldenDesign
from serving.golden.golden_engine import (
    DEFAULT_SPEC_K,
    SERVED_MODEL_NAME,
)
from tests.support.golden_prompts import prompt_of
from tests.support.golden_server import golden_vllm_server
from tests.support.prom_samples import scrape, total

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def client(golden_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    with golden_vllm_server(golden_dir, tmp_path_factory.mktemp("vllm-server")) as base:
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)


def _metrics_url(client) -> str:
    return str(client.base_url).replace("/v1/", "/metrics")


def test_models_lists_the_golden_model(client):
    assert [m.id for m in client.models.list().data] == [SERVED_MODEL_NAME]


@pytest.mark.parametrize("length", [1, 6, 300])
def test_completion_is_the_golden_text(client, golden_design: GoldenDesign, length: int):
    prompt = prompt_of(golden_design, length, seed=length)
    out = client.completions.create(
        model=SERVED_MODEL_NAME, prompt=prompt, max_tokens=10, temperature=0
    )
    assert out.choices[0].text == golden_design.continuation(prompt, 10)
    assert out.usage.completion_tokens == 10
    assert out.usage.prompt_tokens == length


def test_streamed_completion_joins_to_the_golden_text(client, golden_design: GoldenDesign):
    prompt = prompt_of(golden_design, 4, seed=9)
    stream = client.completions.create(
        model=SERVED_MODEL_NAME, prompt=prompt, max_tokens=16, temperature=0, stream=True
    )
    assert "".join(c.choices[0].text for c in stream) == golden_design.continuation(prompt, 16)


def test_chat_reply_is_the_golden_text(client, golden_design: GoldenDesign):
    words = golden_design.words
    out = client.chat.completions.create(
        model=SERVED_MODEL_NAME,
        messages=[{"role": "user", "content": f"{words[10]} {words[3]}"}],
        max_tokens=5,
        temperature=0,
    )
    # vLLM's deepseek_v4 chat encoding ends the prompt in "</think>".
    assert out.choices[0].message.content == golden_design.chat_reply(5)
    assert out.usage.completion_tokens == 5


def test_mtp_counters_advance_with_full_acceptance(client, golden_design: GoldenDesign):
    drafted_name = "vllm:spec_decode_num_draft_tokens_total"
    accepted_name = "vllm:spec_decode_num_accepted_tokens_total"
    before = scrape(_metrics_url(client))
    prompt = prompt_of(golden_design, 3, seed=77)
    out = client.completions.create(
        model=SERVED_MODEL_NAME, prompt=prompt, max_tokens=40, temperature=0
    )
    assert out.choices[0].text == golden_design.continuation(prompt, 40)
    after = scrape(_metrics_url(client))
    expected = golden_design.expected_spec_counters(prompt, 40, DEFAULT_SPEC_K)
    drafted = total(after, drafted_name) - total(before, drafted_name)
    accepted = total(after, accepted_name) - total(before, accepted_name)
    assert drafted == expected["vllm:spec_decode_num_draft_tokens"]
    assert accepted == expected["vllm:spec_decode_num_accepted_tokens"] == drafted
