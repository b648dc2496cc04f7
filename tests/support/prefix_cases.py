"""The prefix-caching cases the CPU and GPU tests serve (tests/support/prefix_cache_runner.py),
and what every warm run must show."""

MAX_TOKENS = 8
BIG = 10_000  # "shared" beyond every length: each prompt is a prefix of one sequence
# name -> (words shared by the case's prompts, warm prompts [words, branch], the measured
# prompt [words, branch]). One golden word is one token.
CASES = {
    "resend-255": (BIG, [(255, 0)], (255, 0)),
    "resend-256-on-block": (BIG, [(256, 0)], (256, 0)),
    "resend-258-inside-c4": (BIG, [(258, 0)], (258, 0)),
    "resend-260-on-c4": (BIG, [(260, 0)], (260, 0)),
    "resend-384-on-c128": (BIG, [(384, 0)], (384, 0)),
    "resend-512-on-block": (BIG, [(512, 0)], (512, 0)),
    "resend-513": (BIG, [(513, 0)], (513, 0)),
    "extend-300-to-700": (BIG, [(300, 0)], (700, 0)),
    "extend-520-to-800": (BIG, [(520, 0)], (800, 0)),
    "extend-twice-300-790-to-800": (BIG, [(300, 0), (790, 0)], (800, 0)),
    # A prefix of a longer prompt served before: vLLM 0.32 keeps sliding-window and
    # compressor-state blocks only at reachable boundaries (the prompt's end, shared-
    # prefix junctions; single_type_kv_cache_manager.py retention), so this misses.
    "prefix-of-longer-800-to-520": (BIG, [(800, 0)], (520, 0)),
    # Three prompts sharing a 600-token system prompt: the first two miss it (the
    # junction is not known while the first one runs), the third hits its 2 blocks.
    "siblings-600-shared": (600, [(700, 1), (700, 2)], (700, 3)),
}
# Where the eager ops (3 to 4x slower) and the unchunked reference run: the cases whose
# warm run starts from a cache hit, one of each kind.
HITTING = ("resend-513", "extend-520-to-800", "extend-twice-300-790-to-800", "siblings-600-shared")


def runner_spec(
    model_dir: str, library: str, k: int, engine: dict, names: tuple[str, ...] = tuple(CASES)
) -> dict:
    """The runner's spec: these cases, cold only when prefix caching is off."""
    return {
        "model_dir": model_dir,
        "library": library,
        "k": k,
        "engine": engine,
        "max_tokens": MAX_TOKENS,
        "cold_only": not engine.get("enable_prefix_caching", True),
        "cases": [
            {"name": name, "seed": i + 1, "shared": shared, "warm": warm, "prompt": prompt}
            for i, (name, (shared, warm, prompt)) in enumerate(CASES.items())
            if name in names
        ],
    }


def check_warm_equals_cold(result: dict) -> dict[str, int]:
    """Every warm run gives its cold run's tokens and log-probs bit for bit; the hit
    counter equals the prompt positions the target model did not compute."""
    assert result["prefix_caching"] is True
    hits = {}
    for name, case in result["cases"].items():
        cold, warm = case["cold"], case["warm"]
        length = CASES[name][2][0]
        assert cold["prompt_token_ids"] == warm["prompt_token_ids"], name
        assert len(cold["prompt_token_ids"]) == length, name
        assert cold["prefix_cache_hits"] == 0 and cold["first_computed_position"] in (0, None)
        assert cold["prefix_cache_queries"] == warm["prefix_cache_queries"] == length, name
        # None: every step of the run replayed a full CUDA graph (no Python forward).
        if warm["first_computed_position"] is not None:
            assert warm["prefix_cache_hits"] == warm["first_computed_position"], name
        assert warm["prefix_cache_hits"] % 256 == 0 and warm["prefix_cache_hits"] < length
        assert warm["token_ids"] == cold["token_ids"], name
        assert warm["logprobs"] == cold["logprobs"], name  # bit for bit
        hits[name] = warm["prefix_cache_hits"]
    return hits
