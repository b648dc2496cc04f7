"""deepseek_v4_mtp: the adaptive speculation guard in vLLM's scheduler.

Where it hooks into vLLM 0.32 (``vllm/v1/core/sched/scheduler.py``):
- ``Scheduler.__init__`` builds ``self.dynamic_sd_lookup``, vLLM's dense batch-size -> k
  table for dynamic speculative decoding (None without one). After it runs we put the
  guard there: ``schedule()`` reads ``self.dynamic_sd_lookup[len(num_scheduled_tokens)]``
  once per step, before the async scheduler copies k into its draft placeholders, and
  ships it as ``SchedulerOutput.num_spec_tokens_to_schedule``, the drafts the worker
  proposes at the end of that step. Model Runner V1 (``GPUModelRunner.propose_draft_token_ids``,
  gone in 0.34) and V2 (``vllm/v1/worker/gpu/model_runner.py``: ``execute_model`` keeps it,
  ``sample_tokens`` passes it to the speculator) both hand it to the drafter as
  ``num_speculative_tokens``; 0 returns no drafts. A non-None lookup also
  turns off the fake ``-1`` draft padding for CUDA graphs, as vLLM's own table does.
- ``Scheduler.make_spec_decoding_stats`` is called for every request of every verified
  step (inside ``update_from_output``), whether or not stats are logged: the guard's
  acceptance feed, gathered there and counted once the step's update returns.
- ``schedule`` / ``update_from_output``: the step's measured time, for the cost model.

vLLM 0.34's custom speculator hook (``register_speculative_method``,
``vllm/v1/worker/gpu/spec_decode/speculator_config.py``) is no place for the guard: a
speculator lives in the worker and is told k (``propose(..., num_speculative_tokens)``)
after the scheduler has already reserved and verified that many draft slots, so it could
only blank drafts it was asked for, never choose how many the step verifies.

The probe reads those lines in vLLM's source files without importing the runner or the
proposer: importing ``vllm.v1.worker.gpu_model_runner`` imports DSV4's model modules, and
off the CPU that must wait for vLLM's config (model_overrides/compat/breakable_graphs.py; measured
on the H200: with the runner imported by the plugin, a prompt whose last prefill chunk is
a few tokens crashed the engine in CUDA-graph replay, docs/gpu-run/2026-12-02-prefix). A
vLLM that moved any of those lines is "unrecognised" and runs static k (safe). DP > 1 is
refused, as vLLM refuses its own table there (ranks would pick different k). The guard is
the base class's, so the async scheduler (GPU) gets it too.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import math
import os
import time
from typing import Any

from model_overrides.guard.spec_guard import AdaptiveK
from model_overrides.guard.spec_guard_config import (
    GUARD_ENV,
    LOG_ENV,
    STATE_ENV,
    GuardSettings,
    from_environment,
)
from model_overrides.patches.module_attr import (
    has_module,
    import_optional,
    source_without_import,
)
from model_overrides.registry import GUARD_PATCH, REGISTRY, Need, Patch, Probe

logger = logging.getLogger("vllm.dsv4_overrides")
_SCHEDULER = "vllm.v1.core.sched.scheduler"
_PROPOSER = "vllm.v1.spec_decode.llm_base_proposer"
_RUNNER = "vllm.v1.worker.gpu_model_runner"
_RUNNER_V2 = "vllm.v1.worker.gpu.model_runner"
_SPECULATOR_V2 = "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator"
_MARK = "_dsv4_spec_guard"
STATE_INTERVAL_S = 0.25
_TIMES_KEPT = 8  # schedule() start times awaiting their update_from_output (async: 2)

# (module, what, source text the hook relies on)
_SOURCE_NEEDS = (
    (_SCHEDULER, "Scheduler.schedule", "self.dynamic_sd_lookup["),
    (_SCHEDULER, "Scheduler.schedule", "num_spec_tokens_to_schedule=num_spec_tokens_to_schedule"),
    (_SCHEDULER, "Scheduler.__init__", "self.dynamic_sd_lookup"),
    (_SCHEDULER, "Scheduler.update_from_output", "self.make_spec_decoding_stats("),
)
# Each model runner this vLLM has must hand the scheduler's k to its drafter; a runner
# whose module is gone is skipped, one that is there but changed makes the guard
# unrecognised. MTP's V2 speculator is a TargetDependentARSpeculator.
_RUNNER_NEEDS = {
    "Model Runner V1": (
        (_RUNNER, "GPUModelRunner.propose_draft_token_ids", "num_spec_tokens_to_schedule"),
        (_PROPOSER, "SpecDecodeBaseProposer.propose", "if self.num_speculative_tokens == 0"),
    ),
    "Model Runner V2": (
        (_RUNNER_V2, "GPUModelRunner.execute_model", "output.num_spec_tokens_to_schedule"),
        (_RUNNER_V2, "GPUModelRunner.sample_tokens", "num_speculative_tokens=num_spec_tokens"),
        (_SPECULATOR_V2, "TargetDependentARSpeculator.propose", "if num_speculative_tokens == 0"),
    ),
}
_STATS_PARAMS = [
    "self",
    "spec_decoding_stats",
    "num_draft_tokens",
    "num_accepted_tokens",
    "num_invalid_spec_tokens",
    "request_id",
]


class GuardLookup:
    """Stands in for vLLM's dense table: ``lookup[batch_size]`` is this step's k."""

    def __init__(self, settings: GuardSettings, k_max: int) -> None:
        self.guard = AdaptiveK(settings, k_max)
        self.state_path = os.environ.get(STATE_ENV) or None
        self.log_path = os.environ.get(LOG_ENV) or None
        self.started: dict[int, float] = {}
        self.last_finished = -math.inf
        self.drafts: list[tuple[int, int]] = []  # this step's, until step_finished
        self.last_written = 0.0
        self.announced = False

    def __getitem__(self, batch_size: int) -> int:
        now = time.monotonic()
        before = self.guard.last_k
        decision = self.guard.decide(batch_size, now)
        if not self.announced:
            self.announced = True
            logger.info(
                "speculation guard: mode %s, k 0..%d (first step: k=%d, %s)",
                self.guard.settings.mode,
                self.guard.k_max,
                decision.k,
                decision.reason,
            )
        if self.log_path and decision.k != before:
            self._log({"k": decision.k, "reason": decision.reason, "batch": batch_size})
        return decision.k

    def _log(self, record: dict) -> None:
        record = {
            "t": time.time(),
            **record,
            "acceptance": self.guard.last_rates,
            "cost": self.guard.cost.coef,
        }
        try:  # inside schedule(): a full disk must not stop the engine
            with open(self.log_path, "a") as f:  # type: ignore[arg-type]
                f.write(json.dumps(record) + "\n")
        except OSError as exc:
            logger.warning("speculation guard: cannot log to %s: %s", self.log_path, exc)
            self.log_path = None

    def step_started(self, output: Any) -> None:
        self.started[id(output)] = time.monotonic()
        while len(self.started) > _TIMES_KEPT:
            self.started.pop(next(iter(self.started)))

    def step_finished(self, output: Any) -> None:
        began = self.started.pop(id(output), None)
        now = time.monotonic()
        if began is not None:
            # A step's time starts when it was scheduled or when the step before it
            # finished, whichever is later. Under async scheduling (vLLM on GPUs) a step is
            # scheduled while the one before runs: from its schedule it spanned two steps
            # and the host's turn-around, which on a GPU made every draft look cheap. A
            # synchronous scheduler (the CPU) schedules after the last finish, so its times
            # do not change.
            began = max(began, self.last_finished)
        self.last_finished = now
        self.guard.observe_drafts(self.drafts, now)
        self.drafts = []
        requests = len(output.num_scheduled_tokens)
        if began is not None and requests:
            spec = output.scheduled_spec_decode_tokens
            verified = max((len(v) for v in spec.values()), default=0)
            self.guard.observe_step(
                output.total_num_scheduled_tokens,
                requests,
                verified,
                output.num_spec_tokens_to_schedule,
                now - began,
            )
        if self.state_path and now - self.last_written >= STATE_INTERVAL_S:
            self.last_written = now
            self.write_state(now)

    def write_state(self, now: float) -> None:
        state = {"pid": os.getpid(), "time": time.time(), **self.guard.state(now)}
        tmp = f"{self.state_path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(state, f)
            os.replace(tmp, self.state_path)  # readers never see half a file
        except OSError as exc:
            logger.warning("speculation guard: cannot write %s: %s", self.state_path, exc)
            self.state_path = None


def _scheduler_class() -> Any:
    mod = import_optional(_SCHEDULER)
    return getattr(mod, "Scheduler", None) if mod else None


def install(scheduler: Any, settings: GuardSettings) -> str | None:
    """Put the guard into a built scheduler; None when installed, else why not."""
    k_max = getattr(scheduler, "num_spec_tokens", 0)
    if not k_max:
        return "no speculative decoding"
    dp = scheduler.vllm_config.parallel_config.data_parallel_size
    if dp > 1:
        return f"data parallel size {dp}: ranks would pick different k"
    if scheduler.dynamic_sd_lookup is not None:
        # GuardSettings.graph_table: configured so that the runner captures CUDA graphs
        # for every k; which k a step runs is the guard's (the preset allows no other
        # table beside an adaptive guard).
        logger.info("speculation guard: in place of vLLM's batch-size table (its graphs stay)")
    scheduler.dynamic_sd_lookup = GuardLookup(settings, k_max)
    return None


def _guard_of(scheduler: Any) -> GuardLookup | None:
    lookup = getattr(scheduler, "dynamic_sd_lookup", None)
    return lookup if isinstance(lookup, GuardLookup) else None


def _wrap_init(original: Any) -> Any:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            settings = from_environment()
        except ValueError as exc:  # pydantic's ValidationError and bad JSON alike
            raise ValueError(f"{GUARD_ENV} is not valid guard settings: {exc}") from None
        if settings.mode in ("adaptive", "script"):
            why_not = install(self, settings)
            if why_not:
                logger.warning("speculation guard off: %s", why_not)

    return __init__


def _wrap_stats(original: Any) -> Any:
    @functools.wraps(original)
    def make_spec_decoding_stats(
        self: Any,
        spec_decoding_stats: Any,
        num_draft_tokens: int,
        num_accepted_tokens: int,
        num_invalid_spec_tokens: dict[str, int] | None,
        request_id: str,
    ) -> Any:
        if guard := _guard_of(self):
            invalid = (num_invalid_spec_tokens or {}).get(request_id, 0)
            guard.drafts.append((num_draft_tokens - invalid, num_accepted_tokens))
        return original(
            self,
            spec_decoding_stats,
            num_draft_tokens,
            num_accepted_tokens,
            num_invalid_spec_tokens,
            request_id,
        )

    return make_spec_decoding_stats


def _wrap_schedule(original: Any) -> Any:
    @functools.wraps(original)
    def schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        output = original(self, *args, **kwargs)
        if guard := _guard_of(self):
            guard.step_started(output)
        return output

    return schedule


def _wrap_update(original: Any) -> Any:
    @functools.wraps(original)
    def update_from_output(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, scheduler_output, *args, **kwargs)
        if guard := _guard_of(self):
            guard.step_finished(scheduler_output)
        return result

    return update_from_output


_WRAPPERS = {
    "__init__": _wrap_init,
    "make_spec_decoding_stats": _wrap_stats,
    "schedule": _wrap_schedule,
    "update_from_output": _wrap_update,
}


def _is_patched(cls: Any) -> bool:
    return all(getattr(getattr(cls, name), _MARK, False) for name in _WRAPPERS)


def probe() -> Probe:
    # The hooks go in whatever the guard's mode; each scheduler reads DSV4_SPEC_GUARD
    # when it is built, and with the guard off the wrappers only pass through.
    cls = _scheduler_class()
    if cls is None:
        return Probe(Need.UNRECOGNISED, f"{_SCHEDULER}.Scheduler is not in this vLLM")
    if _is_patched(cls):
        return Probe(Need.ALREADY_APPLIED, "guard hooks in place")
    if why := _unmet(_SOURCE_NEEDS):
        return Probe(Need.UNRECOGNISED, why)
    runners, why = runners_taking_k()
    if why:
        return Probe(Need.UNRECOGNISED, why)
    params = list(inspect.signature(cls.make_spec_decoding_stats).parameters)
    if params != _STATS_PARAMS:
        return Probe(Need.UNRECOGNISED, f"make_spec_decoding_stats takes {params}")
    read_by = " and ".join(runners)
    return Probe(Need.NEEDED, f"k per step from the scheduler's lookup, read by {read_by}")


def runners_taking_k() -> tuple[list[str], str | None]:
    """The model runners of this vLLM that hand the scheduler's k to their drafter, and
    why the guard cannot rely on them (a runner that is there but changed), else None."""
    runners = [name for name, needs in _RUNNER_NEEDS.items() if has_module(needs[0][0])]
    if not runners:
        return [], "no model runner this guard knows is in this vLLM"
    for name in runners:
        if why := _unmet(_RUNNER_NEEDS[name]):
            return runners, f"{name}: {why}"
    return runners, None


def _unmet(needs: tuple[tuple[str, str, str], ...]) -> str | None:
    """The first source line the guard relies on that this vLLM lacks, or None."""
    for module, qualname, needle in needs:
        src = source_without_import(module, qualname)
        if src is None:
            return f"{module}.{qualname} is not in this vLLM"
        if needle not in src:
            return f"{qualname} no longer has {needle.strip()!r}"
    return None


def apply() -> None:
    cls = _scheduler_class()
    for name, wrap in _WRAPPERS.items():
        wrapped = wrap(getattr(cls, name))
        setattr(wrapped, _MARK, True)
        setattr(cls, name, wrapped)


def verify() -> str | None:
    return None if _is_patched(_scheduler_class()) else "scheduler methods unchanged"


REGISTRY.add(
    Patch(
        name=GUARD_PATCH,
        override="deepseek_v4_mtp",
        summary="pick the draft count each step from live acceptance and measured step cost",
        probe=probe,
        apply=apply,
        verify=verify,
        gpu_note="scheduler code, shared by every platform; on the GPU's V2 runner a k "
        "without a captured verify graph runs eager (correct, slower)",
        upstream="ours; vLLM's dynamic SD is a static batch-size table",
        remove_when="vLLM chooses the draft count from acceptance itself",
    )
)
