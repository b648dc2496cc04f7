"""Prompts over the golden vocabulary, and helpers shared by the engine tests."""

import random

from serving.golden import GoldenDesign


def prompt_of(design: GoldenDesign, length: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(design.words) for _ in range(length))


def engine_env(tmp_audit_dir: str | None = None) -> dict[str, str]:
    from serving.golden.golden_engine import CPU_ENV

    env = dict(CPU_ENV)
    if tmp_audit_dir:
        env["DSV4_LOAD_AUDIT"] = tmp_audit_dir
    return env


MTP_MAX_TOKENS = 48
# The CPU engine tests' MTP requests (tests/support/mtp_runner.py): 24 tokens still take
# every draft position through acceptance and rejection (the half-agreement checkpoint
# accepts 0.53 of its drafts at 24, 0.59 at 48) at half the decode steps.
CPU_MTP_MAX_TOKENS = 24


def mtp_prompts(design: GoldenDesign, batch: int) -> list[str]:
    """Short prompts starting at different places on the word ring."""
    return [" ".join(design.words[5 * i : 5 * i + 2 + i % 4]) for i in range(batch)]


def expected_counters(
    design: GoldenDesign, prompts: list[str], k: int, max_tokens: int = MTP_MAX_TOKENS
) -> dict[str, object]:
    total: dict[str, object] = {}
    for prompt in prompts:
        for name, value in design.expected_spec_counters(prompt, max_tokens, k).items():
            if isinstance(value, list):
                prev = total.get(name, [0] * len(value))
                total[name] = [a + b for a, b in zip(prev, value, strict=True)]
            else:
                total[name] = total.get(name, 0) + value
    return total
