"""Prompts over the golden vocabulary, and helpers shared by the engine tests."""

import random

from serving.golden import GoldenDesign


def prompt_of(design: GoldenDesign, length: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(design.words) for _ in range(length))


def engine_env(tmp_audit_dir: str | None = None) -> dict[str, str]:
    from serving.golden_engine import CPU_ENV

    env = dict(CPU_ENV)
    if tmp_audit_dir:
        env["DSV4_LOAD_AUDIT"] = tmp_audit_dir
    return env
