"""vLLM's own OpenAI server on the golden DSV4, through the official ``openai`` client."""

from pathlib import Path

import openai
import pytest

from serving.golden import GoldenDesign
from serving.golden_engine import SERVED_MODEL_NAME, golden_engine_kwargs, to_cli_args
from tests.golden_prompts import engine_env, prompt_of
from tests.server_process import PYTHON, free_port, running_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client(golden_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    port = free_port()
    cmd = [PYTHON, "-m", "vllm.entrypoints.openai.api_server"]
    cmd += to_cli_args(golden_engine_kwargs(golden_dir))
    cmd += ["--host", "127.0.0.1", "--port", str(port)]
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    with running_server(cmd, f"http://127.0.0.1:{port}/health", log, engine_env()):
        yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)


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
