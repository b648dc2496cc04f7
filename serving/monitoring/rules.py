"""Prometheus recording rules and alerts for DSV4 + MTP, as data.

The rules read vLLM's series in both forms: ``vllm:*`` from vLLM's own server and
``ray_vllm_*`` through Ray's metrics export. Counters are summed over every engine
before any division, so ratios stay correct with several engines and replicas.
Thresholds come from the gateway's ``dsv4_monitoring_threshold`` gauge (the preset's
``monitoring`` block), with the schema's defaults when no gateway reports one.
"""

from __future__ import annotations

from typing import Any

from serving.config.preset import Monitoring, Speculation

BY_MODEL = "namespace, model_name"
BY_REPLICA = "namespace, model_name, replica"
QUANTILES = ("0.5", "0.9", "0.99")
SLO_QUANTILE = "0.9"
# Multi-window SLO burn: (short, long) windows for the page and the ticket.
FAST_BURN = ("5m", "1h")
SLOW_BURN = ("30m", "6h")
LATENCIES = {
    "ttft": "time_to_first_token_seconds",
    "itl": "inter_token_latency_seconds",
    "tpot": "request_time_per_output_token_seconds",
    "e2e": "e2e_request_latency_seconds",
    "queue": "request_queue_time_seconds",
}
ENGINE_PRESENCE = "|".join(
    f"{prefix}{name}"
    for prefix in ("vllm:", "ray_vllm_")
    for name in ("num_requests_running", "generation_tokens_total")
)
RUNBOOK = "https://github.com/dsv4-serve/dsv4-serve/blob/main/docs/monitoring.md"
# vLLM's NIXL connector series: the same names in 0.32 and 0.34
# (vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py, NixlPromMetrics). Histograms
# of one sample per finished NIXL transfer (one per request and remote rank), recorded by
# the engine that reads the KV (decode); counters get "_total" on export.
NIXL_XFER_SECONDS = "nixl_xfer_time_seconds"
NIXL_BYTES = "nixl_bytes_transferred"
# Transfer, handshake and notification failures together (KV expiry is apart).
NIXL_FAILED = "nixl_num_failed_transfers_total"
# Prefill's KV lease ran out before decode read it (counted on prefill).
NIXL_EXPIRED = "nixl_num_kv_expired_reqs_total"
KV_QUANTILES = ("0.5", "0.9")
ROLE_INFO = "dsv4:serve_replica_role:info"  # each P/D replica's role, for the joins below
# vLLM's labels (model_name, engine) are the same on both roles and kv_role is "kv_both"
# on both (serving/disagg/configs.py), so only Ray Serve's deployment names tell them
# apart: "Prefill:<model>" and "Decode:<model>" (serving/disagg/app.py; Ray Serve LLM's
# own P/D builder uses the same prefixes). vLLM's own server has no such label.
ROLE_DEPLOYMENTS = {"prefill": "Prefill:.+", "decode": "Decode:.+"}
# Ray Serve series that carry (deployment, replica); replica equals the engine's ReplicaId.
SERVE_REPLICA_SERIES = (
    "ray_serve_replica_processing_queries",
    "ray_serve_deployment_replica_healthy",
)
# A failed transfer fails its request (vLLM's kv_load_failure_policy "fail") or makes decode
# compute the prompt again ("recompute"): either way P/D is not working for it.
KV_FAILURE_RATIO_ALERT = 0.01
# A draft position whose token is accepted less often than this, of the times it is
# verified, has collapsed: V4-Flash's published rate on random tokens (k=2) is 0.41 at
# position 1 given position 0 accepted (vllm-project/vllm#41044), and a broken position
# accepts next to none (docs/monitoring.md, DSV4MTPAcceptanceCollapsedAtPosition).
POSITION_COLLAPSE_RATE = 0.02
# Below this many verified tokens/s at a position (300 in the 5m window) the rate is noise.
POSITION_COLLAPSE_MIN_VERIFIED = 1
# A position counts as drafted when the mean draft is at most this much shorter than
# reaching it: a guard or a batch-size table that drafts fewer tokens leaves it out.
DRAFT_LENGTH_SLACK = 0.1
# Every draft position the preset schema allows (num_speculative_tokens <= this).
MAX_DRAFT_POSITIONS = next(
    m.le for m in Speculation.model_fields["num_speculative_tokens"].metadata if hasattr(m, "le")
)


