"""What each dsv4 recording rule and alert expression returns on given series, stated
again in Python, independently of the PromQL in serving/monitoring/rules.py.

The rules' meaning is restated here (which vLLM series, sums over engines before any
division, ratios, Ray's ReplicaId or the scrape instance as the replica, the gateway's
model label, thresholds with the preset schema's defaults). Prometheus's own arithmetic
(``rate()``'s extrapolation, ``histogram_quantile()``'s interpolation, ``deriv()``) is
ported from Prometheus 2.x: it is Prometheus's, not ours, and the expected values must
follow it exactly. ``tests.support.scrape_snapshot`` compares the two under promtool.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

Labels = tuple[tuple[str, str], ...]  # sorted, without __name__
WINDOW = 300.0  # seconds: the rules' 5m windows
LOOKBACK = 300.0  # Prometheus's instant-vector look-back
EVAL_INTERVAL = 5  # seconds between rule evaluations (the recorded series' sample times)


@dataclass(frozen=True)
class Series:
    name: str
    labels: Labels
    points: tuple[tuple[int, float], ...]  # (ms since the first scrape, value)

    def get(self, key: str) -> str:
        return dict(self.labels).get(key, "")


# --- Prometheus's own arithmetic (2.x), restated -----------------------------------------


def prom_rate(points: Iterable[tuple[int, float]], at_ms: int, window_s: float) -> float | None:
    """``rate(x[window])`` at ``at_ms``: promql/functions.go extrapolatedRate (counter,
    extrapolated toward the range's ends, never below zero)."""
    start_ms = at_ms - int(window_s * 1000)
    pts = [(t, v) for t, v in points if start_ms <= t <= at_ms]
    if len(pts) < 2:
        return None
    result = pts[-1][1] - pts[0][1]
    prev = pts[0][1]
    for _, value in pts[1:]:
        if value < prev:  # a counter reset
            result += prev
        prev = value
    to_start = (pts[0][0] - start_ms) / 1000
    to_end = (at_ms - pts[-1][0]) / 1000
    sampled = (pts[-1][0] - pts[0][0]) / 1000
    average = sampled / (len(pts) - 1)
    if result > 0 and pts[0][1] >= 0:
        to_zero = sampled * (pts[0][1] / result)
        to_start = min(to_start, to_zero)
    threshold = average * 1.1
    extrapolated = sampled
    extrapolated += to_start if to_start < threshold else average / 2
    extrapolated += to_end if to_end < threshold else average / 2
    factor = extrapolated / sampled
    factor /= window_s
    return result * factor


def prom_instant(points: Iterable[tuple[int, float]], at_ms: int) -> float | None:
    found = [v for t, v in points if at_ms - LOOKBACK * 1000 <= t <= at_ms]
    return found[-1] if found else None


def prom_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """``histogram_quantile`` over (upper bound, count) pairs: promql/quantile.go
    bucketQuantile (coalesced, made monotonic, linear inside the bucket)."""
    merged: dict[float, float] = defaultdict(float)
    for bound, count in buckets:
        merged[bound] += count
    ordered = sorted(merged.items())
    if not ordered or not math.isinf(ordered[-1][0]) or len(ordered) < 2:
        return math.nan
    running, fixed = -math.inf, []
    for bound, count in ordered:
        running = max(running, count)
        fixed.append((bound, running))
    observations = fixed[-1][1]
    if observations == 0:
        return math.nan
    rank = q * observations
    b = next((i for i in range(len(fixed) - 1) if fixed[i][1] >= rank), len(fixed) - 1)
    if b == len(fixed) - 1:
        return fixed[-2][0]
    if b == 0 and fixed[0][0] <= 0:
        return fixed[0][0]
    start, end, count = 0.0, fixed[b][0], fixed[b][1]
    if b > 0:
        start = fixed[b - 1][0]
        count -= fixed[b - 1][1]
        rank -= fixed[b - 1][1]
    return start + (end - start) * (rank / count)


def prom_slope(points: list[tuple[int, float]]) -> float:
    """``deriv``'s least-squares slope (a constant series has slope 0 exactly)."""
    if all(v == points[0][1] for _, v in points):
        return 0.0
    n = len(points)
    xs = [t / 1000 for t, _ in points]
    ys = [v for _, v in points]
    sum_x, sum_y = sum(xs), sum(ys)
    cov = sum(x * y for x, y in zip(xs, ys, strict=True)) - sum_x * sum_y / n
    var = sum(x * x for x in xs) - sum_x * sum_x / n
    return cov / var


def prom_div(a: float, b: float) -> float:
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a)
    return a / b


