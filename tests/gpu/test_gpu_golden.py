"""The golden DSV4 with MTP on vLLM's CUDA path: exact text and designed spec-decode counters.

Each configuration is one engine (tests/gpu/jobs.py); the expected counters come from
simulating MTP on the golden design, as on the CPU (tests/model_overrides/models/test_mtp_cpu.py).
"""

from __future__ import annotations

import pytest

from serving.golden import GoldenDesign
from tests.gpu.golden_runner import LONG_MAX_TOKENS
from tests.gpu.jobs import HALF, INLINE, KS, designed_name
from tests.support.golden_prompts import expected_counters, mtp_prompts

pytestmark = pytest.mark.gpu
DESIGN = GoldenDesign()
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
DRAFTED = "vllm:spec_decode_num_draft_tokens"


def expected(design: GoldenDesign, run: dict, k: int) -> dict:
    if run["kind"] == "mtp_prompts":
        return expected_counters(design, mtp_prompts(design, run["batch"]), k)
    return expected_counters(design, run_prompts(design, run), k, LONG_MAX_TOKENS)


def run_prompts(design: GoldenDesign, run: dict) -> list[str]:
    from tests.gpu.golden_runner import LONG_WORDS, MIXED_WORDS
    from tests.support.golden_prompts import prompt_of

    if run["kind"] == "long":
        return [prompt_of(design, n, seed=43 + i) for i, n in enumerate(LONG_WORDS)]
    return [prompt_of(design, n, seed=n) for n in MIXED_WORDS]


def check_runs(result: dict, design: GoldenDesign, k: int) -> None:
    for run in result["runs"]:
        where = f"{run['kind']} batch {run['batch']}"
        assert all(run["texts_ok"]), f"{where}: {run['texts']}"
        if k == 0:
            assert not run["counters"].get(DRAFTED), run["counters"]  # no speculation
            continue
        assert run["counters"] == expected(design, run, k), f"{where}: {run['counters']}"


@pytest.mark.parametrize("eager", [False, True], ids=["graphs", "eager"])
@pytest.mark.parametrize("k", KS)
def test_golden_text_and_designed_counters(pool, k: int, eager: bool):
    result = pool.result(designed_name(k, eager))
    engine = result["engine"]
    print(f"k={k} {'eager' if eager else 'graphs'}: start {result['start_seconds']}s, {engine}")
    assert engine["device"].startswith("cuda")
    assert engine["enforce_eager"] is eager
    assert ("NONE" in engine["cudagraph_mode"]) is eager, engine["cudagraph_mode"]
    if not eager:  # the sparse attention runs eagerly between graph segments (breakable_graphs)
        assert engine["attention_breaks_during_capture"] is True, engine
    check_runs(result, DESIGN, k)
    long_run = next(r for r in result["runs"] if r["kind"] == "long")
    assert min(long_run["prompt_tokens"]) > 2048  # the indexer's kernels ran
    if k:
        drafted = sum(r["counters"][DRAFTED] for r in result["runs"])
        accepted = sum(r["counters"][ACCEPTED] for r in result["runs"])
        # full agreement: every draft accepted but the one-token prompt's first step
        # (GoldenDesign.expected_spec_counters), which the exact counters above hold
        assert drafted > 0 and accepted == drafted - k, (accepted, drafted)


def test_half_agreement_gives_the_designed_counters(pool):
    design = GoldenDesign(draft_agreement=0.5)
    result = pool.result(HALF)
    check_runs(result, design, 2)
    c = [r["counters"] for r in result["runs"]]
    rate = sum(x[ACCEPTED] for x in c) / sum(x[DRAFTED] for x in c)
    print(f"half agreement, k=2: acceptance {rate:.3f}")
    assert 0.2 < rate < 0.8


def test_inline_hc_contract_gives_the_deferred_tokens_and_acceptance(pool):
    """The seed's invariant on CUDA: hc_post deferred to the next layer (vLLM's CUDA decoder)
    or applied inline with no state handed on (as ROCm does) gives the same greedy tokens
    and the same acceptance."""
    deferred = pool.result(designed_name(2, False))
    inline = pool.result(INLINE)
    assert deferred["engine"]["decoder_forward"] == "deferred"
    assert inline["engine"]["decoder_forward"] == "inline"
    assert inline["patches"]["dsv4-cuda-hc-path"] == "applied"
    assert deferred["patches"]["dsv4-cuda-hc-path"] == "not needed"
    for a, b in zip(deferred["runs"], inline["runs"], strict=True):
        assert a["texts"] == b["texts"], (a["kind"], a["batch"])
        assert a["counters"] == b["counters"], (a["kind"], a["batch"])


def test_plugin_status_on_cuda(pool):
    """The status table from the engine process: nothing failed or unrecognised, no CPU-only
    patch applied, the PR #42930 fixes not needed (vLLM 0.32 carries them)."""
    result = pool.result(designed_name(2, False))
    patches = result["patches"]
    for name, outcome in sorted(patches.items()):
        print(f"{name:40s} {outcome:16s} {result['patch_details'][name]}")
    assert not {n: o for n, o in patches.items() if o in ("failed", "unrecognised")}
    cpu_only = {
        n: o for n, o in patches.items() if n.startswith("dsv4-cpu-") or n.startswith("cpu-")
    }
    assert cpu_only and "applied" not in cpu_only.values(), cpu_only
    assert {patches[n] for n in patches if n.startswith("pr42930-")} == {"not needed"}
