"""Benchmark prompts: a built-in synthetic set, or DSV4 chat turns (chat route)."""

from __future__ import annotations

import random

from serving.golden import GoldenDesign


def synthetic_prompts(count: int, words: int, seed: int = 0) -> list[str]:
    """Random words of the golden vocabulary: valid for the golden model and plain text
    for a real DeepSeek-V4 tokenizer."""
    vocab = GoldenDesign().words
    rng = random.Random(seed)
    return [" ".join(rng.choice(vocab) for _ in range(words)) for _ in range(count)]
