"""MTP acceptance and TTFT of a release, from the `dsv4:` recording rules
(serving/monitoring/rules.py) on a Prometheus that scrapes it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx

from serving.doctor.findings import Finding, fail, ok, warn

ACCEPTANCE = "dsv4:spec_decode_acceptance_rate:ratio5m"
ACCEPTANCE_LENGTH = "dsv4:spec_decode_acceptance_length:ratio5m"
TTFT_P90 = "dsv4:ttft_seconds:quantile5m"
THRESHOLD = "dsv4:threshold:{}"


class PrometheusError(Exception):
    pass


def query(base: str, expr: str, timeout: float = 10.0) -> dict[str, float]:
    """Instant query; {model_name: value}."""
    url = base.rstrip("/") + "/api/v1/query"
    try:
        response = httpx.get(url, params={"query": expr}, timeout=timeout)
    except httpx.HTTPError as exc:
        raise PrometheusError(f"cannot reach Prometheus at {base}: {exc}") from None
    try:
        body = response.json()
    except ValueError:
        raise PrometheusError(
            f"{url} answered {response.status_code} without JSON (is it Prometheus?)"
        ) from None
    if body.get("status") != "success":
        raise PrometheusError(f"Prometheus refused {expr!r}: {body.get('error', body)}")
    out = {}
    for sample in (body.get("data") or {}).get("result") or []:
        model = (sample.get("metric") or {}).get("model_name", "?")
        try:
            out[model] = float(sample["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return out


def release_metrics(base: str, namespace: str) -> Iterator[Finding]:
    scope = f'{{namespace="{namespace}"}}'
    try:
        acceptance = query(base, ACCEPTANCE + scope)
        length = query(base, ACCEPTANCE_LENGTH + scope)
        floor = query(base, THRESHOLD.format("acceptance_floor") + scope)
        baseline = query(base, THRESHOLD.format("acceptance_baseline") + scope)
        ttft = query(base, f'{TTFT_P90}{{namespace="{namespace}",quantile="0.9"}}')
        slo = query(base, THRESHOLD.format("ttft_slo_seconds") + scope)
    except PrometheusError as exc:
        yield warn(str(exc), "check --prometheus URL (the Prometheus HTTP API, e.g. :9090)")
        return
    if not acceptance and not ttft:
        yield warn(
            f"no dsv4 metrics for namespace {namespace} in the last 5 minutes",
            "no traffic, or Prometheus does not scrape the release: check the PodMonitor "
            "and that the dsv4 PrometheusRule is loaded",
        )
        return
    for model, rate in sorted(acceptance.items()):
        low, base_line = floor.get(model), baseline.get(model)
        extra = f", {length[model]:.2f} tokens per step" if model in length else ""
        text = f"{model}: MTP acceptance {rate:.0%}{extra}"
        if low is not None and rate < low:
            yield fail(
                f"{text}, below the floor {low:.0%}",
                "MTP is not working: check the draft weights and speculative config "
                "(docs/monitoring.md, DSV4MTPAcceptanceCollapse)",
            )
        elif base_line is not None and rate < base_line:
            yield warn(f"{text}, below the baseline {base_line:.0%}")
        else:
            yield ok(text)
    for model, seconds in sorted(ttft.items()):
        limit = slo.get(model)
        text = f"{model}: TTFT p90 {seconds:.2f}s"
        if limit is not None and seconds > limit:
            yield warn(
                f"{text}, over the SLO {limit:.2f}s",
                "queueing or long prompts: see the dashboard's latency and queue panels",
            )
        else:
            yield ok(text + (f" (SLO {limit:.2f}s)" if limit is not None else ""))
