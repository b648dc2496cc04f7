"""The speculation guard's settings: one schema for the preset (``speculation.guard``) and
for the engine process, which reads them from ``DSV4_SPEC_GUARD`` (JSON).

``off``: vLLM's static k. ``batch``: vLLM's own batch-size table
(``num_speculative_tokens_per_batch_size``; no acceptance feedback). ``adaptive``: our
guard (model_overrides/guard/spec_guard.py) picks k each step from live acceptance and the
step cost it measures. ``script`` is for tests: k follows a fixed list, step by step.
"""

from __future__ import annotations

import json
import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

GUARD_ENV = "DSV4_SPEC_GUARD"  # the settings, JSON; unset or mode off: no guard
STATE_ENV = "DSV4_SPEC_GUARD_STATE"  # where the engine writes the guard's state (JSON)
LOG_ENV = "DSV4_SPEC_GUARD_LOG"  # optional: one JSON line per decision that changed k


class GuardSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["off", "batch", "adaptive", "script"] = "off"
    # batch: vLLM's table, (first batch size, last batch size, k) inclusive ranges.
    batch_table: list[tuple[int, int, int]] | None = Field(
        None, description="batch mode: vLLM's num_speculative_tokens_per_batch_size"
    )
    # adaptive:
    tau_s: float = Field(
        0.5, gt=0, le=60, description="time constant of the acceptance estimate (s)"
    )
    probe_interval_s: float = Field(
        0.5,
        gt=0,
        le=60,
        description="while k < max, one step this often drafts k + 1 to keep measuring",
    )
    probe_min_steps: int = Field(
        24,
        ge=1,
        le=100000,
        description="and at least this many steps apart: a probe's drafts cost most where "
        "steps are slow (a large batch on a CPU)",
    )
    hysteresis: float = Field(
        0.02, ge=0, le=1, description="a new k must beat the current one by this share"
    )
    confirm_steps: int = Field(3, ge=1, le=1000, description="steps the better k must last")
    min_dwell_s: float = Field(0.25, ge=0, le=60, description="least time between switches (s)")
    calibration_cycles: int = Field(
        2,
        ge=0,
        le=100,
        description="start-up cycles through every k (each held two steps) seeding the cost fit",
    )
    prior_weight: float = Field(
        0.1, gt=0, le=100, description="pseudo-observations of the optimistic prior (1.0)"
    )
    step_cost: (
        tuple[float, float, float, float, float]
        | tuple[float, float, float, float, float, float]
        | None
    ) = Field(
        None,
        description="adaptive: a fixed step cost in seconds, [per step, per prefill token, "
        "per request, per request and verified draft, per request and proposed draft, "
        "per proposed draft (a drafter pass; 0 if left out)], instead of the one fitted "
        "online; for hosts whose step times are too noisy to fit (shared cores), from a "
        "run of the guard bench",
    )
    script: list[int] | None = Field(None, description="script mode: k per step, repeated")

    @model_validator(mode="after")
    def _mode_fields(self) -> GuardSettings:
        if self.mode == "batch" and not self.batch_table:
            raise ValueError("guard mode 'batch' needs batch_table: [[first, last, k], ...]")
        if self.mode != "batch" and self.batch_table:
            raise ValueError(f"batch_table is for guard mode 'batch', not {self.mode!r}")
        if self.mode == "script" and not self.script:
            raise ValueError("guard mode 'script' needs script: [k, k, ...]")
        if self.mode != "script" and self.script:
            raise ValueError(f"script is for guard mode 'script', not {self.mode!r}")
        if self.batch_table:
            first = sorted(self.batch_table)[0][0]
            if first != 1:
                raise ValueError("batch_table must start at batch size 1 (vLLM's rule)")
            ranges = sorted(self.batch_table)
            for (_, hi, _), (lo, _, _) in zip(ranges, ranges[1:], strict=False):
                if lo <= hi:
                    raise ValueError(f"batch_table ranges overlap at batch size {lo}")
            for lo, hi, k in self.batch_table:
                if not (1 <= lo <= hi) or k < 0:
                    raise ValueError(
                        f"batch_table entry {[lo, hi, k]}: need 1 <= first <= last, k >= 0"
                    )
        if self.step_cost is not None:
            if self.mode != "adaptive":
                raise ValueError(f"step_cost is for guard mode 'adaptive', not {self.mode!r}")
            if min(self.step_cost) < 0 or self.step_cost[0] <= 0:
                raise ValueError("step_cost: every cost >= 0 and the per-step one > 0")
        if any(k < 0 for k in self.script or []):
            raise ValueError("script values must be >= 0")
        return self

    def check_k(self, num_speculative_tokens: int) -> None:
        """A table or script that asks for more drafts than the engine proposes is an error."""
        asked = [k for *_, k in self.batch_table or []] + list(self.script or [])
        if asked and max(asked) > num_speculative_tokens:
            raise ValueError(
                f"guard asks for k={max(asked)} but num_speculative_tokens is "
                f"{num_speculative_tokens}"
            )

    def graph_table(self, k_max: int, max_num_seqs: int | None) -> list[list[int]] | None:
        """adaptive and script: a vLLM batch-size table that holds every k in 0..k_max,
        for the engine's ``num_speculative_tokens_per_batch_size``. vLLM's GPU runner
        captures decode CUDA graphs for each k its table holds, and with no table for
        k_max only (vllm/v1/worker/gpu/cudagraph_utils.py, "capture graphs for all
        possible values"): a step the guard runs at a smaller k then goes without them
        (the H200 guard bench in docs/benchmarks.md: fewer full graphs than vLLM's table,
        and the guard at k=0 slower than static k=0). The guard replaces the table's lookup in
        the scheduler (model_overrides/patches/spec_guard.py), so the table only says which
        graphs exist. It gives k_max to all but the k_max largest batch sizes, so a vLLM
        whose scheduler the guard no longer recognises runs static k_max but there.
        What it costs: each k's full graphs reach the largest batch the table gives it (for
        k_max, ``max_num_seqs - k_max``), a graph set per k to capture at start, and on
        vLLM's V1 runner (not the V2 the H200 ran) vLLM keeps only piecewise graphs with
        any table (config/vllm.py ``_maybe_override_dynamic_sd_cudagraph_mode``), as it
        judges full graphs unreliable when k varies. None without ``max_num_seqs`` (the
        table must reach each k inside it; a GPU preset with the guard must set it) or
        below k_max + 1."""
        if self.mode not in ("adaptive", "script") or not max_num_seqs or max_num_seqs <= k_max:
            return None
        top = max_num_seqs - k_max
        return [[1, top, k_max]] + [[top + i, top + i, k_max - i] for i in range(1, k_max + 1)]

    def describe(self) -> str:
        """One line for `dsv4-serve check`."""
        if self.mode == "off":
            return "off (static k)"
        if self.mode == "batch":
            ranges = ", ".join(f"{lo}-{hi}: k={k}" for lo, hi, k in self.batch_table or [])
            return f"batch (vLLM's table; batch size {ranges})"
        if self.mode == "script":
            return f"script (k per step {self.script})"
        cost = "fitted online" if self.step_cost is None else f"fixed {list(self.step_cost)}"
        return (
            f"adaptive (step cost {cost}, acceptance over tau {self.tau_s} s, probe every "
            f"{self.probe_interval_s} s and {self.probe_min_steps} steps, switch on a "
            f"{self.hysteresis:.0%} gain held "
            f"{self.confirm_steps} steps, dwell {self.min_dwell_s} s)"
        )

    def engine_env(self) -> dict[str, str]:
        """What the engine process needs (batch mode is vLLM's own config, no env)."""
        if self.mode in ("off", "batch"):
            return {}
        return {GUARD_ENV: self.model_dump_json(exclude_defaults=True)}


def from_environment() -> GuardSettings:
    raw = os.environ.get(GUARD_ENV, "").strip()
    if not raw:
        return GuardSettings()
    return GuardSettings.model_validate(json.loads(raw))
