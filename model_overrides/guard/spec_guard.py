"""The speculation guard's decision, with no vLLM import: unit-testable with a
fake clock. ``model_overrides/patches/spec_guard.py`` puts it into vLLM's scheduler.

Each scheduler step the guard picks k in 0..K, the number of drafts proposed at the end
of this step (the next step verifies them), to maximise expected tokens per second:

    E(k) = B * (1 + sum_{i=1..k} prod_{j<i} alpha_j)      tokens the batch moves on
    T(k) = c0 + cN * (P + B * (1 + k)) + cD * B * k + cK * k    seconds the step takes

``alpha_j`` is the conditional acceptance at draft position j (accepted given reached),
a time-decayed estimate from the engine's own spec-decode counts. ``c0, cN, cD, cK`` are
fitted online (least absolute deviations, no cost below zero) on this engine's measured
step times, with start-up calibration steps cycling k so that the draft cost is
identifiable, or fixed (``step_cost``). ``cK`` is a drafter pass per draft position, the
same at any batch size where steps are launch-bound (a GPU serving a small batch). A
switch needs a margin (hysteresis) held for a few steps and a dwell time; while k < K a
probe step now and then (``probe_interval_s`` and ``probe_min_steps`` apart) drafts k + 1
so the estimate of the next position stays live and the guard recovers.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

from model_overrides.guard.spec_guard_config import GuardSettings

COST_WINDOW = 64  # step timings kept per k value
REFIT_EVERY = 8  # steps between cost refits
IRLS_ROUNDS = 8  # at most, reweighting rounds of the cost fit (its median line)
MIN_HISTORY = 4.0  # observations the acceptance estimate keeps, however old
SLOW_FACTOR = 8.0  # the slow memory's time constant, in fast ones
CHANGE = 0.2  # fast and slow estimates this far apart: the traffic changed


class _Decayed:
    """Per-position counts that fade with time constant ``tau_s``."""

    def __init__(self, k_max: int, tau_s: float) -> None:
        self.tau_s = tau_s
        self.reached = [0.0] * k_max
        self.accepted = [0.0] * k_max
        self.last: float | None = None

    def decay(self, now: float) -> None:
        if self.last is not None and now > self.last:
            f = math.exp(-(now - self.last) / self.tau_s)
            # Keep at least MIN_HISTORY observations at each position: with drafting off
            # (or k below the position) only probes observe it, and the prior must not
            # outweigh what they saw (or the guard would switch up to re-learn it).
            for j, reached in enumerate(self.reached):
                fj = max(f, min(1.0, MIN_HISTORY / reached)) if reached else 1.0
                self.reached[j] *= fj
                self.accepted[j] *= fj
        self.last = now if self.last is None else max(self.last, now)

    def observe(self, drafted: int, accepted: int, now: float, times: int = 1) -> None:
        self.decay(now)
        for j in range(min(accepted + 1, drafted)):
            self.reached[j] += times
        for j in range(min(accepted, drafted)):
            self.accepted[j] += times

    def rates(self, now: float, prior_weight: float) -> list[float]:
        self.decay(now)
        w = prior_weight
        return [(a + w) / (r + w) for a, r in zip(self.accepted, self.reached, strict=True)]


class PositionAcceptance:
    """Per-position conditional acceptance: accepted given reached.

    A step that verified ``drafted`` drafts and accepted ``accepted`` of them reached
    positions 0..min(accepted, drafted - 1) and accepted positions 0..accepted - 1.
    Two memories: a fast one (``tau_s``) and a slow one (SLOW_FACTOR x longer). The
    slow one decides while the two agree (steady traffic, little noise); when they part
    by more than CHANGE the traffic changed and the fast one decides, so a collapse or
    a recovery shows within about ``tau_s``. Old observations fade to MIN_HISTORY per
    position, never below; a position never reached reads as an optimistic prior of 1.0,
    weighted as ``prior_weight`` observations."""

    def __init__(self, k_max: int, tau_s: float, prior_weight: float) -> None:
        self.prior_weight = prior_weight
        self.fast = _Decayed(k_max, tau_s)
        self.slow = _Decayed(k_max, tau_s * SLOW_FACTOR)

    @property
    def reached(self) -> list[float]:
        return self.fast.reached

    @property
    def accepted(self) -> list[float]:
        return self.fast.accepted

    def observe(self, drafted: int, accepted: int, now: float, times: int = 1) -> None:
        """``times`` requests each verified ``drafted`` drafts and accepted ``accepted``."""
        drafted = min(drafted, len(self.fast.reached))
        self.fast.observe(drafted, accepted, now, times)
        self.slow.observe(drafted, accepted, now, times)

    def rates(self, now: float) -> list[float]:
        fast = self.fast.rates(now, self.prior_weight)
        slow = self.slow.rates(now, self.prior_weight)
        return [f if abs(f - s) > CHANGE else s for f, s in zip(fast, slow, strict=True)]


@dataclass
class StepCost:
    """``T = c0 + cP * prefill + cB * requests + cV * requests * verified + cD * requests * k
    + cK * k``, fitted to measured steps (robust_nonnegative_fit). A step checks the drafts
    the step before proposed (``verified``) and proposes ``k``, so both are columns: with
    one only, a cycle of k values would charge one step's drafts to the next. In steady
    state ``verified = k`` and a draft costs ``cV + cD`` per request plus ``cK`` per step.

    ``cK`` is the drafter's pass for each draft position: where a step is launch-bound (a
    GPU at small batches) that pass costs the same for one request as for sixteen, so a
    per-request price fitted across batch sizes made drafts look nearly free at batch 1
    (the H200 guard bench in docs/benchmarks.md)."""

    COLUMNS = 6  # c0, cP, cB, cV, cD, cK

    samples: dict[int, deque] = field(default_factory=dict)
    coef: tuple[float, ...] | None = None
    since_fit: int = 0
    fixed: bool = False  # coef given (GuardSettings.step_cost): measured steps change nothing

    def add(self, prefill: int, requests: int, verified: int, k: int, seconds: float) -> None:
        if self.fixed:
            return
        self.samples.setdefault(k, deque(maxlen=COST_WINDOW)).append(
            (prefill, requests, requests * verified, requests * k, k, seconds)
        )
        self.since_fit += 1
        if self.coef is None or self.since_fit >= REFIT_EVERY:
            self.fit()

    def fit(self) -> None:
        rows = [s for d in self.samples.values() for s in d]
        self.since_fit = 0
        if len(rows) < 6:
            return
        a = np.array([[1.0, *r[:-1]] for r in rows])
        y = np.array([r[-1] for r in rows])
        self.coef = tuple(float(c) for c in robust_nonnegative_fit(a, y))

    def seconds(self, prefill: int, requests: int, k: int) -> float | None:
        if self.coef is None:
            return None
        c0, cp, cb, cv, cd, ck = self.coef
        # No cost is negative (the fit, step_cost's check); all of them can be zero.
        fixed = max(c0 + cp * prefill + cb * requests, 1e-6)
        return fixed + ((cv + cd) * requests + ck) * k


def robust_nonnegative_fit(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least absolute deviations (iteratively reweighted least squares), every
    coefficient >= 0. A step time is only ever delayed by what is not the step: a
    shape's first steps (kernels set up), another process on the core, a pause. Squared
    error lets a few such steps set the fit (and once drove a draft's cost below zero
    and the fixed part to the floor, so k=0 won at full acceptance); the median line
    ignores them. No cost is negative: a column that fits below zero is left out."""
    # A little ridge: with one batch size (or no prefill) seen, a column is
    # collinear with another; the prediction along the data stays right.
    scale = np.maximum(np.abs(a).max(axis=0), 1e-9)
    an = a / scale
    lam = 1e-3 * len(y)
    weights = np.ones(len(y))
    coef = last = np.zeros(a.shape[1])
    floor = 1e-3 * max(float(np.median(y)), 1e-9)  # residuals smaller than this are exact
    for _ in range(IRLS_ROUNDS):
        active = np.ones(a.shape[1], dtype=bool)
        while True:
            sub = an[:, active] * weights[:, None]
            solved = np.linalg.solve(
                sub.T @ an[:, active] + lam * np.eye(int(active.sum())), sub.T @ y
            )
            coef = np.zeros(a.shape[1])
            coef[active] = solved
            if (coef >= 0).all():
                break
            active &= coef > 0  # leave out what fit below zero, solve again
        if np.abs(coef - last).max() <= 1e-3 * np.abs(coef).max():
            break  # settled: most fits take a few rounds (the fit runs in the scheduler)
        last = coef
        residual = np.abs(y - an @ coef)
        weights = 1.0 / np.maximum(residual, floor)
    return coef / scale