def vllm(name: str) -> str:
    """A selector matching vLLM's series under both of its exported names."""
    return f'{{__name__=~"vllm:{name}|ray_vllm_{name}"}}'


def with_replica(expr: str) -> str:
    # Ray labels each engine series with ReplicaId; vLLM's own server has only instance.
    by_instance = f'label_replace({expr}, "replica", "$1", "instance", "(.*)")'
    return f'label_replace({by_instance}, "replica", "$1", "ReplicaId", "(.+)")'


def _rate(name: str, window: str = "5m") -> str:
    return f"rate({vllm(name)}[{window}])"


def _sum(by: str, expr: str) -> str:
    return f"sum by ({by}) ({expr})"


def record(name: str, expr: str, **labels: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"record": name, "expr": expr}
    if labels:
        rule["labels"] = labels
    return rule


def _thresholds() -> list[dict[str, Any]]:
    defaults = Monitoring()
    rules = []
    for field in Monitoring.model_fields:
        exported = f'max by ({BY_MODEL}) (dsv4_monitoring_threshold{{threshold="{field}"}})'
        default = f"(0 * dsv4:engines:count + {getattr(defaults, field)})"
        rules.append(record(f"dsv4:threshold:{field}", f"{exported} or on ({BY_MODEL}) {default}"))
    return rules


def _verified_per_position() -> str:
    """Tokens/s verified at each draft position p of a replica: vLLM checks position p only
    when every earlier one was accepted, so those are the drafts/s (p = 0) or the tokens/s
    accepted at p - 1. Only positions (nearly) every draft reaches: the mean draft length is
    at least p + 1 - DRAFT_LENGTH_SLACK."""
    terms = []
    for p in range(MAX_DRAFT_POSITIONS):
        below = (
            "dsv4:drafts:replica_rate5m"
            if p == 0
            else f'dsv4:accepted_tokens_per_position:replica_rate5m{{position="{p - 1}"}}'
        )
        reached = f"{p + 1 - DRAFT_LENGTH_SLACK:g}"
        terms.append(
            f'(label_replace({below}, "position", "{p}", "", "") and on ({BY_REPLICA})'
            f" dsv4:spec_decode_draft_length:replica_ratio5m >= {reached})"
        )
    return " or ".join(terms)


def _per_position_replica() -> list[dict[str, Any]]:
    """Acceptance by draft position per replica. Through Ray a position never accepted has
    no counter at all: where tokens are verified at it, it counts as 0."""
    on = f"on ({BY_REPLICA}, position)"
    accepted = "dsv4:accepted_tokens_per_position:replica_rate5m"
    verified = "dsv4:verified_tokens_per_position:replica_rate5m"
    accepted_or_zero = f"({accepted} or {on} 0 * {verified})"
    per_pos = _rate("spec_decode_num_accepted_tokens_per_pos_total")
    return [
        record(accepted, _sum(f"{BY_REPLICA}, position", with_replica(per_pos))),
        record(
            "dsv4:spec_decode_draft_length:replica_ratio5m",
            "dsv4:draft_tokens:replica_rate5m / dsv4:drafts:replica_rate5m",
        ),
        record(verified, _verified_per_position()),
        record(
            "dsv4:spec_decode_position_acceptance_rate:replica_ratio5m",
            f"{accepted} / on ({BY_REPLICA}) group_left dsv4:drafts:replica_rate5m"
            f" or {on} 0 * {verified}",
        ),
        record(
            "dsv4:spec_decode_position_conditional_acceptance:replica_ratio5m",
            f"{accepted_or_zero} / {on} {verified}",
        ),
    ]