def prom_round(value: float, scale: float) -> float:
    """``round(value * scale) / scale`` as PromQL computes it (funcRound: floor(v + 0.5))."""
    return math.floor(value * scale + 0.5) / scale


def parse_duration(text: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * units[u] for n, u in parts)


# --- what each rule means, stated again ------------------------------------------------

Result = dict[Labels, float]
MODEL = ("namespace", "model_name")
REPLICA = ("namespace", "model_name", "replica")
COUNTERS = {
    "drafts": "spec_decode_num_drafts_total",
    "draft_tokens": "spec_decode_num_draft_tokens_total",
    "accepted_tokens": "spec_decode_num_accepted_tokens_total",
    "generation_tokens": "generation_tokens_total",
    # vLLM's NIXL connector (P/D): finished transfers, failures, bytes, expired KV.
    "kv_transfers": "nixl_xfer_time_seconds_count",
    "kv_transfer_failures": "nixl_num_failed_transfers_total",
    "kv_transfer_bytes": "nixl_bytes_transferred_sum",
    "kv_transfer_expired_requests": "nixl_num_kv_expired_reqs_total",
}
HISTOGRAMS = {
    "ttft": "time_to_first_token_seconds",
    "itl": "inter_token_latency_seconds",
    "tpot": "request_time_per_output_token_seconds",
    "e2e": "e2e_request_latency_seconds",
    "queue": "request_queue_time_seconds",
    "kv_transfer": "nixl_xfer_time_seconds",
}
KV_QUANTILES = ("0.5", "0.9")
# Ray Serve LLM's P/D deployments are "Prefill:<model>" and "Decode:<model>".
ROLE_PREFIXES = {"Prefill:": "prefill", "Decode:": "decode"}
SLO_WINDOWS = {"30m": 1800.0, "1h": 3600.0, "6h": 21600.0}


def _key(labels: dict[str, str], keys: Iterable[str]) -> Labels:
    return tuple(sorted((k, labels[k]) for k in keys if labels.get(k)))


def _with(labels: Labels, **extra: str) -> Labels:
    return tuple(sorted({**dict(labels), **extra}.items()))


def _sum(items: Iterable[tuple[dict[str, str], float]], by: Iterable[str]) -> Result:
    by = tuple(by)
    out: Result = defaultdict(float)
    for labels, value in items:
        out[_key(labels, by)] += value
    return dict(out)


def _replica(labels: dict[str, str]) -> dict[str, str]:
    """Ray's ReplicaId, or the scrape instance for vLLM's own server."""
    replica = labels.get("ReplicaId") or labels.get("instance")
    out = {k: v for k, v in labels.items() if k != "replica"}
    return out | ({"replica": replica} if replica else {})


def _one_to_one(a: Result, b: Result, op: Callable[[float, float], float]) -> Result:
    return {k: op(v, b[k]) for k, v in a.items() if k in b}


def _on(a: Result, b: Result, op: Callable, on=MODEL, group_left: bool = False) -> Result:
    """``a OP on (on) b``: each of a's series against b's with the same ``on`` labels.
    One-to-one, the result keeps only the ``on`` labels; ``group_left`` keeps a's."""
    right = {_key(dict(k), on): v for k, v in b.items()}
    out = {}
    for k, v in a.items():
        match = right.get(_key(dict(k), on))
        if match is not None:
            out[k if group_left else _key(dict(k), on)] = op(v, match)
    return out


def _where(a: Result, keep: Callable[[Labels, float], bool]) -> Result:
    return {k: v for k, v in a.items() if keep(k, v)}


def _and_on(a: Result, b: Result, on=MODEL) -> Result:
    present = {_key(dict(k), on) for k in b}
    return {k: v for k, v in a.items() if _key(dict(k), on) in present}


