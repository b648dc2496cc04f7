"""The real DSV4 code on vLLM's CPU backend, through ``vllm.LLM``, with the golden model."""

import json
import os
from pathlib import Path

import pytest

from serving.golden import GoldenDesign
from serving.golden.golden_engine import golden_engine_kwargs
from tests.support.golden_prompts import engine_env, prompt_of

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("load-audit")


@pytest.fixture(scope="module")
def llm(golden_dir: Path, audit_dir: Path):
    os.environ.update(engine_env(str(audit_dir)))
    from vllm import LLM

    engine = LLM(**golden_engine_kwargs(golden_dir))
    yield engine
    engine.llm_engine.engine_core.shutdown()


def _greedy(llm, prompts: list[str], max_tokens: int) -> list[str]:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    return [o.outputs[0].text for o in llm.generate(prompts, params, use_tqdm=False)]


@pytest.mark.parametrize("length,seed", [(1, 0), (2, 1), (5, 2), (17, 3)])
def test_exact_greedy_text(llm, golden_design: GoldenDesign, length: int, seed: int):
    prompt = prompt_of(golden_design, length, seed)
    assert _greedy(llm, [prompt], 12) == [golden_design.continuation(prompt, 12)]


def test_unknown_words_continue_from_the_first_word(llm, golden_design: GoldenDesign):
    prompt = "Hello there, world"
    assert _greedy(llm, [prompt], 4) == [golden_design.continuation(prompt, 4)]
    assert golden_design.continuation(prompt, 1) == " " + golden_design.words[0]


def test_batch_of_mixed_length_prompts(llm, golden_design: GoldenDesign):
    prompts = [prompt_of(golden_design, n, seed=n) for n in (1, 3, 40, 129, 260, 7, 513)]
    max_tokens = 20
    got = _greedy(llm, prompts, max_tokens)
    assert got == [golden_design.continuation(p, max_tokens) for p in prompts]


def test_long_prompt_crosses_compression_and_block_boundaries(llm, golden_design: GoldenDesign):
    # 700 prompt tokens + 90 generated: past the sliding window (128), several
    # compress-128 groups, ratio-4 groups, and the 256-token KV blocks.
    prompt = prompt_of(golden_design, 700, seed=42)
    assert _greedy(llm, [prompt], 90) == [golden_design.continuation(prompt, 90)]


def test_prompt_past_the_indexer_top_k(llm, golden_design: GoldenDesign):
    # 2300 tokens: the ratio-4 layers hold >512 compressed entries, so the indexer's
    # top-512 selection (fp8 logits, top-k transform) decides what attention reads. Past
    # the step budget, it is prefilled in chunks, and a 3-token prompt (no compressed
    # entry yet) is prefilled after it in the same step: without the
    # dsv4-cpu-indexer-last-request patch the indexer's gather fails and the engine dies.
    scheduler = llm.llm_engine.vllm_config.scheduler_config
    assert scheduler.enable_chunked_prefill and scheduler.max_num_batched_tokens < 2300
    prompts = [prompt_of(golden_design, 2300, seed=43), prompt_of(golden_design, 3, seed=3)]
    assert _greedy(llm, prompts, 8) == [golden_design.continuation(p, 8) for p in prompts]


def test_every_parameter_was_written_by_the_checkpoint(llm, audit_dir: Path, golden_dir: Path):
    reports = [json.loads(p.read_text()) for p in audit_dir.glob("DeepseekV4ForCausalLM-*.json")]
    assert reports, "the load audit wrote no report"
    report = reports[0]
    never_loaded = set(report["parameters"]) - set(report["loaded"])
    assert not never_loaded, f"parameters the checkpoint never wrote: {sorted(never_loaded)[:10]}"
    index = json.loads((golden_dir / "model.safetensors.index.json").read_text())
    # The target loader sees every checkpoint name; it keeps all but the MTP layer's.
    assert sorted(report["consumed"]) == sorted(index["weight_map"])
    assert len(report["loaded"]) == len(report["parameters"]) > 100


def test_the_workers_report_the_override_status(llm):
    """What the gateway publishes: asked of the engine's workers through vLLM's
    collective_rpc (the preset's worker extension), where the model runs."""
    from model_overrides.engine_status import STATUS_METHOD
    from model_overrides.kernels import kernel_library
    from model_overrides.registry import REGISTRY

    (report,) = llm.collective_rpc(STATUS_METHOD)
    assert [p["name"] for p in report["patches"]] == REGISTRY.names()
    statuses = {p["name"]: p["status"] for p in report["patches"]}
    assert statuses["dsv4-cpu-mtp-draft"] == "applied", statuses
    assert statuses["dsv4-cpu-indexer-last-request"] == "applied", statuses
    assert report["kernel_library"] == kernel_library.expected_library()
