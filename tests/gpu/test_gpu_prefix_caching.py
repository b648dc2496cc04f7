"""DSV4 prefix caching on vLLM's CUDA path (FlashMLA sparse attention, the indexer, the
compressor and sliding-window caches, CUDA graphs): the numeric variant's prompts served
from cache give the cold run's tokens and log-probs bit for bit, and vLLM's hit counter
equals the prompt positions the target model did not compute, at the block boundaries
the CPU test uses (tests/model_overrides/patches/test_prefix_caching_cpu.py)."""

from __future__ import annotations

import pytest

from tests.gpu.jobs import prefix_cache_name
from tests.support.prefix_cases import check_warm_equals_cold

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("k", [2, 0])
def test_cache_hits_give_the_cold_tokens_and_log_probs(pool, k: int):
    result = pool.result(prefix_cache_name(k))
    hits = check_warm_equals_cold(result)
    print(f"CUDA k={k} hits: {hits}")
    assert hits["siblings-600-shared"] == 512
    assert {h // 256 for h in hits.values()} >= ({0, 1, 2} if k else {0, 1, 2, 3}), hits
    assert result["patches"]["dsv4-cpu-prefix-caching"] == "not applicable"