class Expected:
    """Every dsv4 rule's result at ``at_ms`` from raw (scraped) series alone; ``defaults``
    are the thresholds the rules fall back to (the preset schema's)."""

    def __init__(self, series: Iterable[Series], at_ms: int, defaults: dict[str, float]) -> None:
        self.at, self.defaults = at_ms, defaults
        self._cache: dict[str, Result] = {}
        self._by_name: dict[str, list[Series]] = defaultdict(list)
        for s in series:
            self._by_name[s.name].append(s)

    # selections
    def _select(self, *names: str, **match: str) -> list[Series]:
        return [
            s
            for n in names
            for s in self._by_name.get(n, [])
            if all(s.get(k) == v for k, v in match.items())
        ]

    def _vllm(self, name: str, **match: str) -> list[Series]:
        return self._select(f"vllm:{name}", f"ray_vllm_{name}", **match)

    def _rates(self, series: list[Series], window: float = WINDOW):
        for s in series:
            value = prom_rate(s.points, self.at, window)
            if value is not None:
                yield dict(s.labels), value

    def _instants(self, series: list[Series]):
        for s in series:
            value = prom_instant(s.points, self.at)
            if value is not None:
                yield dict(s.labels), value

    # rules
    def value(self, name: str) -> Result:
        if name not in self._cache:
            self._cache[name] = self._compute(name)
        return self._cache[name]

    def _compute(self, name: str) -> Result:  # noqa: C901 (one branch per rule family)
        v = self.value
        rest = name.removeprefix("dsv4:")
        if name == "dsv4:engines:count":
            presence = self._vllm("num_requests_running") + self._vllm("generation_tokens_total")
            engines = {
                _key(labels, (*MODEL, "instance", "ReplicaId", "engine"))
                for labels, _ in self._instants(presence)
            }
            return _sum(((dict(e), 1.0) for e in engines), MODEL)
        if rest.startswith("threshold:"):
            field = rest.split(":", 1)[1]
            exported: Result = {}
            gauges = self._select("dsv4_monitoring_threshold", threshold=field)
            for labels, value in self._instants(gauges):
                key = _key(labels, MODEL)
                exported[key] = max(exported.get(key, -math.inf), value)
            default = {k: 0 * c + self.defaults[field] for k, c in v("dsv4:engines:count").items()}
            return exported | {k: d for k, d in default.items() if k not in exported}
        for short, metric in COUNTERS.items():
            if rest == f"{short}:rate5m":
                return _sum(self._rates(self._vllm(metric)), MODEL)
            if rest == f"{short}:replica_rate5m":
                rates = self._rates(self._vllm(metric))
                return _sum(((_replica(lab), r) for lab, r in rates), REPLICA)
        if rest == "accepted_tokens_per_position:rate5m":
            rates = self._rates(self._vllm("spec_decode_num_accepted_tokens_per_pos_total"))
            return _sum(rates, (*MODEL, "position"))
        if rest == "accepted_tokens_per_position:replica_rate5m":
            rates = self._rates(self._vllm("spec_decode_num_accepted_tokens_per_pos_total"))
            return _sum(((_replica(lab), r) for lab, r in rates), (*REPLICA, "position"))
        if rest == "verified_tokens_per_position:replica_rate5m":
            # vLLM checks the token at position p only when every earlier one was accepted:
            # drafts (p = 0) or tokens accepted at p - 1, where the replica's mean draft
            # length is at least p + 0.9 (nearly every draft reaches p).
            lengths = v("dsv4:spec_decode_draft_length:replica_ratio5m")
            reaches = lambda key, p: lengths.get(key, math.nan) >= p + 0.9  # noqa: E731
            out = {
                _with(key, position="0"): drafts
                for key, drafts in v("dsv4:drafts:replica_rate5m").items()
                if reaches(key, 0)
            }
            for key, accepted in v("dsv4:accepted_tokens_per_position:replica_rate5m").items():
                labels = dict(key)
                p = int(labels.pop("position")) + 1
                if reaches(_key(labels, REPLICA), p):
                    out[_key(labels, REPLICA) + (("position", str(p)),)] = accepted
            return {tuple(sorted(k)): x for k, x in out.items()}
        if rest in (
            "spec_decode_position_acceptance_rate:replica_ratio5m",
            "spec_decode_position_conditional_acceptance:replica_ratio5m",
        ):
            # A position with no counter (Ray exports none until it moves) counts as 0
            # wherever tokens are verified at it.
            accepted = v("dsv4:accepted_tokens_per_position:replica_rate5m")
            verified = v("dsv4:verified_tokens_per_position:replica_rate5m")
            zeros = {k: 0 * x for k, x in verified.items() if k not in accepted}
            if "conditional" in rest:
                both = accepted | zeros
                return {k: prom_div(a, verified[k]) for k, a in both.items() if k in verified}
            drafts = v("dsv4:drafts:replica_rate5m")
            shares = _on(accepted, drafts, prom_div, on=REPLICA, group_left=True)
            return shares | {k: z for k, z in zeros.items() if k not in shares}
        ratios = {
            "spec_decode_acceptance_rate:ratio5m": ("accepted_tokens", "draft_tokens", "rate5m"),
            "spec_decode_acceptance_rate:replica_ratio5m": (
                "accepted_tokens",
                "draft_tokens",
                "replica_rate5m",
            ),
            "spec_decode_draft_length:ratio5m": ("draft_tokens", "drafts", "rate5m"),
            "spec_decode_draft_length:replica_ratio5m": (
                "draft_tokens",
                "drafts",
                "replica_rate5m",
            ),
            "spec_decode_draft_share:ratio5m": ("accepted_tokens", "generation_tokens", "rate5m"),
        }
        if rest in ratios:
            top, bottom, kind = ratios[rest]
            return _one_to_one(v(f"dsv4:{top}:{kind}"), v(f"dsv4:{bottom}:{kind}"), prom_div)
        if rest.startswith("spec_decode_acceptance_length:"):
            kind = "rate5m" if rest.endswith(":ratio5m") else "replica_rate5m"
            accepted, drafts = v(f"dsv4:accepted_tokens:{kind}"), v(f"dsv4:drafts:{kind}")
            return _one_to_one(accepted, drafts, lambda a, d: 1 + prom_div(a, d))
        if rest == "spec_decode_position_acceptance_rate:ratio5m":
            per_position = v("dsv4:accepted_tokens_per_position:rate5m")
            return _on(per_position, v("dsv4:drafts:rate5m"), prom_div, group_left=True)
        if rest == "rejected_tokens:rate5m":
            drafted, accepted = v("dsv4:draft_tokens:rate5m"), v("dsv4:accepted_tokens:rate5m")
            return _one_to_one(drafted, accepted, lambda d, a: d - a)
        if rest == "spec_decode_breakeven_accepted_tokens:rate5m":
            cost = v("dsv4:threshold:draft_cost_ratio")
            return _on(v("dsv4:draft_tokens:rate5m"), cost, lambda d, c: d * c)
        if match := re.fullmatch(r"(\w+)_seconds:quantile(5m|30m|1h|6h)", rest):
            short, window = match.groups()
            quantiles = ("0.5", "0.9", "0.99") if window == "5m" else ("0.9",)
            if short == "kv_transfer":
                quantiles = KV_QUANTILES
            seconds = WINDOW if window == "5m" else SLO_WINDOWS[window]
            buckets: dict[Labels, list[tuple[float, float]]] = defaultdict(list)
            for labels, rate in self._rates(self._vllm(f"{HISTOGRAMS[short]}_bucket"), seconds):
                buckets[_key(labels, MODEL)].append((float(labels["le"]), rate))
            return {
                _with(key, quantile=q): prom_quantile(float(q), bs)
                for key, bs in buckets.items()
                for q in quantiles
            }
        if rest == "kv_transfer_bytes:mean5m":
            count = _sum(self._rates(self._vllm("nixl_bytes_transferred_count")), MODEL)
            return _one_to_one(v("dsv4:kv_transfer_bytes:rate5m"), count, prom_div)
        if rest.startswith("kv_transfer_failure_ratio:"):
            kind = "rate5m" if rest.endswith(":ratio5m") else "replica_rate5m"
            # A side with no series (a Ray counter that never moved) counts as 0.
            failed, done = v(f"dsv4:kv_transfer_failures:{kind}"), v(f"dsv4:kv_transfers:{kind}")
            keys = failed.keys() | done.keys()
            return {
                k: prom_div(failed.get(k, 0.0), failed.get(k, 0.0) + done.get(k, 0.0)) for k in keys
            }
        if rest == "serve_replica_role:info":
            gauges = self._select(
                "ray_serve_replica_processing_queries", "ray_serve_deployment_replica_healthy"
            )
            out = {}
            for labels, _ in self._instants(gauges):
                deployment = labels.get("deployment", "")
                for prefix, role in ROLE_PREFIXES.items():
                    if (
                        deployment.startswith(prefix)
                        and deployment != prefix
                        and labels.get("replica")
                    ):
                        key = _key(labels, ("namespace", "application", "deployment", "replica"))
                        out[_with(key, role=role)] = 1.0
            return out
        if rest in ("queue_seconds:role_quantile5m", "ttft_seconds:role_quantile5m"):
            metric = {"queue": "request_queue_time", "ttft": "time_to_first_token"}[
                rest.split("_seconds")[0]
            ]
            roles = {
                _key(dict(k), ("namespace", "replica")): dict(k)["role"]
                for k in v("dsv4:serve_replica_role:info")
            }
            by_role: dict[Labels, list[tuple[float, float]]] = defaultdict(list)
            for labels, rate in self._rates(self._vllm(f"{metric}_seconds_bucket")):
                role = roles.get(_key(_replica(labels), ("namespace", "replica")))
                if role:
                    key = _with(_key(labels, MODEL), role=role)
                    by_role[key].append((float(labels["le"]), rate))
            return {
                _with(key, quantile=q): prom_quantile(float(q), bs)
                for key, bs in by_role.items()
                for q in KV_QUANTILES
            }
        if rest in ("requests_running:sum", "requests_waiting:sum"):
            gauge = "num_requests_running" if "running" in rest else "num_requests_waiting"
            return _sum(self._instants(self._vllm(gauge)), MODEL)
        if rest == "requests_running:replica_sum":
            gauges = self._instants(self._vllm("num_requests_running"))
            return _sum(((_replica(lab), g) for lab, g in gauges), REPLICA)
        if rest == "kv_cache_usage:replica_max":
            out: Result = {}
            for labels, g in self._instants(self._vllm("kv_cache_usage_perc")):
                key = _key(_replica(labels), REPLICA)
                out[key] = max(out.get(key, -math.inf), g)
            return out
        if rest == "requests_finished:rate5m":
            rates = self._rates(self._vllm("request_success_total"))
            return _sum(rates, (*MODEL, "finished_reason"))
        if rest == "gateway_requests:rate5m":
            items = []
            for labels, rate in self._rates(self._select("dsv4_gateway_requests_total")):
                labels = dict(labels)
                status = labels.get("status", "")
                if len(status) == 3:
                    labels["code"] = status[0] + "xx"
                items.append((labels, rate))
            return _sum(items, (*MODEL, "code"))
        if rest == "gateway_error_ratio:ratio5m":
            by_code = v("dsv4:gateway_requests:rate5m")
            errors = _sum(((dict(k), r) for k, r in by_code.items() if ("code", "5xx") in k), MODEL)
            total = _sum(((dict(k), r) for k, r in by_code.items()), MODEL)
            return _one_to_one(errors, total, prom_div)
        if rest == "gateway_rejected:rate5m":
            rates = self._rates(self._select("dsv4_gateway_rejected_total"))
            return _sum(rates, MODEL)
        if rest == "serve_healthy_replicas:sum":
            gauges = self._instants(self._select("ray_serve_deployment_replica_healthy"))
            return _sum(gauges, ("namespace", "application", "deployment"))
        if rest in ("spec_guard_drafting_off_seconds:min", "spec_guard_k:max"):
            gauge, pick = (
                ("dsv4_spec_guard_drafting_off_seconds", min)
                if rest.endswith(":min")
                else ("dsv4_spec_guard_k", max)
            )
            out = {}
            for labels, g in self._instants(self._select(gauge)):
                key = _key(labels, MODEL)
                out[key] = pick(out[key], g) if key in out else g
            return out
        raise KeyError(f"no independent expectation for the recording rule {name}")

    # alert expressions: (labels, value) of each series the expression returns
    def alert(self, name: str, history: Callable[[int], Expected]) -> Result:
        v = self.value
        acceptance = v("dsv4:spec_decode_acceptance_rate:ratio5m")
        drafting = _where(v("dsv4:draft_tokens:rate5m"), lambda _, r: r > 0)
        below = lambda a, t: a < t  # noqa: E731
        if name in ("DSV4MTPAcceptanceCollapse", "DSV4MTPAcceptanceBelowBaseline"):
            field = "acceptance_floor" if "Collapse" in name else "acceptance_baseline"
            low = _where(_on(acceptance, v(f"dsv4:threshold:{field}"), below), lambda _, b: b)
            return _and_on({k: acceptance[k] for k in low}, drafting)
        if name == "DSV4MTPPositionZeroCollapse":
            rates = v("dsv4:spec_decode_position_acceptance_rate:ratio5m")
            first = {k: r for k, r in rates.items() if ("position", "0") in k}
            low = _on(first, v("dsv4:threshold:acceptance_floor"), below, group_left=True)
            return _and_on({k: first[k] for k, b in low.items() if b}, drafting)
        if name == "DSV4MTPAcceptanceCollapsedAtPosition":
            rates = v("dsv4:spec_decode_position_conditional_acceptance:replica_ratio5m")
            verified = v("dsv4:verified_tokens_per_position:replica_rate5m")
            return {k: r for k, r in rates.items() if r < 0.02 and verified.get(k, 0) >= 1}
        if name == "DSV4SpeculationNotPayingOff":
            accepted = v("dsv4:accepted_tokens:rate5m")
            low = _on(accepted, v("dsv4:spec_decode_breakeven_accepted_tokens:rate5m"), below)
            return {k: accepted[k] for k, b in low.items() if b}
        if match := re.fullmatch(r"DSV4(TTFT|TPOT)SLOBurn(Fast|Slow)", name):
            short, speed = match.group(1).lower(), match.group(2)
            windows = ("5m", "1h") if speed == "Fast" else ("30m", "6h")
            slo = v(f"dsv4:threshold:{short}_slo_seconds")
            over = []
            for window in windows:
                q = v(f"dsv4:{short}_seconds:quantile{window}")
                q = {_key(dict(k), MODEL): x for k, x in q.items() if ("quantile", "0.9") in k}
                over.append({k: q[k] for k, b in _on(q, slo, lambda x, t: x > t).items() if b})
            return {k: x for k, x in over[0].items() if k in over[1]}
        if name == "DSV4SpecGuardDraftingOff":
            off = v("dsv4:spec_guard_drafting_off_seconds:min")
            low = _on(off, v("dsv4:threshold:guard_off_alert_seconds"), lambda o, t: o > t)
            return {k: off[k] for k, b in low.items() if b}
        if name == "DSV4NoReadyReplicas":
            return _where(v("dsv4:serve_healthy_replicas:sum"), lambda _, h: h == 0)
        if name == "DSV4EngineDown":
            earlier_ms = self.at - 15 * 60 * 1000
            before = history(earlier_ms).value("dsv4:engines:count") if earlier_ms >= 0 else {}
            now = {_key(dict(k), MODEL) for k in v("dsv4:engines:count")}
            return {k: c for k, c in before.items() if _key(dict(k), MODEL) not in now}
        if name == "DSV4RequestsFailing":
            return _where(v("dsv4:gateway_error_ratio:ratio5m"), lambda _, r: r > 0.05)
        if name == "DSV4RequestsRejected":
            return _where(v("dsv4:gateway_rejected:rate5m"), lambda _, r: r > 0)
        if name == "DSV4KVTransferFailing":
            ratios = v("dsv4:kv_transfer_failure_ratio:replica_ratio5m")
            return _where(ratios, lambda _, r: r > 0.01)
        if name == "DSV4QueueGrowing":
            waiting = _where(v("dsv4:requests_waiting:sum"), lambda _, w: w > 0)
            # deriv over the recorded series: its value at each evaluation in 10m.
            step, points = EVAL_INTERVAL * 1000, defaultdict(list)
            for t in range(self.at - (self.at % step), self.at - 600_000 - 1, -step):
                if t < 0:
                    break
                for k, w in history(t).value("dsv4:requests_waiting:sum").items():
                    points[k].insert(0, (t, w))
            growing = {k for k, p in points.items() if len(p) > 1 and prom_slope(p) > 0}
            return {k: w for k, w in waiting.items() if k in growing}
        raise KeyError(f"no independent expectation for the alert {name}")
