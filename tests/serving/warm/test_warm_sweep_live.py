"""The warm's traffic sweep against vLLM's own server on the golden model: every request
answered, and its follow-up turns prefill from the prefix cache."""

from pathlib import Path

import pytest

from serving.golden.golden_engine import golden_engine_kwargs
from serving.warm.sweep import SweepPlan, run_sweep
from tests.support.golden_server import golden_vllm_server
from tests.support.prom_samples import scrape, total

pytestmark = pytest.mark.engine
HITS = "vllm:prefix_cache_hits_total"


@pytest.fixture(scope="module")
def server(golden_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    with golden_vllm_server(golden_dir, tmp_path_factory.mktemp("vllm-server")) as base:
        yield base


def _hits(base: str) -> float:
    return total(scrape(f"{base}/metrics"), HITS)


def test_follow_up_turns_prefill_from_the_prefix_cache(server):
    model = golden_engine_kwargs("unused")["served_model_name"]
    # 600 words: two whole 256-token blocks that a follow-up turn finds cached.
    plan = SweepPlan(prompt_words=(16, 600), concurrency=(1, 2), max_tokens=4)
    fresh = SweepPlan(plan.prompt_words, plan.concurrency, plan.max_tokens, follow_up_words=0)
    before = _hits(server)
    assert run_sweep(f"{server}/v1", model, fresh, seed=100) == (3, 0)
    without = _hits(server) - before
    assert run_sweep(f"{server}/v1", model, plan, seed=200) == (6, 0)
    with_follow_ups = _hits(server) - before - without
    # Fresh waves at these sizes share no whole block (one seed's prompts of different
    # lengths are prefixes of each other, but 16 words is under a 256-token block).
    assert without == 0
    assert with_follow_ups >= 256, with_follow_ups
