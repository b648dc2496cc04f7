"""Chunked prefill: a 700-token prompt through a 256-token step budget."""

import os
from pathlib import Path

import pytest

from serving.golden import GoldenDesign
from serving.golden_engine import golden_engine_kwargs
from tests.support.golden_prompts import engine_env, prompt_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def llm(golden_dir: Path):
    os.environ.update(engine_env())
    from vllm import LLM

    engine = LLM(
        **golden_engine_kwargs(golden_dir, max_num_batched_tokens=256, enable_chunked_prefill=True)
    )
    yield engine
    engine.llm_engine.engine_core.shutdown()


def test_long_prompts_are_prefilled_in_chunks(llm, golden_design: GoldenDesign):
    from vllm import SamplingParams

    scheduler = llm.llm_engine.vllm_config.scheduler_config
    assert scheduler.enable_chunked_prefill and scheduler.max_num_batched_tokens == 256
    prompts = [prompt_of(golden_design, n, seed=n) for n in (700, 300, 3)]
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=30), use_tqdm=False)
    assert [o.outputs[0].text for o in outs] == [golden_design.continuation(p, 30) for p in prompts]
