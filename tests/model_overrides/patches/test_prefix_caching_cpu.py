"""DSV4 prefix caching on vLLM's CPU backend: a prompt served from cache hits gives the
same greedy tokens and log-probs as the same prompt served cold, and vLLM's
``prefix_cache_queries`` / ``_hits`` count what happened (the hits equal the prompt
positions the target model did not compute).

The "numeric" golden variant (attention, experts and mHC write into the residual) so
that a wrong cached row would move the logits. Prefixes end inside and on 256-token
blocks and C4 / C128 compression boundaries. A hit always starts the recomputed tail on
a 256-token block, so the cold run is chunked at 256 too (max_num_batched_tokens=256):
warm and cold then compute the same chunks and must agree bit for bit on every kernel
library. Against an unchunked cold run the tokens are the same and the log-probs move by
what chunked prefill itself changes in bf16 rounding, cache or no cache (README, "Prefix
caching").

Each configuration runs once in a child process (tests/support/prefix_cache_runner.py).
Where DSV4's ops run eager (3 to 4x slower), only the cases that hit the cache run.
On this CPU without AMX, or on a lower library, the ``dsv4-cpu-prefix-caching`` patch is
what keeps prefix caching on; with AMX vLLM keeps it itself.
"""

import json
from functools import cache
from pathlib import Path

import pytest

from model_overrides.kernels import kernel_library
from model_overrides.patches.cpu_platform_config import amx_available
from serving.golden import GoldenDesign, write_golden_model
from tests.support.child_result import child_result
from tests.support.prefix_cases import CASES, HITTING, check_warm_equals_cold, runner_spec

# A slow AVX2 machine runs every case on the eager ops: more than the default 15 minutes.
pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]
HARDWARE = kernel_library.hardware_isa()
NATIVE = kernel_library.requested_isa() or HARDWARE  # the library "native" runs load
LOWEST = kernel_library.ORDER[-1] if NATIVE != "avx2" else None
# Where DSV4's ops run eager (no `_C`: a CPU without AVX-512 BF16, or a lower library
# forced), the cases whose warm run starts from a cache hit, one of each kind; all of them
# on `_C`. Which blocks hit is vLLM's cache manager's choice, the same on every library;
# what the library changes is the numbers, which every hitting case checks bit for bit.
EAGER_NATIVE = NATIVE != "avx512_bf16"
NATIVE_CASES = HITTING if EAGER_NATIVE else tuple(CASES)


@pytest.fixture(scope="module")
def numeric_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_golden_model(
        tmp_path_factory.mktemp("golden-numeric"), GoldenDesign(variant="numeric")
    )


@cache
def _run(
    model_dir: str, library: str, k: int, chunk: int, caching: bool, names: tuple[str, ...]
) -> dict:
    engine = {"max_num_batched_tokens": chunk, "enable_prefix_caching": caching}
    spec = runner_spec(model_dir, library, k, engine, names)
    return child_result("tests.support.prefix_cache_runner", json.dumps(spec))


def run(
    numeric_dir: Path,
    library: str,
    k: int,
    chunk: int = 256,
    caching: bool = True,
    names: tuple[str, ...] = tuple(CASES),
) -> dict:
    return _run(str(numeric_dir), library, k, chunk, caching, names)


@pytest.mark.parametrize("k", [2, 0])
def test_native_cache_hits_give_the_cold_tokens_and_log_probs(numeric_dir, k: int):
    result = run(numeric_dir, "native", k, names=NATIVE_CASES)
    hits = check_warm_equals_cold(result)
    print(f"native k={k} hits: {hits}")
    # Served from cache where vLLM's rules allow: 1 to 3 blocks (MTP's draft layers
    # recompute the last matched block, so fewer with k > 0); never the prefix of a
    # longer prompt; the third sibling its shared blocks.
    if EAGER_NATIVE:  # only cases whose warm run hits
        assert all(h >= 256 for h in hits.values()), hits
    else:
        assert {h // 256 for h in hits.values()} >= ({0, 1, 2} if k else {0, 1, 2, 3}), hits
        assert hits["prefix-of-longer-800-to-520"] == 0
    assert hits["siblings-600-shared"] == 512
    expected = "not needed" if amx_available() else "applied"  # vLLM keeps it with AMX
    assert result["patches"]["dsv4-cpu-prefix-caching"] == expected


def test_native_warm_run_matches_an_unchunked_cold_run(numeric_dir):
    warm = run(numeric_dir, "native", 2, names=NATIVE_CASES)
    unchunked = run(numeric_dir, "native", 2, chunk=2048, caching=False, names=HITTING)
    assert unchunked["prefix_caching"] is False
    worst = 0.0
    for name in HITTING:
        case, reference = warm["cases"][name], unchunked["cases"][name]["cold"]
        assert case["warm"]["token_ids"] == reference["token_ids"], name
        pairs = zip(case["warm"]["logprobs"], reference["logprobs"], strict=True)
        worst = max([worst, *(abs(a - b) for a, b in pairs)])
    # Chunked prefill itself moves bf16 rounding (the cold run is chunked too and its
    # tokens and log-probs equal the warm run's bit for bit). A wrong cached row moves
    # far more: a 5% error in one op moves the median by 0.15 (README, "CPUs").
    print(f"native warm vs unchunked cold: max |d log p| {worst:.3g}")
    assert worst < 0.1


# Two of the hitting cases (a resent prompt, a twice-extended one): the eager ops run each
# case about 4x slower than native.
LOWEST_CASES = ("resend-513", "extend-twice-300-790-to-800")


@pytest.mark.skipif(LOWEST is None, reason="native is the lowest library here")
def test_lowest_library_cache_hits_give_the_cold_tokens_and_log_probs(numeric_dir):
    result = run(numeric_dir, LOWEST, 2, names=LOWEST_CASES)
    assert result["library"] == kernel_library.LIBRARIES[LOWEST]
    # Forcing a lower library hides AMX from vLLM: only the patch keeps the cache on.
    assert result["patches"]["dsv4-cpu-prefix-caching"] == "applied"
    native = check_warm_equals_cold(run(numeric_dir, "native", 2, names=NATIVE_CASES))
    assert check_warm_equals_cold(result) == {name: native[name] for name in LOWEST_CASES}
