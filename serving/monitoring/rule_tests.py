"""promtool unit tests of the rules, as data: `dsv4-serve generate` writes them to
helm/dsv4-serve/files/dsv4-rules.test.yaml beside the rules file, so that

    promtool test rules helm/dsv4-serve/files/dsv4-rules.test.yaml

runs them alone. Two engines of "flash" through Ray (``ray_vllm_*``, ReplicaId r1 and
r2) and one of "weak" on vLLM's own server (``vllm:*``), a model whose engine stops
reporting, the gateway's thresholds and requests, and "pd" served disaggregated through
Ray (a prefill replica p1, decode replicas d1 to d3 over NIXL). A second test holds draft
positions that collapse (``position_collapse_test``). Expected values are worked out by
hand from the input series; the expected annotations are the rules' own templates
rendered as Prometheus renders them, so rewording an alert needs no edit here.
"""

from __future__ import annotations

from typing import Any

from serving.monitoring.rules import (
    DRAFT_SAMPLING_NOTE,
    KV_QUANTILES,
    LATENCIES,
    QUANTILES,
    rule_groups,
)

RULES_FILE = "dsv4-rules.yaml"  # promtool reads it relative to the test file

NS = "prod"
# flash: two engines through Ray (ReplicaId r1, r2); weak: one engine on vLLM's server.
FLASH = {"namespace": NS, "model_name": "flash", "instance": "node-a:8080"}
WEAK = {"namespace": NS, "model_name": "weak", "instance": "10.0.0.5:8000", "engine": "0"}
WEAK_REPLICA = WEAK["instance"]
# pd: Ray Serve LLM's P/D deployments (serving/disagg/app.py names them by role).
PD = {"namespace": NS, "model_name": "pd", "instance": "node-b:8080", "engine": "0"}
PD_DEPLOYMENTS = {"p1": "Prefill:pd", "d1": "Decode:pd", "d2": "Decode:pd", "d3": "Decode:pd"}
MIB = 2**20
SERVE_QUERIES = "ray_serve_replica_processing_queries"
MINUTES = 400


# How each model's drafts are sampled in the input series (dsv4_speculation_info).
DRAFT_SAMPLING = {"flash": "greedy", "weak": "probabilistic"}


def series(name: str, labels: dict[str, str], per_minute: float, start: float = 0) -> dict:
    return {"series": _sel(name, labels), "values": f"{start}+{per_minute}x{MINUTES}"}


def constant(name: str, labels: dict[str, str], value: float) -> dict:
    return {"series": _sel(name, labels), "values": f"{value}x{MINUTES}"}


def flash_engine(replica: str, metric: str, per_minute: float, **extra: str) -> dict:
    labels = {**FLASH, "engine": "0", "ReplicaId": replica, **extra}
    return series(f"ray_vllm_{metric}", labels, per_minute)


def weak_engine(metric: str, per_minute: float, **extra: str) -> dict:
    return series(f"vllm:{metric}", {**WEAK, **extra}, per_minute)


def pd_engine(replica: str, metric: str, per_minute: float, **extra: str) -> dict:
    return series(f"ray_vllm_{metric}", {**PD, "ReplicaId": replica, **extra}, per_minute)


def histogram(metric: str, bounds: list[float], hot: float, add, n: int = 10) -> list[dict]:
    """Every observation (``n`` a minute) lands in the bucket whose upper bound is ``hot``."""
    counts = [(str(le), n if le >= hot else 0) for le in bounds] + [("+Inf", n)]
    buckets = [add(f"{metric}_bucket", c, le=le) for le, c in counts]
    return [*buckets, add(f"{metric}_count", n)]