def _spec_decode() -> list[dict[str, Any]]:
    counters = {
        "drafts": "spec_decode_num_drafts_total",
        "draft_tokens": "spec_decode_num_draft_tokens_total",
        "accepted_tokens": "spec_decode_num_accepted_tokens_total",
        "generation_tokens": "generation_tokens_total",
    }
    # Through Ray an idle engine's gauges expire while its counters stay: an engine is
    # any (instance, replica, engine) with either.
    either = f'{{__name__=~"{ENGINE_PRESENCE}"}}'
    engine_ids = f"group by ({BY_MODEL}, instance, ReplicaId, engine) ({either})"
    engines = f"count by ({BY_MODEL}) ({engine_ids})"
    rules = [record("dsv4:engines:count", engines), *_thresholds()]
    for short, metric in counters.items():
        rules.append(record(f"dsv4:{short}:rate5m", _sum(BY_MODEL, _rate(metric))))
        rules.append(
            record(f"dsv4:{short}:replica_rate5m", _sum(BY_REPLICA, with_replica(_rate(metric))))
        )
    rules.append(
        record(
            "dsv4:accepted_tokens_per_position:rate5m",
            _sum(f"{BY_MODEL}, position", _rate("spec_decode_num_accepted_tokens_per_pos_total")),
        )
    )
    rules += [
        record(
            "dsv4:spec_decode_acceptance_rate:ratio5m",
            "dsv4:accepted_tokens:rate5m / dsv4:draft_tokens:rate5m",
        ),
        record(
            "dsv4:spec_decode_acceptance_rate:replica_ratio5m",
            "dsv4:accepted_tokens:replica_rate5m / dsv4:draft_tokens:replica_rate5m",
        ),
        record(
            "dsv4:spec_decode_acceptance_length:ratio5m",
            "1 + dsv4:accepted_tokens:rate5m / dsv4:drafts:rate5m",
        ),
        record(
            "dsv4:spec_decode_acceptance_length:replica_ratio5m",
            "1 + dsv4:accepted_tokens:replica_rate5m / dsv4:drafts:replica_rate5m",
        ),
        record(
            "dsv4:spec_decode_draft_length:ratio5m",
            "dsv4:draft_tokens:rate5m / dsv4:drafts:rate5m",
        ),
        record(
            "dsv4:spec_decode_position_acceptance_rate:ratio5m",
            f"dsv4:accepted_tokens_per_position:rate5m / on ({BY_MODEL}) group_left"
            " dsv4:drafts:rate5m",
        ),
        *_per_position_replica(),
        record(
            "dsv4:rejected_tokens:rate5m",
            "dsv4:draft_tokens:rate5m - dsv4:accepted_tokens:rate5m",
        ),
        record(
            "dsv4:spec_decode_draft_share:ratio5m",
            "dsv4:accepted_tokens:rate5m / dsv4:generation_tokens:rate5m",
        ),
        # Drafting pays off only while accepted tokens/s beat what the draft steps cost.
        record(
            "dsv4:spec_decode_breakeven_accepted_tokens:rate5m",
            f"dsv4:draft_tokens:rate5m * on ({BY_MODEL}) dsv4:threshold:draft_cost_ratio",
        ),
    ]
    return rules


def _quantile(q: str, metric: str, window: str) -> str:
    buckets = _sum(f"{BY_MODEL}, le", _rate(f"{metric}_bucket", window))
    return f"histogram_quantile({q}, {buckets})"


def _roles() -> str:
    """One series per Ray Serve replica of a P/D deployment, with its ``role``."""
    by_role = []
    for role, deployment in ROLE_DEPLOYMENTS.items():
        serve = " or ".join(
            f'{name}{{replica!="", deployment=~"{deployment}"}}' for name in SERVE_REPLICA_SERIES
        )
        replicas = f"group by (namespace, application, deployment, replica) ({serve})"
        by_role.append(f'label_replace({replicas}, "role", "{role}", "", "")')
    return " or ".join(by_role)


