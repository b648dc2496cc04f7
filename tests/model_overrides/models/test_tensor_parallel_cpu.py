"""The golden DSV4 with MTP k=2 at tensor parallelism 2 on vLLM's CPU backend.

Two worker processes (one core each here) shard the attention heads, the attention sinks
(target and MTP layer), the compressor, the indexer and the experts. The designed text and
spec-decode counters must survive the sharding: this caught our CPU MTP layer copying
every head's sink into its rank's half (model_overrides/models/dsv4_mtp_cpu.py). One
engine, in a child process (tests/support/fp8_runner.py, which takes any golden checkpoint).
"""

import json
import os
from pathlib import Path

import pytest

from tests.support.child_result import child_result

pytestmark = pytest.mark.engine
TP = 2


@pytest.fixture(scope="module")
def result(golden_dir: Path) -> dict:
    # vLLM binds each CPU worker to a NUMA node unless told which cores: one core per rank
    # (this machine has one node), the first two this process may use.
    cores = sorted(os.sched_getaffinity(0))
    bind = f"{cores[0]}|{cores[1 % len(cores)]}"
    overrides = json.dumps({"tensor_parallel_size": TP})
    return child_result(
        "tests.support.fp8_runner",
        str(golden_dir),
        overrides,
        env={"VLLM_CPU_OMP_THREADS_BIND": bind},
    )


def test_both_ranks_load_and_decode_without_error(result: dict):
    assert result["errors"] == {}, result["errors"]
    assert result["ranks"] == TP


def test_greedy_text_is_the_designed_one_at_tp2(result: dict):
    assert result["texts_ok"] and all(result["texts_ok"]), result["texts"]


def test_spec_decode_counters_are_the_designed_ones_at_tp2(result: dict):
    assert result["k"] == 2
    assert result["counters"] == result["expected_counters"], result