def disaggregated_series() -> list[dict]:
    """pd, in counts a minute that make exact rates (x/60 a power of two): p1 prefills
    (15 queued <= 0.05 s and 15 first tokens <= 0.05 s, 15 expired KV leases); d1 reads 15
    transfers of 1 MiB and never failed (Ray exports no failure counter); d2 reads 15 of 2
    MiB and fails 3.75; d3 only fails (7.5). Decode's queue time and TTFT (15 a replica) sit
    in (0.05, 0.1]. weak reads KV too, on vLLM's own server, with its failure counter at 0."""
    s = []
    serve = {"namespace": NS, "application": "dsv4"}
    for replica, deployment in PD_DEPLOYMENTS.items():
        labels = {**serve, "deployment": deployment, "replica": replica}
        # d3 only through the controller's health gauge (the replica's own gauge expired).
        name = "ray_serve_deployment_replica_healthy" if replica == "d3" else SERVE_QUERIES
        s.append(constant(name, labels, 1 if replica == "d3" else 0))
    # flash's r1 serves a deployment that is not P/D: its engine gets no role.
    s.append(constant(SERVE_QUERIES, {**serve, "deployment": "Dsv4Server", "replica": "r1"}, 0))

    def add(replica: str):
        return lambda metric, n, **extra: pd_engine(replica, metric, n, **extra)

    s.append(pd_engine("p1", "nixl_num_kv_expired_reqs_total", 15))
    # Prefill's queue time and TTFT (15 a minute) sit in (0, 0.05], decode's in (0.05, 0.1].
    for metric in ("request_queue_time_seconds", "time_to_first_token_seconds"):
        s += histogram(metric, [0.05, 0.1], 0.05, add("p1"), n=15)
        for replica in ("d1", "d2", "d3"):
            s += histogram(metric, [0.05, 0.1], 0.1, add(replica), n=15)
    for replica, mib in (("d1", 1), ("d2", 2)):
        s += histogram("nixl_xfer_time_seconds", [0.01, 0.025], 0.025, add(replica), n=15)
        s += [
            pd_engine(replica, "nixl_bytes_transferred_sum", 15 * mib * MIB),
            pd_engine(replica, "nixl_bytes_transferred_count", 15),
        ]
    s.append(pd_engine("d2", "nixl_num_failed_transfers_total", 3.75))
    s.append(pd_engine("d3", "nixl_num_failed_transfers_total", 7.5))
    s += histogram("nixl_xfer_time_seconds", [0.005, 0.01], 0.005, weak_engine, n=6)
    s.append(constant("vllm:nixl_num_failed_transfers_total", WEAK, 0))
    return s


def input_series() -> list[dict]:
    s = []
    for replica, draft, accepted, drafts, pos0, pos1, output, kv_usage in [
        ("r1", 60, 48, 30, 27, 21, 90, 0.25),
        ("r2", 120, 60, 60, 36, 24, 150, 0.5),
    ]:

        def add(metric, per_minute, replica=replica, **extra):
            return flash_engine(replica, metric, per_minute, **extra)

        s += [
            add("spec_decode_num_draft_tokens_total", draft),
            add("spec_decode_num_accepted_tokens_total", accepted),
            add("spec_decode_num_drafts_total", drafts),
            add("spec_decode_num_accepted_tokens_per_pos_total", pos0, position="0"),
            add("spec_decode_num_accepted_tokens_per_pos_total", pos1, position="1"),
            add("generation_tokens_total", output),
            add("request_success_total", 6, finished_reason="length"),
            {**add("num_requests_running", 0), "values": f"4x{MINUTES}"},
            {**add("num_requests_waiting", 0), "values": f"2x{MINUTES}"},
            {**add("kv_cache_usage_perc", 0), "values": f"{kv_usage}x{MINUTES}"},
        ]
        s += histogram("time_to_first_token_seconds", [1.0, 2.5], 2.5, add)
        s += histogram("request_time_per_output_token_seconds", [0.05, 0.1], 0.1, add)
        for metric in ("inter_token_latency_seconds", "e2e_request_latency_seconds"):
            s += histogram(metric, [0.05, 0.1], 0.1, add)
        s += histogram("request_queue_time_seconds", [0.05, 0.1], 0.05, add)
    s += [
        weak_engine("spec_decode_num_draft_tokens_total", 60),
        weak_engine("spec_decode_num_accepted_tokens_total", 3),
        weak_engine("spec_decode_num_drafts_total", 60),
        weak_engine("spec_decode_num_accepted_tokens_per_pos_total", 3, position="0"),
        weak_engine("generation_tokens_total", 63),
        {**weak_engine("num_requests_running", 0), "values": f"1x{MINUTES}"},
        weak_engine("num_requests_waiting", 1),  # grows by one a minute
    ]
    s += histogram("time_to_first_token_seconds", [0.5, 1.0], 0.5, weak_engine)
    s += histogram("request_time_per_output_token_seconds", [0.05, 0.1], 0.05, weak_engine)
    # A model whose only engine stops reporting after 100 minutes.
    gone = {"namespace": NS, "model_name": "gone", "ReplicaId": "g1", "engine": "0"}
    s.append({"series": _sel("ray_vllm_num_requests_running", gone), "values": "0x100"})
    # The gateway of flash: thresholds of its preset, requests, overload rejections.
    for name, value in {
        "acceptance_baseline": 0.65,
        "acceptance_floor": 0.4,
        "ttft_slo_seconds": 2.0,
        "tpot_slo_seconds": 0.1,
        "draft_cost_ratio": 0.05,
    }.items():
        labels = {"namespace": NS, "model_name": "flash", "threshold": name}
        s.append(constant("dsv4_monitoring_threshold", labels, value))
    # How the gateway says each model's drafts are sampled (DRAFT_SAMPLING below): the
    # below-baseline alert adds its note for greedy flash, not for probabilistic weak.
    for model, sampling in DRAFT_SAMPLING.items():
        labels = {"namespace": NS, "model_name": model, "method": "mtp"}
        labels |= {"num_speculative_tokens": "2", "draft_sample_method": sampling}
        s.append(constant("dsv4_speculation_info", labels, 1))
    gw = {"namespace": NS, "model_name": "flash", "route": "/v1/completions"}
    s += [
        series("dsv4_gateway_requests_total", {**gw, "status": "200"}, 90),
        series("dsv4_gateway_requests_total", {**gw, "status": "500"}, 30),
        series("dsv4_gateway_rejected_total", {**gw, "status": "429"}, 6),
    ]
    # The speculation guard: flash's two engines, one drafting (k=2, off 0 s) and one
    # off for 700 s; weak's only engine off for 900 s, past the default 600 s.
    for labels, k, off in [
        ({**FLASH, "engine_pid": "1"}, 2, 0),
        ({**FLASH, "engine_pid": "2"}, 0, 700),
        ({**WEAK, "engine_pid": "3"}, 0, 900),
    ]:
        s.append(constant("dsv4_spec_guard_k", labels, k))
        s.append(constant("dsv4_spec_guard_drafting_off_seconds", labels, off))
    for deployment, healthy in [("LLMServer:flash", 1), ("LLMServer:weak", 0)]:
        labels = {"application": "dsv4", "deployment": deployment, "replica": "x"}
        s.append(constant("ray_serve_deployment_replica_healthy", labels, healthy))
    return s + disaggregated_series()