def _disaggregation() -> list[dict[str, Any]]:
    def failures(by: str, per_replica: bool) -> str:
        failed = _rate(NIXL_FAILED)
        return _sum(by, with_replica(failed) if per_replica else failed)

    rules = [
        record("dsv4:kv_transfers:rate5m", _sum(BY_MODEL, _rate(f"{NIXL_XFER_SECONDS}_count"))),
        record(
            "dsv4:kv_transfers:replica_rate5m",
            _sum(BY_REPLICA, with_replica(_rate(f"{NIXL_XFER_SECONDS}_count"))),
        ),
        *(
            record(
                "dsv4:kv_transfer_seconds:quantile5m",
                _quantile(q, NIXL_XFER_SECONDS, "5m"),
                quantile=q,
            )
            for q in KV_QUANTILES
        ),
        record("dsv4:kv_transfer_bytes:rate5m", _sum(BY_MODEL, _rate(f"{NIXL_BYTES}_sum"))),
        record(
            "dsv4:kv_transfer_bytes:mean5m",
            f"dsv4:kv_transfer_bytes:rate5m / {_sum(BY_MODEL, _rate(f'{NIXL_BYTES}_count'))}",
        ),
        record("dsv4:kv_transfer_failures:rate5m", failures(BY_MODEL, False)),
        record("dsv4:kv_transfer_failures:replica_rate5m", failures(BY_REPLICA, True)),
        record("dsv4:kv_transfer_expired_requests:rate5m", _sum(BY_MODEL, _rate(NIXL_EXPIRED))),
    ]
    # Through Ray a counter appears only once it moved: a missing side counts as 0, so
    # a replica whose every transfer failed still gets a ratio (1).
    for level, on in (("", BY_MODEL), ("replica_", BY_REPLICA)):
        failed = f"dsv4:kv_transfer_failures:{level}rate5m"
        done = f"dsv4:kv_transfers:{level}rate5m"
        failed_or_zero = f"({failed} or on ({on}) 0 * {done})"
        done_or_zero = f"({done} or on ({on}) 0 * {failed})"
        rules.append(
            record(
                f"dsv4:kv_transfer_failure_ratio:{level}ratio5m",
                f"{failed_or_zero} / on ({on}) ({failed_or_zero} + on ({on}) {done_or_zero})",
            )
        )
    rules.append(record(ROLE_INFO, _roles()))
    # Queue time and TTFT per role: engine series joined to their replica's role by
    # ReplicaId. On decode the queue time includes the wait for prefill's KV (vLLM counts a
    # request scheduled only once its remote KV has arrived). Each engine's TTFT starts when
    # the request reaches it: prefill's is the prompt's compute, decode's (which starts
    # after prefill answered) the KV's arrival and the first decode step; the client's TTFT
    # is the gateway's (dsv4_gateway_time_to_first_token_seconds), the two and the hops.
    for short in ("queue", "ttft"):
        series = with_replica(_rate(f"{LATENCIES[short]}_bucket"))
        joined = f"{series} * on (namespace, replica) group_left (role) {ROLE_INFO}"
        for q in KV_QUANTILES:
            buckets = _sum(f"{BY_MODEL}, role, le", joined)
            rules.append(
                record(
                    f"dsv4:{short}_seconds:role_quantile5m",
                    f"histogram_quantile({q}, {buckets})",
                    quantile=q,
                )
            )
    return rules


def _latency() -> list[dict[str, Any]]:
    rules = []
    for short, metric in LATENCIES.items():
        for q in QUANTILES:
            rules.append(
                record(f"dsv4:{short}_seconds:quantile5m", _quantile(q, metric, "5m"), quantile=q)
            )
    for short in ("ttft", "tpot"):
        for window in sorted({*FAST_BURN, *SLOW_BURN} - {"5m"}):
            rules.append(
                record(
                    f"dsv4:{short}_seconds:quantile{window}",
                    _quantile(SLO_QUANTILE, LATENCIES[short], window),
                    quantile=SLO_QUANTILE,
                )
            )
    return rules


