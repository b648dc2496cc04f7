"""Statistics of one benchmark level: latency percentiles, rates, and spec-decode
counter deltas from /metrics. Pure functions, unit-tested on known inputs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from serving.metrics_page import Samples

PERCENTILES = (50, 90, 99)
SPEC_COUNTERS = {
    "drafts": "spec_decode_num_drafts_total",
    "draft_tokens": "spec_decode_num_draft_tokens_total",
    "accepted": "spec_decode_num_accepted_tokens_total",
    "per_position": "spec_decode_num_accepted_tokens_per_pos_total",
}


@dataclass
class RequestRecord:
    """What one streamed request looked like from the client."""

    start: float
    first_token: float | None = None
    end: float | None = None
    output_tokens: int = 0
    chunk_times: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.end is not None

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.start

    @property
    def e2e(self) -> float | None:
        return None if self.end is None else self.end - self.start

    @property
    def tpot(self) -> float | None:
        """Decode time per output token after the first."""
        if self.first_token is None or self.end is None or self.output_tokens < 2:
            return None
        return (self.end - self.first_token) / (self.output_tokens - 1)

    @property
    def inter_chunk_gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:], strict=False)]


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def percentiles(values: list[float]) -> dict[str, float | None]:
    return {f"p{q}": percentile(values, q) for q in PERCENTILES}


def summarize(records: list[RequestRecord], wall_seconds: float) -> dict:
    ok = [r for r in records if r.ok]
    tokens = sum(r.output_tokens for r in ok)
    return {
        "requests": len(records),
        "failed": len(records) - len(ok),
        "errors": sorted({r.error for r in records if r.error})[:5],
        "wall_seconds": wall_seconds,
        "output_tokens": tokens,
        "output_tokens_per_s": tokens / wall_seconds if wall_seconds > 0 else 0.0,
        "requests_per_s": len(ok) / wall_seconds if wall_seconds > 0 else 0.0,
        "ttft_s": percentiles([r.ttft for r in ok if r.ttft is not None]),
        "itl_s": percentiles([g for r in ok for g in r.inter_chunk_gaps]),
        "tpot_s": percentiles([r.tpot for r in ok if r.tpot is not None]),
        "e2e_s": percentiles([r.e2e for r in ok if r.e2e is not None]),
    }


def _metric_name(sample_name: str) -> str:
    """``vllm:x`` and Ray's ``ray_vllm_x`` as one name ``x``."""
    for prefix in ("vllm:", "ray_vllm_"):
        if sample_name.startswith(prefix):
            return sample_name[len(prefix) :]
    return sample_name


def spec_decode_delta(before: Samples, after: Samples, model: str | None = None) -> dict:
    """Acceptance between two /metrics scrapes, summed over every engine."""

    def total(samples: Samples, metric: str, position: str | None = None) -> float:
        out = 0.0
        for (name, labels), value in samples.items():
            label = dict(labels)
            if _metric_name(name) != metric or (model and label.get("model_name") != model):
                continue
            if position is None or label.get("position") == position:
                out += value
        return out

    delta = {k: total(after, m) - total(before, m) for k, m in SPEC_COUNTERS.items()}
    positions = sorted(
        {
            dict(labels)["position"]
            for (name, labels) in after
            if _metric_name(name) == SPEC_COUNTERS["per_position"] and "position" in dict(labels)
        },
        key=int,
    )
    accepted_at = {
        p: total(after, SPEC_COUNTERS["per_position"], p)
        - total(before, SPEC_COUNTERS["per_position"], p)
        for p in positions
    }
    return acceptance(delta["drafts"], delta["draft_tokens"], delta["accepted"], accepted_at)


def acceptance(
    drafts: float, draft_tokens: float, accepted: float, accepted_at: dict[str, float]
) -> dict:
    """Acceptance figures from counter increases (``accepted_at``: position -> tokens)."""
    return {
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "acceptance_length": 1 + accepted / drafts if drafts else None,
        "acceptance_by_position": {p: n / drafts for p, n in accepted_at.items()} if drafts else {},
    }