def _sel(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


FLASH_KEY = {"namespace": NS, "model_name": "flash"}
WEAK_KEY = {"namespace": NS, "model_name": "weak"}


def expect(expr: str, *samples: tuple[dict[str, str], float], at: str = "390m") -> dict:
    return {
        "expr": expr,
        "eval_time": at,
        "exp_samples": [
            {"labels": _sel(expr.split("{")[0], lab), "value": v} for lab, v in samples
        ],
    }


def per_replica(expr: str, r1: float, r2: float, weak: float | None = None) -> dict:
    """``expr`` per replica: flash's r1 and r2 (Ray's ReplicaId), and weak's (the scrape
    instance of vLLM's own server) unless ``weak`` is None."""
    samples = [({**FLASH_KEY, "replica": "r1"}, r1), ({**FLASH_KEY, "replica": "r2"}, r2)]
    if weak is not None:
        samples.append(({**WEAK_KEY, "replica": WEAK_REPLICA}, weak))
    return expect(expr, *samples)


def recording_tests() -> list[dict]:
    f, w = FLASH_KEY, WEAK_KEY
    tests = [
        expect("dsv4:engines:count", (f, 2), (w, 1)),
        # Summed over engines, then divided: 1.8/3 = 0.6, not the mean of 0.8 and 0.5.
        expect("dsv4:draft_tokens:rate5m", (f, 3.0), (w, 1.0)),
        expect("dsv4:accepted_tokens:rate5m", (f, 1.8), (w, 0.05)),
        expect("dsv4:drafts:rate5m", (f, 1.5), (w, 1.0)),
        expect("dsv4:generation_tokens:rate5m", (f, 4.0), (w, 1.05)),
        expect("dsv4:spec_decode_acceptance_rate:ratio5m", (f, 0.6), (w, 0.05)),
        expect("dsv4:spec_decode_acceptance_length:ratio5m", (f, 2.2), (w, 1.05)),
        expect("dsv4:spec_decode_draft_length:ratio5m", (f, 2.0), (w, 1.0)),
        expect("dsv4:rejected_tokens:rate5m", (f, 1.2), (w, 0.95)),
        expect("dsv4:spec_decode_draft_share:ratio5m", (f, 0.45), (w, 0.05 / 1.05)),
        expect(
            "dsv4:accepted_tokens_per_position:rate5m",
            ({**f, "position": "0"}, 1.05),
            ({**f, "position": "1"}, 0.75),
            ({**w, "position": "0"}, 0.05),
        ),
        expect(
            "dsv4:spec_decode_position_acceptance_rate:ratio5m",
            ({**f, "position": "0"}, 1.05 / 1.5),
            ({**f, "position": "1"}, 0.5),
            ({**w, "position": "0"}, 0.05),
        ),
        expect("dsv4:spec_decode_breakeven_accepted_tokens:rate5m", (f, 3.0 * 0.05), (w, 0.1)),
        # Per replica: Ray's ReplicaId, or the scrape instance for vLLM's own server.
        per_replica("dsv4:spec_decode_acceptance_rate:replica_ratio5m", 0.8, 0.5, 0.05),
        per_replica("dsv4:spec_decode_acceptance_length:replica_ratio5m", 1 + 0.8 / 0.5, 2.0, 1.05),
        per_replica("dsv4:draft_tokens:replica_rate5m", 1.0, 2.0, 1.0),
        per_replica("dsv4:accepted_tokens:replica_rate5m", 0.8, 1.0, 0.05),
        per_replica("dsv4:drafts:replica_rate5m", 0.5, 1.0, 1.0),
        per_replica("dsv4:generation_tokens:replica_rate5m", 1.5, 2.5, 1.05),
        # Thresholds: flash's gateway exports its preset's; weak falls back to the defaults.
        expect("dsv4:threshold:acceptance_baseline", (f, 0.65), (w, 0.6)),
        expect("dsv4:threshold:acceptance_floor", (f, 0.4), (w, 0.3)),
        expect("dsv4:threshold:ttft_slo_seconds", (f, 2.0), (w, 2.0)),
        expect("dsv4:threshold:tpot_slo_seconds", (f, 0.1), (w, 0.1)),
        expect("dsv4:threshold:draft_cost_ratio", (f, 0.05), (w, 0.1)),
        expect("dsv4:threshold:guard_off_alert_seconds", (f, 600), (w, 600)),
        # The guard: off on every engine is the least off-time of the model's engines.
        expect("dsv4:spec_guard_drafting_off_seconds:min", (f, 0), (w, 900)),
        expect("dsv4:spec_guard_k:max", (f, 2), (w, 0)),
        expect("dsv4:requests_running:sum", (f, 8), (w, 1)),
        expect("dsv4:requests_waiting:sum", (f, 4), (w, 390)),
        per_replica("dsv4:requests_running:replica_sum", 4, 4, 1),
        per_replica("dsv4:kv_cache_usage:replica_max", 0.25, 0.5),
        expect("dsv4:requests_finished:rate5m", ({**f, "finished_reason": "length"}, 0.2)),
        expect(
            "dsv4:gateway_requests:rate5m",
            ({**f, "code": "2xx"}, 1.5),
            ({**f, "code": "5xx"}, 0.5),
        ),
        expect("dsv4:gateway_error_ratio:ratio5m", (f, 0.25)),
        expect("dsv4:gateway_rejected:rate5m", (f, 0.1)),
        expect(
            "dsv4:serve_healthy_replicas:sum",
            ({"application": "dsv4", "deployment": "LLMServer:flash"}, 1),
            ({"application": "dsv4", "deployment": "LLMServer:weak"}, 0),
            ({"namespace": NS, "application": "dsv4", "deployment": "Decode:pd"}, 1),
        ),
        *disaggregation_tests(),
    ]
    # Quantiles: all of flash's observations sit in one bucket, so linear interpolation
    # inside it gives lower + (upper - lower) * q.
    flash_bucket = {
        "ttft": (1.0, 2.5),
        "tpot": (0.05, 0.1),
        "itl": (0.05, 0.1),
        "e2e": (0.05, 0.1),
        "queue": (0.0, 0.05),
    }
    weak_bucket = {"ttft": (0.0, 0.5), "tpot": (0.0, 0.05)}
    # pd's queue time and TTFT per second: 0.25 of p1 in (0, 0.05], 0.75 of decode in
    # (0.05, 0.1].
    pd_queue = {0.05: 0.25, 0.1: 1.0}
    for short in LATENCIES:
        for q in QUANTILES:
            samples = [({**f, "quantile": q}, _interp(flash_bucket[short], float(q)))]
            if short in weak_bucket:
                samples.append(({**w, "quantile": q}, _interp(weak_bucket[short], float(q))))
            if short in ("queue", "ttft"):
                samples.append(({**PD_KEY, "quantile": q}, _cumulative(pd_queue, float(q))))
            tests.append(expect(f'dsv4:{short}_seconds:quantile5m{{quantile="{q}"}}', *samples))
        if short in weak_bucket:
            for window in ("30m", "1h", "6h"):
                tests.append(
                    expect(
                        f"dsv4:{short}_seconds:quantile{window}",
                        ({**f, "quantile": "0.9"}, _interp(flash_bucket[short], 0.9)),
                        ({**w, "quantile": "0.9"}, _interp(weak_bucket[short], 0.9)),
                        *(
                            [({**PD_KEY, "quantile": "0.9"}, _cumulative(pd_queue, 0.9))]
                            if short == "ttft"
                            else []
                        ),
                    )
                )
    return tests


def _interp(bucket: tuple[float, float], q: float) -> float:
    low, high = bucket
    return low + (high - low) * q


def _cumulative(counts: dict[float, float], q: float) -> float:
    """The q-quantile of cumulative bucket counts {upper bound: count}, interpolated
    inside its bucket in the order Prometheus' histogram_quantile computes it (so the
    floats agree to the last bit)."""
    rank, low, below = q * max(counts.values()), 0.0, 0.0
    for upper, count in sorted(counts.items()):
        if count >= rank:
            return low + (upper - low) * ((rank - below) / (count - below))
        low, below = upper, count
    raise ValueError(q)


PD_KEY = {"namespace": NS, "model_name": "pd"}


def _pd_replica(replica: str) -> dict[str, str]:
    return {**PD_KEY, "replica": replica}


def disaggregation_tests() -> list[dict]:
    w, pd = WEAK_KEY, PD_KEY
    weak_replica = {**w, "replica": WEAK_REPLICA}
    d1, d2, d3 = (_pd_replica(r) for r in ("d1", "d2", "d3"))
    # Per second: d1 and d2 0.25 transfers each, weak 0.1; d2 fails 0.0625, d3 0.125.
    done, failed = 0.25, {"d2": 0.0625, "d3": 0.125}
    pd_failed = failed["d2"] + failed["d3"]
    tests = [
        expect("dsv4:kv_transfers:rate5m", (pd, 2 * done), (w, 0.1)),
        expect("dsv4:kv_transfers:replica_rate5m", (d1, done), (d2, done), (weak_replica, 0.1)),
        # 15 x 1 MiB + 15 x 2 MiB a minute.
        expect("dsv4:kv_transfer_bytes:rate5m", (pd, 45 * MIB / 60)),
        expect("dsv4:kv_transfer_bytes:mean5m", (pd, 1.5 * MIB)),
        expect("dsv4:kv_transfer_failures:rate5m", (pd, pd_failed), (w, 0)),
        expect(
            "dsv4:kv_transfer_failures:replica_rate5m",
            (d2, failed["d2"]),
            (d3, failed["d3"]),
            (weak_replica, 0),
        ),
        expect("dsv4:kv_transfer_expired_requests:rate5m", (pd, 0.25)),
        # failed / (failed + done); d1 has no failure series (0), d3 no transfers (1).
        expect(
            "dsv4:kv_transfer_failure_ratio:ratio5m",
            (pd, pd_failed / (pd_failed + 2 * done)),
            (w, 0),
        ),
        expect(
            "dsv4:kv_transfer_failure_ratio:replica_ratio5m",
            (d1, 0),
            (d2, failed["d2"] / (failed["d2"] + done)),
            (d3, 1),
            (weak_replica, 0),
        ),
        expect(
            "dsv4:serve_replica_role:info",
            *(
                (
                    {
                        "namespace": NS,
                        "application": "dsv4",
                        "deployment": deployment,
                        "replica": replica,
                        "role": "prefill" if replica == "p1" else "decode",
                    },
                    1,
                )
                for replica, deployment in PD_DEPLOYMENTS.items()
            ),
        ),
    ]
    for q in KV_QUANTILES:
        tests += [
            # pd: all in (0.01, 0.025]; weak: all in (0, 0.005].
            expect(
                f'dsv4:kv_transfer_seconds:quantile5m{{quantile="{q}"}}',
                ({**pd, "quantile": q}, _cumulative({0.01: 0, 0.025: 2 * done}, float(q))),
                ({**w, "quantile": q}, _cumulative({0.005: 0.1}, float(q))),
            ),
            # Only pd's replicas have a role: flash's r1 and weak's server get none.
            *(
                expect(
                    f'dsv4:{short}_seconds:role_quantile5m{{quantile="{q}"}}',
                    (
                        {**pd, "role": "prefill", "quantile": q},
                        _cumulative({0.05: 0.25}, float(q)),
                    ),
                    (
                        {**pd, "role": "decode", "quantile": q},
                        _cumulative({0.05: 0, 0.1: 0.75}, float(q)),
                    ),
                )
                for short in ("queue", "ttft")
            ),
        ]
    return tests


ALERTS = {r["alert"]: r for g in rule_groups()["groups"] for r in g["rules"] if "alert" in r}


def _render(template: str, labels: dict[str, str], value: float) -> str:
    """The template forms the rules use, rendered as Prometheus does."""
    if DRAFT_SAMPLING_NOTE in template:  # said where the model's info series says greedy
        greedy = DRAFT_SAMPLING.get(labels.get("model_name", "")) == "greedy"
        inner = DRAFT_SAMPLING_NOTE.split("| query }}", 1)[1].removesuffix("{{ end }}")
        template = template.replace(DRAFT_SAMPLING_NOTE, inner if greedy else "")
    text = template.replace("{{ $value | humanizePercentage }}", f"{value * 100:.4g}%")
    text = text.replace("{{ $value }}", f"{value:g}")
    for key, val in labels.items():
        text = text.replace(f"{{{{ $labels.{key} }}}}", val)
    return text


def alert(name: str, at: str, *fired: tuple[dict[str, str], float]) -> dict:
    """``fired``: (labels, value) of each alert expected to fire at ``at``."""
    annotations = ALERTS[name]["annotations"]
    return {
        "eval_time": at,
        "alertname": name,
        "exp_alerts": [
            {
                "exp_labels": {**lab, "alertname": name},
                "exp_annotations": {k: _render(v, lab, value) for k, v in annotations.items()},
            }
            for lab, value in fired
        ],
    }


def _sev(key: dict[str, str], severity: str, **extra: str) -> dict[str, str]:
    return {**key, **extra, "severity": severity, "team": "dsv4-serve"}


def alert_tests() -> list[dict]:
    f, w = FLASH_KEY, WEAK_KEY
    weak_llm = {"application": "dsv4", "deployment": "LLMServer:weak"}
    return [
        alert("DSV4MTPAcceptanceCollapse", "390m", (_sev(w, "critical"), 0.05)),
        # flash (0.6) is below its preset's baseline 0.65 but above the default 0.6.
        alert(
            "DSV4MTPAcceptanceBelowBaseline",
            "390m",
            (_sev(f, "warning"), 0.6),
            (_sev(w, "warning"), 0.05),
        ),
        alert("DSV4MTPPositionZeroCollapse", "390m", (_sev(w, "critical", position="0"), 0.05)),
        alert("DSV4SpeculationNotPayingOff", "390m", (_sev(w, "warning"), 0.05)),
        alert("DSV4TTFTSLOBurnFast", "390m", (_sev(f, "critical"), 2.35)),
        alert("DSV4TTFTSLOBurnSlow", "390m", (_sev(f, "warning"), 2.35)),
        alert("DSV4TPOTSLOBurnFast", "390m"),  # p90 0.095 s: inside both SLOs
        alert("DSV4TPOTSLOBurnSlow", "390m"),
        # flash has one engine still drafting: the guard is not off "on every engine".
        alert("DSV4SpecGuardDraftingOff", "390m", (_sev(w, "warning"), 900)),
        alert("DSV4NoReadyReplicas", "390m", (_sev(weak_llm, "critical"), 0)),
        alert(
            "DSV4EngineDown", "116m", (_sev({"namespace": NS, "model_name": "gone"}, "critical"), 1)
        ),
        alert("DSV4EngineDown", "390m"),  # gone's 15-minute look-back has passed
        alert("DSV4RequestsFailing", "390m", (_sev(f, "critical"), 0.25)),
        alert("DSV4RequestsRejected", "390m", (_sev(f, "warning"), 0.1)),
        alert("DSV4QueueGrowing", "390m", (_sev(w, "warning"), 390)),
        # d2 fails 1 in 5, d3 all; d1 (no failure series) and weak (counter at 0) must not.
        alert(
            "DSV4KVTransferFailing",
            "390m",
            (_sev(_pd_replica("d2"), "critical"), 0.2),
            (_sev(_pd_replica("d3"), "critical"), 1),
        ),
        alert("DSV4KVTransferFailing", "8m"),
        # Not yet: each alert waits for its `for:` to pass.
        alert("DSV4MTPAcceptanceCollapse", "8m"),
        alert("DSV4MTPAcceptanceBelowBaseline", "20m"),
    ]


# The position-collapse test: 40 minutes of "long" through Ray (one replica per case) and
# "plain" on vLLM's own server, in counts a minute: 120 drafts (2/s) of k=2, position 0
# accepted 105 times (0.875 of drafts), position 1 90 (0.75 of drafts, 0.857 of those that
# reach it).
COLLAPSE_MINUTES = 40
COLLAPSE_AT = 20  # c1's position 1 stops being accepted after this minute
LONG = {"namespace": NS, "model_name": "long", "instance": "node-c:8080", "engine": "0"}
PLAIN = {"namespace": NS, "model_name": "plain", "instance": "10.0.0.6:8000", "engine": "0"}
LONG_KEY = {"namespace": NS, "model_name": "long"}
PLAIN_KEY = {"namespace": NS, "model_name": "plain"}


def _counter(name: str, labels: dict[str, str], per_minute: float, after: float | None = None):
    """A counter rising ``per_minute``, then ``after`` a minute from COLLAPSE_AT on."""
    if after is None:
        return {"series": _sel(name, labels), "values": f"0+{per_minute}x{COLLAPSE_MINUTES}"}
    at, rest = COLLAPSE_AT, COLLAPSE_MINUTES - COLLAPSE_AT - 1
    values = f"0+{per_minute}x{at} {per_minute * at + after}+{after}x{rest}"
    return {"series": _sel(name, labels), "values": values}


def position_collapse_series() -> list[dict]:
    """Replicas of "long": c1 healthy until position 1 stops (minute 20); h1 healthy; i1
    idle (counters that stopped long ago); t1 a trickle (0.5 drafts/s, position 1 never
    accepted); g1 under a guard holding k=1 (drafts of 1.0625 tokens on average, position 1
    accepted on probe steps only, in 1/64 of drafts); f1 whose position 1 was never
    accepted, so Ray exports no counter for it; w1 accepting nothing at any position
    (drafts flowing). "plain": position 1 at 0, its counter exported at 0 as vLLM's own
    server does."""
    # replica: drafts, draft tokens, position 0, position 1 (None: no series) per minute
    cases = {
        "c1": (120, 240, 105, 90),
        "h1": (120, 240, 105, 90),
        "t1": (30, 60, 26.25, None),
        "g1": (120, 127.5, 105, 1.875),
        "f1": (120, 240, 105, None),
        "w1": (120, 240, 0, 0),
    }
    s = []
    for replica, (drafts, tokens, pos0, pos1) in cases.items():
        labels = {**LONG, "ReplicaId": replica}

        def add(metric, per_minute, after=None, labels=labels, **extra):
            s.append(_counter(f"ray_vllm_{metric}", {**labels, **extra}, per_minute, after))

        collapsing = replica == "c1"
        add("spec_decode_num_drafts_total", drafts)
        add("spec_decode_num_draft_tokens_total", tokens)
        accepted = pos0 + (pos1 or 0)
        add("spec_decode_num_accepted_tokens_total", accepted, pos0 if collapsing else None)
        add("spec_decode_num_accepted_tokens_per_pos_total", pos0, position="0")
        if pos1 is not None:
            after = 0 if collapsing else None
            add("spec_decode_num_accepted_tokens_per_pos_total", pos1, after, position="1")
        add("generation_tokens_total", drafts + accepted)
    idle = {**LONG, "ReplicaId": "i1"}
    for metric, total in [
        ("spec_decode_num_drafts_total", 600),
        ("spec_decode_num_draft_tokens_total", 1200),
        ("spec_decode_num_accepted_tokens_total", 900),
        ("generation_tokens_total", 1500),
    ]:
        s.append(
            {"series": _sel(f"ray_vllm_{metric}", idle), "values": f"{total}x{COLLAPSE_MINUTES}"}
        )
    for position, total in (("0", 540), ("1", 360)):
        name = "ray_vllm_spec_decode_num_accepted_tokens_per_pos_total"
        labels = {**idle, "position": position}
        s.append({"series": _sel(name, labels), "values": f"{total}x{COLLAPSE_MINUTES}"})
    for metric, per_minute in [
        ("spec_decode_num_drafts_total", 120),
        ("spec_decode_num_draft_tokens_total", 240),
        ("spec_decode_num_accepted_tokens_total", 105),
        ("generation_tokens_total", 225),
    ]:
        s.append(_counter(f"vllm:{metric}", PLAIN, per_minute))
    for position, per_minute in (("0", 105), ("1", 0)):
        name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
        s.append(_counter(name, {**PLAIN, "position": position}, per_minute))
    return s


def _per_second(per_minute: float) -> float:
    """rate()[5m] of a counter sampled each minute, in Prometheus's float steps."""
    return per_minute * 5 * (1 / 300)


def _long(replica: str, position: str | None = None) -> dict[str, str]:
    labels = {**LONG_KEY, "replica": replica}
    return labels if position is None else {**labels, "position": position}


def position_collapse_recording_tests() -> list[dict]:
    """At minute 35, per second. i1 (idle) has drafts 0/0 (NaN): left out of the ratios."""
    at = f"{COLLAPSE_AT + 15}m"
    plain = {**PLAIN_KEY, "replica": PLAIN["instance"]}
    busy = 'replica!="i1"'
    drafts, pos0, pos1 = _per_second(120), _per_second(105), _per_second(90)
    t1_drafts, t1_pos0 = _per_second(30), _per_second(26.25)
    rows = [("c1", pos0, 0), ("h1", pos0, pos1), ("g1", pos0, _per_second(1.875)), ("w1", 0, 0)]
    accepted = [(_long(r, "0"), p0) for r, p0, _ in rows]
    accepted += [(_long(r, "1"), p1) for r, _, p1 in rows]
    accepted += [(_long("i1", "0"), 0), (_long("i1", "1"), 0), (_long("t1", "0"), t1_pos0)]
    accepted += [(_long("f1", "0"), pos0), ({**plain, "position": "0"}, pos0)]
    accepted += [({**plain, "position": "1"}, 0)]
    # Verified at position 1: tokens/s accepted at position 0, where drafts reach 1.9
    # tokens (not g1's, of 1.0625).
    verified = [(_long(r, "0"), drafts) for r in ("c1", "h1", "g1", "f1", "w1")]
    verified += [(_long(r, "1"), pos0) for r in ("c1", "h1", "f1")]
    verified += [(_long("w1", "1"), 0), (_long("t1", "0"), t1_drafts)]
    verified += [(_long("t1", "1"), t1_pos0), ({**plain, "position": "0"}, drafts)]
    verified += [({**plain, "position": "1"}, pos0)]
    # Share of drafts: position 1 of t1 and f1 (no counter through Ray) counts as 0.
    shares = [(_long(r, "0"), pos0 / drafts) for r in ("c1", "h1", "g1", "f1")]
    shares += [(_long("t1", "0"), t1_pos0 / t1_drafts), (_long("c1", "1"), 0)]
    shares += [(_long("h1", "1"), pos1 / drafts), (_long("g1", "1"), rows[2][2] / drafts)]
    shares += [(_long("t1", "1"), 0), (_long("f1", "1"), 0), (_long("w1", "0"), 0)]
    shares += [(_long("w1", "1"), 0), ({**plain, "position": "0"}, pos0 / drafts)]
    shares += [({**plain, "position": "1"}, 0)]
    # Of those verified: w1's position 1 is 0/0 (never verified) and g1's is not drafted.
    conditional = [(_long(r, "0"), pos0 / drafts) for r in ("c1", "h1", "g1", "f1")]
    conditional += [(_long("t1", "0"), t1_pos0 / t1_drafts), (_long("c1", "1"), 0)]
    conditional += [(_long("h1", "1"), pos1 / pos0), (_long("t1", "1"), 0)]
    conditional += [(_long("f1", "1"), 0), ({**plain, "position": "0"}, pos0 / drafts)]
    conditional += [({**plain, "position": "1"}, 0)]
    k2 = _per_second(240) / drafts
    lengths = [(_long(r), k2) for r in ("c1", "h1", "f1", "w1")]
    lengths += [(_long("t1"), _per_second(60) / t1_drafts)]
    lengths += [(_long("g1"), _per_second(127.5) / drafts), (plain, k2)]
    return [
        expect("dsv4:accepted_tokens_per_position:replica_rate5m", *accepted, at=at),
        expect(f"dsv4:spec_decode_draft_length:replica_ratio5m{{{busy}}}", *lengths, at=at),
        expect("dsv4:verified_tokens_per_position:replica_rate5m", *verified, at=at),
        expect(
            f"dsv4:spec_decode_position_acceptance_rate:replica_ratio5m{{{busy}}}",
            *shares,
            at=at,
        ),
        expect(
            'dsv4:spec_decode_position_conditional_acceptance:replica_ratio5m{replica!~"i1|w1"}',
            *conditional,
            at=at,
        ),
        expect(
            "dsv4:spec_decode_position_conditional_acceptance:replica_ratio5m"
            '{replica="w1", position="0"}',
            (_long("w1", "0"), 0),
            at=at,
        ),
    ]


def position_collapse_alert_tests() -> list[dict]:
    name = "DSV4MTPAcceptanceCollapsedAtPosition"
    plain = {**PLAIN_KEY, "replica": PLAIN["instance"]}
    # promtool, like Prometheus, evaluates the rule groups in no fixed order: the alert may
    # see the recorded series one evaluation late, so "fires" is checked a minute after.
    # Collapsed from the start (f1, w1, plain): the condition holds once the 5m window
    # holds enough drafts (minute 3), and the alert fires 10 minutes later.
    early = [
        (_sev(_long("f1"), "critical", position="1"), 0),
        (_sev(_long("w1"), "critical", position="0"), 0),
        (_sev(plain, "critical", position="1"), 0),
    ]
    # c1: its 5m rate reaches 0 five minutes after the collapse, then 10 more (for:).
    fired = COLLAPSE_AT + 15
    return [
        alert(name, "12m"),
        alert(name, "14m", *early),
        alert(name, f"{fired - 1}m", *early),
        alert(name, f"{fired + 1}m", (_sev(_long("c1"), "critical", position="1"), 0), *early),
        # One position at 0 leaves the mean (0.47 for long, 0.44 for plain) above the floor.
        alert("DSV4MTPAcceptanceCollapse", f"{fired + 1}m"),
    ]


def position_collapse_test() -> dict[str, Any]:
    return {
        "name": "draft positions that collapse",
        "interval": "1m",
        "input_series": position_collapse_series(),
        "promql_expr_test": position_collapse_recording_tests(),
        "alert_rule_test": position_collapse_alert_tests(),
    }


def rule_tests() -> dict[str, Any]:
    """The promtool test file (``promtool test rules`` format)."""
    return {
        "rule_files": [RULES_FILE],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series(),
                "promql_expr_test": recording_tests(),
                "alert_rule_test": alert_tests(),
            },
            position_collapse_test(),
        ],
    }