def _load() -> list[dict[str, Any]]:
    gateway = "rate(dsv4_gateway_requests_total[5m])"
    gateway_by_code = f'label_replace({gateway}, "code", "${{1}}xx", "status", "(.)..")'
    rejected = "rate(dsv4_gateway_rejected_total[5m])"
    return [
        record("dsv4:requests_running:sum", _sum(BY_MODEL, vllm("num_requests_running"))),
        record("dsv4:requests_waiting:sum", _sum(BY_MODEL, vllm("num_requests_waiting"))),
        record(
            "dsv4:requests_running:replica_sum",
            _sum(BY_REPLICA, with_replica(vllm("num_requests_running"))),
        ),
        record(
            "dsv4:kv_cache_usage:replica_max",
            f"max by ({BY_REPLICA}) ({with_replica(vllm('kv_cache_usage_perc'))})",
        ),
        record(
            "dsv4:requests_finished:rate5m",
            _sum(f"{BY_MODEL}, finished_reason", _rate("request_success_total")),
        ),
        record("dsv4:gateway_requests:rate5m", _sum(f"{BY_MODEL}, code", gateway_by_code)),
        record(
            "dsv4:gateway_error_ratio:ratio5m",
            f'sum by ({BY_MODEL}) (dsv4:gateway_requests:rate5m{{code="5xx"}})'
            f" / sum by ({BY_MODEL}) (dsv4:gateway_requests:rate5m)",
        ),
        record("dsv4:gateway_rejected:rate5m", _sum(BY_MODEL, rejected)),
        record(
            "dsv4:serve_healthy_replicas:sum",
            "sum by (namespace, application, deployment) (ray_serve_deployment_replica_healthy)",
        ),
    ]


def alert(
    name: str, expr: str, for_: str, severity: str, summary: str, runbook: str
) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, "team": "dsv4-serve"},
        "annotations": {
            "summary": summary,
            "description": runbook,
            "runbook_url": f"{RUNBOOK}#{name.lower()}",
        },
    }


def _with_traffic(expr: str) -> str:
    return f"({expr}) and on ({BY_MODEL}) dsv4:draft_tokens:rate5m > 0"


def _slo_burn(short: str, label: str) -> list[dict[str, Any]]:
    def over(window: str) -> str:
        return (
            f'dsv4:{short}_seconds:quantile{window}{{quantile="{SLO_QUANTILE}"}}'
            f" > on ({BY_MODEL}) dsv4:threshold:{short}_slo_seconds"
        )

    what = f"p90 {label} of {{{{ $labels.model_name }}}} is above its SLO"
    advice = (
        f"p90 {label} is above the preset's {short}_slo_seconds over both windows. Check queue"
        " time and KV cache usage on the dashboard's latency row; add replicas (autoscaling"
        " max_replicas), lower max_num_seqs, or lower num_speculative_tokens if acceptance is low."
    )
    fast = f"{over(FAST_BURN[0])} and {over(FAST_BURN[1])}"
    slow = f"{over(SLOW_BURN[0])} and {over(SLOW_BURN[1])}"
    name = short.upper()
    return [
        alert(f"DSV4{name}SLOBurnFast", fast, "2m", "critical", f"{what} (5m and 1h)", advice),
        alert(f"DSV4{name}SLOBurnSlow", slow, "15m", "warning", f"{what} (30m and 6h)", advice),
    ]


def _guard() -> list[dict[str, Any]]:
    # Gauges of the speculation guard (serving/gateway/guard_metrics.py), one per engine.
    return [
        record(
            "dsv4:spec_guard_drafting_off_seconds:min",
            f"min by ({BY_MODEL}) (dsv4_spec_guard_drafting_off_seconds)",
        ),
        record("dsv4:spec_guard_k:max", f"max by ({BY_MODEL}) (dsv4_spec_guard_k)"),
    ]


# Said in the acceptance alert where the gateway says the model drafts greedily
# (dsv4_speculation_info): what that costs at temperature > 0.
DRAFT_SAMPLING_NOTE = (
    '{{ with printf "dsv4_speculation_info{namespace=%q, model_name=%q,'
    ' draft_sample_method=\\"greedy\\"}" $labels.namespace $labels.model_name | query }}'
    " Drafts are sampled greedily: at temperature > 0 a greedy draft is accepted only with"
    " the target's probability of the drafter's top token, so acceptance reads lower than"
    " with probabilistic drafts (speculation.draft_sample_method).{{ end }}"
)


