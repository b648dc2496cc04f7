"""Acceptance profiles for a bench model: per-position rates for vLLM's synthetic rejection
sampler, so that one bench run measures every k under more than one acceptance.

A bench model has no weights and drafts nothing right, so its acceptance is made up
(``speculation.synthetic_acceptance``). Which k pays depends on it, and the acceptance
published for random-token prompts is well below what DeepSeek-V4 reaches on real text. A
local target ``vllm-kK~PROFILE`` is vLLM's server at k = K with the profile's rates in
place of the preset's (``serving.bench.targets``).

The rates are what vLLM's ``synthetic_acceptance_rates`` take (``vllm/config/
speculative.py``): per position, unconditional, position i the chance that the first i + 1
drafts are all accepted. So a mean acceptance length L over k drafts is 1 plus the sum of
the first k rates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SEPARATOR = "~"  # in a local target's name: vllm-k2~real-thinking


def rates_from_lengths(lengths: Sequence[float]) -> list[float]:
    """Per-position rates from mean acceptance lengths measured at k = 1, 2, ...: position
    i's rate is L(k = i + 1) - L(k = i), with L(0) = 1. This reads position i's rate as the
    same at every k >= i + 1, which holds for MTP: its drafter proposes one position at a
    time, and the i-th draft does not depend on how many follow it."""
    rates, previous = [], 1.0
    for k, length in enumerate(lengths, start=1):
        rate = round(length - previous, 6)
        if not 0.0 <= rate <= 1.0:
            raise ValueError(
                f"acceptance length {length} at k = {k} after {previous} at k = {k - 1}: "
                "each draft adds between 0 and 1 to the mean length"
            )
        if rates and rate > rates[-1]:
            raise ValueError(
                f"acceptance lengths {list(lengths)} give rates {[*rates, rate]}, which rise "
                "with the position: a later draft cannot be accepted more often"
            )
        rates.append(rate)
        previous = length
    return rates


@dataclass(frozen=True)
class AcceptanceProfile:
    name: str
    rates: tuple[float, ...]
    source: str

    def rates_for(self, k: int) -> list[float]:
        if k > len(self.rates):
            raise ValueError(
                f"acceptance profile {self.name!r} has rates for k <= {len(self.rates)}, not {k}"
            )
        return list(self.rates[:k])

    @property
    def acceptance_lengths(self) -> list[float]:
        """The mean acceptance length at k = 1, 2, ... (the target's own token counted)."""
        return [round(1 + sum(self.rates[:k]), 6) for k in range(1, len(self.rates) + 1)]


# InferenceX's golden acceptance lengths for DeepSeek-V4-Pro's MTP on coding prompts at
# temperature 1, at k = 1, 2, 3.
_INFERENCEX_THINKING = (1.79, 2.27, 2.49)
_INFERENCEX_NO_THINKING = (1.92, 2.61, 2.97)

PROFILES: dict[str, AcceptanceProfile] = {
    p.name: p
    for p in (
        AcceptanceProfile(
            "random-token",
            (0.70, 0.29, 0.12),
            "V4-Flash MTP at k = 2 on random-token prompts (vllm-project/vllm#41044: 4x B200, "
            "random 1024/256, concurrency 1: 70.02% and 28.74%); the third position "
            "extrapolated with the same decay. h200-flash-bench's own rates.",
        ),
        AcceptanceProfile(
            "real-thinking",
            tuple(rates_from_lengths(_INFERENCEX_THINKING)),
            "InferenceX's golden acceptance lengths, V4-Pro, coding prompts, temperature 1, "
            "thinking on: 1.79 / 2.27 / 2.49 at k = 1 / 2 / 3, one rate per added draft",
        ),
        AcceptanceProfile(
            "real-no-thinking",
            tuple(rates_from_lengths(_INFERENCEX_NO_THINKING)),
            "InferenceX's golden acceptance lengths, V4-Pro, coding prompts, temperature 1, "
            "thinking off: 1.92 / 2.61 / 2.97 at k = 1 / 2 / 3, one rate per added draft",
        ),
    )
}


def profile(name: str) -> AcceptanceProfile:
    if name not in PROFILES:
        raise ValueError(f"unknown acceptance profile {name!r}: use {', '.join(PROFILES)}")
    return PROFILES[name]
