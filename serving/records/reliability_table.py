"""docs/reliability.md's table of what the tests hold: each row's measured cell from the
records of test_reliability and test_key_limits, the route counts from the route table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from serving.records.regions import table_row
from serving.records.store import Record, load

RECORDS = ("reliability", "key_limits")
DOC = "docs/reliability.md"
REGION = "reliability-table"


@dataclass(frozen=True)
class Row:
    case: str | Callable[[dict], str]
    test: str
    behaviour: str
    measured: Callable[[dict], str] | None = None


def _codes(counts: Counter) -> str:
    return ", ".join(f"{code} ×{n}" if n > 1 else str(code) for code, n in sorted(counts.items()))


def _bad_input(r: dict) -> str:
    codes = Counter(r["reliability"]["bad_input"].values())
    server = sum(n for code, n in codes.items() if int(code) >= 500)
    return f"{_codes(codes)}; {server} 5xx"


def _schema_fuzz(r: dict) -> str:
    fuzz = r["reliability"]["schema_fuzz"]
    codes: Counter = Counter()
    for per_op in fuzz["codes"].values():
        codes.update({int(code): n for code, n in per_op.items()})
    server = sum(n for code, n in codes.items() if code >= 500)
    return (
        f"{fuzz['requests']} requests over {fuzz['operations']} operations in "
        f"{fuzz['seconds']} s: {_codes(codes)}; {server} 5xx"
    )


def _routes(_: dict) -> str:
    from serving.gateway.routes import ROUTES, Kind

    kinds = Counter(route.kind for route in ROUTES)
    parts = ", ".join(f"{kinds[kind]} {kind.value}" for kind in Kind)
    return f"the table classifies {len(ROUTES)} routes ({parts})"


def _flood(r: dict) -> str:
    k = r["key_limits"]
    solo, flood = k["steady_ttft_solo_s"]["p90"], k["steady_ttft_flood_s"]["p90"]
    return (
        f"steady key's p90 TTFT {k['steady_p90_ttft_ratio']:.2f}x its alone value "
        f"({flood:.2f} s vs {solo:.2f} s); the flood: {k['flood_answered']} answered, "
        f"{k['flood_429_concurrency']} refused at the cap, {k['flood_429_tokens']} at the "
        "token budget"
    )


def _overload(r: dict) -> str:
    o = r["reliability"]["overload"]
    return (
        f"{o['admitted']} admitted, {o['rejected']} rejected; rejection p50 "
        f"{o['rejected_p50_s']:.2f} s vs {o['admitted_p50_s']:.2f} s for an admitted request; "
        f"the app's RSS {o['rss_before_mib']} -> {o['rss_peak_mib']} MiB"
    )


def _disconnect(r: dict) -> str:
    d = r["reliability"]["disconnect"]
    return f"{d['tokens_after_cancel']:.0f} of {d['requested']} requested tokens generated"


ROWS = (
    Row(
        lambda r: f"bad input, {len(r['reliability']['bad_input'])} kinds",
        "`tests/serving/test_reliability.py`",
        "malformed JSON, wrong types, unknown model (404), empty messages, max_tokens 0 / "
        'negative / beyond the context (also as the string `"100000"`, and '
        "`max_output_tokens` as `1e5`), a prompt longer than `max_model_len`, negative "
        "temperature, top_p > 1, n too large (also as a string), a 5000-entry stop list, "
        "invalid UTF-8 (completions, messages), a lone surrogate (`/tokenize`), JSON nested "
        "100000 deep, a 5 MB body on `/v1/completions` and a 20 MB body in its own shape on "
        "`/v1/responses`, `/v1/chat/completions`, `/v1/messages`, `/v1/messages/count_tokens`, "
        "`/tokenize` and `/detokenize` (413), "
        "an unknown field, a garbage tool schema, a form-encoded body (415), Basic auth "
        '(401), a JSON array body: each answers `{"error": {...}}` naming the field or '
        "problem, and the next normal request gets the golden text",
        _bad_input,
    ),
    Row(
        "request fuzzing",
        "same (hypothesis)",
        "random subsets of 19 request fields with random JSON values on both routes: no 5xx, "
        "no hang; `DSV4_FUZZ_EXAMPLES=300` searches random bodies (such a search found chat "
        "`messages: null` answering 500: the gateway now requires a non-empty list of role "
        "objects)",
        lambda r: f"{r['reliability']['fuzz_cases']} bodies, no 5xx",
    ),
    Row(
        "schema fuzzing",
        "same (schemathesis, from the served OpenAPI schema an admin key reads)",
        "every operation an admin key reaches, positive and negative cases, generation capped "
        "at 8 tokens: no 5xx, no hang (a random search once found the elastic-EP 500, now 404 "
        "unless elastic EP is on)",
        _schema_fuzz,
    ),
    Row(
        "routes and keys",
        "`tests/serving/gateway/test_gateway_routes.py`, `tests/serving/test_reliability.py`",
        "`POST /scale_elastic_ep` with an inference key answers 404; `/load`, "
        "`/kv_event_sources`, `/version`, `/metrics` answer it 403",
        _routes,
    ),
    Row(
        "auth",
        "`tests/serving/test_serving_app.py`, `tests/serving/gateway/test_gateway_unit.py`",
        "401 without a key, with a wrong key, with a non-Bearer scheme; keys never logged",
    ),
    Row(
        lambda r: (
            f"two keys, one flooding (per-key cap {r['key_limits']['max_concurrent']}, "
            f"{r['key_limits']['tokens_per_minute']} tokens/min)"
        ),
        "`tests/serving/gateway/test_key_limits.py`",
        "the flooding key is held to its cap with 429 and `Retry-After`; the steady key is "
        "never refused (on a 2-core CPU every decoded stream slows each step, so its TTFT "
        "ratio is for a GPU run to judge)",
        _flood,
    ),
    Row(
        "`/tokenize` within the per-key limits",
        "`tests/serving/gateway/test_key_limits.py`, "
        "`tests/serving/gateway/test_gateway_limits.py`",
        "a 100 KB `/tokenize` reserves its bytes / 4 against the key's tokens per minute; the "
        "key's next `/tokenize` and `/detokenize` get 429 `key_tokens_limit`",
    ),
    Row(
        "stored responses, two keys",
        "`tests/serving/gateway/test_key_limits.py` (vLLM's store on), "
        "`tests/serving/gateway/test_gateway_tenancy.py`",
        "the creating key reads its response; another key's read, cancel and "
        "`previous_response_id` get 404 as if it were absent; a chosen `request_id` naming it "
        "gets 400",
    ),
    Row(
        "a layer that raises",
        "`tests/serving/gateway/test_gateway_unit.py`, "
        "`tests/serving/gateway/test_input_middleware.py`",
        "whatever a layer or the parser raises (a `RecursionError` included) answers a JSON "
        "error from the outermost layer, the replica's header on it, and the request counts "
        "in the metrics",
    ),
    Row(
        lambda r: f"overload, a burst of {r['reliability']['overload']['burst']}",
        "`tests/serving/test_reliability.py`",
        "10x what the engine admits and queues: those admitted answer the golden text, the "
        "rest 503 with `Retry-After: 2` and a JSON error",
        _overload,
    ),
    Row(
        "client disconnect",
        "same",
        "the proxy cancels the request and the engine stops; running requests back to 0",
        _disconnect,
    ),
    Row(
        "engine replica killed (one replica)",
        "same",
        "in-flight streams end in a connection error the client sees (never a clean close "
        "that looks complete); Serve starts a new replica; the next requests return the "
        "golden text",
        lambda r: f"API answering again {r['reliability']['recovery_s']} s after the kill",
    ),
    Row(
        "failover, two replicas",
        "`tests/serving/routing/test_prefix_routing.py` (prefix routing in the path)",
        "replica process killed: its streams end in a connection error, the survivor's "
        "complete, at most one new request gets a clean HTTP error; engine core killed inside "
        "a living replica: its streams end in an OpenAI `error` event and the replica ends "
        "itself",
    ),
    Row(
        "a short prompt prefilled beside a long one",
        "`tests/model_overrides/test_dsv4_cpu_engine.py` (engine, CPU)",
        "a 3-token prompt (no compressed entry yet) prefilled in the same step after a "
        "2300-token prompt's chunk: both get the golden text (without "
        "`dsv4-cpu-indexer-last-request`, vLLM's CPU indexer gathered a block-table row past "
        "the last request and the engine died)",
    ),
    Row(
        "graceful shutdown",
        "`tests/serving/test_reliability.py`",
        "SIGTERM during a long request: `up` waits for the gateway's in-flight requests "
        "(deadline 60 s), the request completes with the golden text, exit 0",
        lambda r: (
            f"exit {r['reliability']['sigterm_exit_s']} s after SIGTERM during a "
            f"{r['reliability']['sigterm_request_tokens']}-token request"
        ),
    ),
)


def table(records: dict[str, Record] | None = None) -> str:
    records = records or {name: load(name) for name in RECORDS}
    figures: dict[str, Any] = {name: rec.figures for name, rec in records.items()}
    lines = ["| case | test | behaviour held | measured |", "|---|---|---|---|"]
    for row in ROWS:
        case = row.case(figures) if callable(row.case) else row.case
        measured = row.measured(figures) if row.measured else "—"
        lines.append(table_row([case, row.test, row.behaviour, measured]))
    sources = "; ".join(rec.source() for rec in records.values())
    return "\n".join(lines) + f"\n\nMeasured: {sources}.\n"