def expected_tokens(alphas: list[float], requests: int, k: int) -> float:
    run, total = 1.0, 1.0
    for alpha in alphas[:k]:
        run *= alpha
        total += run
    return requests * total


@dataclass
class Decision:
    k: int
    reason: str  # calibrate, probe, hold, up, down, script, no-cost-model


class AdaptiveK:
    """The per-step choice of k. ``decide`` is called once per scheduled step with the
    batch size; ``observe_drafts`` once per verified step (``observe_draft`` per request);
    ``observe_step``
    once per finished step with its measured time."""

    def __init__(self, settings: GuardSettings, k_max: int) -> None:
        self.settings, self.k_max = settings, k_max
        self.acceptance = PositionAcceptance(k_max, settings.tau_s, settings.prior_weight)
        fixed = settings.step_cost
        self.cost = (
            StepCost()
            if fixed is None
            # step_cost may leave out the last (per-step draft) cost: it is then 0
            else StepCost(coef=tuple(fixed) + (0.0,) * (StepCost.COLUMNS - len(fixed)), fixed=True)
        )
        self.k = k_max  # the k the guard holds (probes and calibration aside)
        self.decisions: Counter[str] = Counter()
        self.steps = 0
        self.last_switch = -math.inf
        self.last_probe = -math.inf
        self.last_probe_step = -(10**9)
        self.pending: int | None = None
        self.pending_steps = 0
        self.off_since: float | None = None  # when k last went to 0 (None: drafting)
        self.prefill_tokens = 0  # of the last measured step: the part of T not set by k
        self.last_rates: list[float] = [1.0] * k_max
        self.last_k = k_max

    def _calibration_k(self) -> int | None:
        """K, K, K-1, K-1, ..., 0, 0, repeated: each k held two steps, so the second
        step of a pair verifies what it proposes."""
        cycle = 2 * (self.k_max + 1)
        if self.cost.fixed or self.steps >= self.settings.calibration_cycles * cycle:
            return None
        return self.k_max - (self.steps % cycle) // 2

    def rate(self, alphas: list[float], requests: int, k: int) -> float | None:
        seconds = self.cost.seconds(self.prefill_tokens, requests, k)
        if seconds is None or seconds <= 0:
            return None
        return expected_tokens(alphas, requests, k) / seconds

    def best(self, alphas: list[float], requests: int) -> tuple[int, dict[int, float]]:
        rates = {k: self.rate(alphas, requests, k) for k in range(self.k_max + 1)}
        known = {k: r for k, r in rates.items() if r is not None}
        if not known:
            return self.k, {}
        # Ties go to the smaller k: it costs less if the estimate is off.
        return max(known, key=lambda k: (known[k], -k)), known

    def decide(self, requests: int, now: float) -> Decision:
        decision = self._decide(requests, now)
        self.steps += 1
        self.decisions[decision.reason] += 1
        self.last_k = decision.k
        return decision

    def _decide(self, requests: int, now: float) -> Decision:
        s = self.settings
        if s.mode == "script":
            script = s.script or [self.k_max]
            return Decision(min(script[self.steps % len(script)], self.k_max), "script")
        calibration = self._calibration_k()
        if calibration is not None:
            return Decision(calibration, "calibrate")
        alphas = self.acceptance.rates(now)
        self.last_rates = alphas
        best, rates = self.best(alphas, requests)
        if not rates:
            return Decision(self.k, "no-cost-model")
        if best != self.k and rates[best] >= (1 + s.hysteresis) * rates[self.k]:
            self.pending_steps = self.pending_steps + 1 if self.pending == best else 1
            self.pending = best
        else:
            self.pending, self.pending_steps = None, 0
        if (
            self.pending is not None
            and self.pending_steps >= s.confirm_steps
            and now - self.last_switch >= s.min_dwell_s
        ):
            reason = "up" if self.pending > self.k else "down"
            self.k, self.last_switch = self.pending, now
            self.pending, self.pending_steps = None, 0
            self.off_since = now if self.k == 0 else None
            self.last_probe, self.last_probe_step = now, self.steps
            return Decision(self.k, reason)
        if (
            self.k < self.k_max
            and now - self.last_probe >= s.probe_interval_s
            and self.steps - self.last_probe_step >= s.probe_min_steps
        ):
            self.last_probe, self.last_probe_step = now, self.steps
            # One position beyond the held k, not all K: that is the position whose
            # acceptance decides whether to draft more (the ones below are drafted
            # anyway, the ones above read as last seen), at a fraction of the price (a
            # probe's drafts are checked for the whole batch: from k=0 with K=2, half).
            return Decision(self.k + 1, "probe")
        return Decision(self.k, "hold")

    def observe_draft(self, drafted: int, accepted: int, now: float) -> None:
        if drafted > 0:
            self.acceptance.observe(drafted, accepted, now)

    def observe_drafts(self, drafts: list[tuple[int, int]], now: float) -> None:
        """A verified step's ``(drafted, accepted)`` per request, at one time: the estimate
        fades once, not once per request (at batch 64 that was 0.6 ms a step on a CPU core,
        on the scheduler's path)."""
        for (drafted, accepted), times in Counter(drafts).items():
            if drafted > 0:
                self.acceptance.observe(drafted, accepted, now, times)

    def observe_step(
        self, tokens: int, requests: int, verified_k: int, k: int, seconds: float
    ) -> None:
        """``verified_k``: the drafts per request this step checked; ``k``: proposed."""
        if requests <= 0 or seconds <= 0:
            return
        self.prefill_tokens = max(tokens - requests * (1 + verified_k), 0)
        self.cost.add(self.prefill_tokens, requests, verified_k, k, seconds)

    def state(self, now: float) -> dict:
        """What the engine publishes (model_overrides/patches/spec_guard.py writes it)."""
        return {
            "mode": self.settings.mode,
            "k": self.k,
            "k_last_step": self.last_k,
            "k_max": self.k_max,
            "acceptance": [round(a, 4) for a in self.last_rates],
            "cost": list(self.cost.coef) if self.cost.coef else None,
            "decisions": dict(self.decisions),
            "steps": self.steps,
            "drafting_off_s": (now - self.off_since) if self.off_since is not None else 0.0,
        }