def _alerts() -> list[dict[str, Any]]:
    collapse_advice = (
        "Draft tokens are being rejected: a broken MTP head or an HC-state bug does not crash,"
        " it collapses acceptance. Run `python -m model_overrides check --strict` in the image,"
        " check the overrides row of the dashboard for a patch that is 'unrecognised' or"
        " 'failed', and compare with the last good image. Mitigate by redeploying with"
        " speculation.method=none."
    )
    return [
        alert(
            "DSV4MTPAcceptanceCollapse",
            _with_traffic(
                f"dsv4:spec_decode_acceptance_rate:ratio5m < on ({BY_MODEL})"
                " dsv4:threshold:acceptance_floor"
            ),
            "10m",
            "critical",
            "MTP acceptance of {{ $labels.model_name }} fell to {{ $value | humanizePercentage }},"
            " below the preset's floor",
            collapse_advice,
        ),
        alert(
            "DSV4MTPAcceptanceBelowBaseline",
            _with_traffic(
                f"dsv4:spec_decode_acceptance_rate:ratio5m < on ({BY_MODEL})"
                " dsv4:threshold:acceptance_baseline"
            ),
            "30m",
            "warning",
            "MTP acceptance of {{ $labels.model_name }} is {{ $value | humanizePercentage }},"
            " below the preset's baseline",
            "Acceptance is lower than this preset normally sees. Traffic with a different"
            " shape (code, other languages, high temperature) lowers it too; compare per"
            " position and per replica on the dashboard before acting. "
            + collapse_advice
            + DRAFT_SAMPLING_NOTE,
        ),
        alert(
            "DSV4MTPPositionZeroCollapse",
            _with_traffic(
                f'dsv4:spec_decode_position_acceptance_rate:ratio5m{{position="0"}}'
                f" < on ({BY_MODEL}) group_left dsv4:threshold:acceptance_floor"
            ),
            "10m",
            "critical",
            "First draft position of {{ $labels.model_name }} is accepted"
            " {{ $value | humanizePercentage }} of the time",
            "Position 0 is the draft head's easiest guess; when it collapses the draft model"
            " receives wrong hidden states (the HC state contract between the decoder and the"
            " MTP layer). " + collapse_advice,
        ),
        alert(
            "DSV4MTPAcceptanceCollapsedAtPosition",
            "dsv4:spec_decode_position_conditional_acceptance:replica_ratio5m"
            f" < {POSITION_COLLAPSE_RATE} and on ({BY_REPLICA}, position)"
            " dsv4:verified_tokens_per_position:replica_rate5m"
            f" >= {POSITION_COLLAPSE_MIN_VERIFIED}",
            "10m",
            "critical",
            "Draft position {{ $labels.position }} of {{ $labels.model_name }} on replica"
            " {{ $labels.replica }} is accepted {{ $value | humanizePercentage }} of the times"
            " it is verified",
            "A draft position has stopped being accepted on this replica while drafts still"
            " reach it (every earlier position accepted); the mean acceptance can still look"
            " tolerable, so DSV4MTPAcceptanceCollapse may stay quiet. Reported upstream: past a"
            " context position of 32768 tokens vLLM stops accepting drafts engine-wide"
            " (vllm-project/vllm#52873). Compare the context lengths this replica serves (long"
            " prompts and conversations, max_model_len) with that limit. Check the dashboard's"
            " speculation guard row: with speculation.guard.mode adaptive the guard lowers k"
            " by itself when drafts stop paying, and this alert goes quiet once drafts no"
            " longer reach the position. Otherwise lower num_speculative_tokens (k) to the"
            " positions still accepted, or turn speculation off (speculation.method=none)."
            " Position 0 collapsing on every replica points at the draft head or the"
            " checkpoint: see DSV4MTPAcceptanceCollapse.",
        ),
        alert(
            "DSV4SpeculationNotPayingOff",
            f"dsv4:accepted_tokens:rate5m < on ({BY_MODEL})"
            " dsv4:spec_decode_breakeven_accepted_tokens:rate5m",
            "15m",
            "warning",
            "Speculation on {{ $labels.model_name }} costs more than it gains",
            "Accepted draft tokens/s are below draft tokens/s x draft_cost_ratio: the draft"
            " steps cost more target time than the accepted tokens save, so decoding is slower"
            " than without speculation. Lower num_speculative_tokens (k) or turn speculation off"
            " for this traffic; if acceptance also collapsed, see DSV4MTPAcceptanceCollapse.",
        ),
        alert(
            "DSV4SpecGuardDraftingOff",
            f"dsv4:spec_guard_drafting_off_seconds:min > on ({BY_MODEL})"
            " dsv4:threshold:guard_off_alert_seconds",
            "1m",
            "warning",
            "The speculation guard of {{ $labels.model_name }} has kept drafting off for"
            " {{ $value }} s on every engine",
            "The guard turned drafting off because drafts are not accepted often enough to"
            " pay for themselves, and its probe steps have not seen acceptance return. The"
            " service is as fast as without speculation, but the draft head or the"
            " checkpoint conversion is likely broken (see DSV4MTPAcceptanceCollapse's"
            " advice). The dashboard's guard row shows k beside acceptance.",
        ),
        *_slo_burn("ttft", "time to first token"),
        *_slo_burn("tpot", "time per output token"),
        alert(
            "DSV4NoReadyReplicas",
            "dsv4:serve_healthy_replicas:sum == 0",
            "5m",
            "critical",
            "Ray Serve deployment {{ $labels.deployment }} has no healthy replica",
            "No replica of this deployment passes its health check, so the API cannot answer."
            " Check `kubectl describe rayservice` and the Ray dashboard for replica start-up"
            " errors (out of GPU memory, a model path that does not exist, a failed override).",
        ),
        alert(
            "DSV4EngineDown",
            f"(dsv4:engines:count offset 15m) unless on ({BY_MODEL}) dsv4:engines:count",
            "5m",
            "critical",
            "No vLLM engine of {{ $labels.model_name }} reports metrics any more",
            "Engines of this model reported 15 minutes ago and none do now: the engine"
            " processes died or their metrics endpoint is gone. Check the replica logs for"
            " an EngineCore crash and the pods for OOMKilled.",
        ),
        alert(
            "DSV4RequestsFailing",
            "dsv4:gateway_error_ratio:ratio5m > 0.05",
            "5m",
            "critical",
            "{{ $value | humanizePercentage }} of requests to {{ $labels.model_name }} fail"
            " with 5xx",
            "More than 5% of API requests end in a server error. Look at the gateway's"
            " requests-by-code panel and the replica logs; engine crashes show as 500/503.",
        ),
        alert(
            "DSV4RequestsRejected",
            "dsv4:gateway_rejected:rate5m > 0",
            "10m",
            "warning",
            "Requests to {{ $labels.model_name }} are being rejected for overload",
            "The bounded queue is full and the gateway answers 429/503. Raise"
            " autoscaling.max_replicas or deployment.max_queued_requests, or add nodes.",
        ),
        alert(
            "DSV4KVTransferFailing",
            f"dsv4:kv_transfer_failure_ratio:replica_ratio5m > {KV_FAILURE_RATIO_ALERT}",
            "10m",
            "critical",
            "{{ $value | humanizePercentage }} of KV transfers of {{ $labels.model_name }}"
            " fail on replica {{ $labels.replica }}",
            "NIXL transfers of prompt KV from prefill to decode fail (transfer, handshake or"
            " notification). Each one fails its request (vLLM's kv_load_failure_policy"
            " 'fail') or makes decode compute the prompt again ('recompute': late, and more"
            " load on decode). The replica is the one that reads the KV (decode). Check its logs"
            " for NIXL errors, that prefill replicas are up and reachable on their NIXL side"
            " channel ports, and the dashboard's disaggregation row for expired KV (prefill"
            " freed it before decode read it).",
        ),
        alert(
            "DSV4QueueGrowing",
            "dsv4:requests_waiting:sum > 0 and deriv(dsv4:requests_waiting:sum[10m]) > 0",
            "10m",
            "warning",
            "The engine queue of {{ $labels.model_name }} keeps growing",
            "Requests wait for KV cache or batch slots longer each minute. Check KV cache"
            " usage per replica; scale out before queue time reaches the TTFT SLO.",
        ),
    ]


def rule_groups() -> dict[str, Any]:
    """The rules file (Prometheus ``rule_files`` format; the chart wraps it in a PrometheusRule)."""
    return {
        "groups": [
            {"name": "dsv4-speculative-decoding", "rules": [*_spec_decode(), *_guard()]},
            {"name": "dsv4-latency-load", "rules": [*_latency(), *_load()]},
            {"name": "dsv4-disaggregation", "rules": _disaggregation()},
            {"name": "dsv4-alerts", "rules": _alerts()},
        ]
    }
