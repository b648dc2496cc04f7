"""Designed-acceptance workloads on the golden families checkpoint: prompts
whose MTP drafts are always right (``high``), right on half the first drafts (``half``),
never right (``zero``), or high and zero in turn (``mixed``); ``switch`` is high, then
zero, then high again, in request order. The expected text of every prompt is known."""

from __future__ import annotations

from serving.golden import GoldenDesign

WORKLOADS = ("high", "half", "zero", "mixed")
SWITCH = "switch"
_OFFSETS = 5  # family prompt start points whose walk stays in the arc for 64 tokens
_WORDS = (2, 3, 4, 5)  # prompt lengths, for more distinct prompts


def design() -> GoldenDesign:
    return GoldenDesign(draft_pattern="families")


def max_tokens_allowed(k: int) -> int:
    """The longest request whose walk stays in its family for every prompt here."""
    return design().family_span(offset=_OFFSETS - 1, k=k)


def _family_prompts(family: str, count: int) -> list[str]:
    d = design()
    pool = [d.family_prompt(family, o, w) for w in _WORDS for o in range(_OFFSETS)]
    return [pool[i % len(pool)] for i in range(count)]


def workload_prompts(name: str, count: int) -> list[str]:
    if name == "mixed":
        high, zero = _family_prompts("high", count), _family_prompts("zero", count)
        return [(high if i % 2 == 0 else zero)[i // 2] for i in range(count)]
    if name == SWITCH:
        third = count // 3
        rest = count - 2 * third
        high = _family_prompts("high", third + rest)
        return high[:third] + _family_prompts("zero", third) + high[third:]
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}: use {', '.join(WORKLOADS)}")
    return _family_prompts(name, count)


def family_of(prompt: str) -> str:
    d = design()
    last = d.token_ids(prompt)[-1]
    return next(f for f in ("high", "half", "zero") if last in d.family_arc(f))


def expected_text(prompt: str, max_tokens: int) -> str:
    """The greedy completion: what k = 0 gives, by construction of the golden model."""
    return design().continuation(prompt, max_tokens)
