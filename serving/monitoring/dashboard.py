"""The Grafana dashboard (schema 11.6 JSON) over the ``dsv4:`` recorded series, built
with Grafana's typed builders (``grafana-foundation-sdk``, the 11.6 schema release).

Panels are plain data (``Panel``, ``ROWS``); ``dashboard()`` turns them into SDK builders
and returns the JSON the SDK's encoder writes (the SDK adds a few of Grafana's defaults,
such as ``transparent`` and ``fiscalYearStartMonth``). Written by hand, because the SDK
has nothing for it:

- rows stay expanded with their panels after them at the top level, which is how Grafana
  saves an expanded row: the SDK's ``Row.with_panel`` nests panels and marks the row
  collapsed, so rows are added empty and their panels with ``Dashboard.with_panel``
  (whose grid placement puts two panels a line under each row);
- panel ids: the SDK leaves them unset, and Grafana needs them unique.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from grafana_foundation_sdk.builders import prometheus, table, timeseries
from grafana_foundation_sdk.builders.common import VizLegendOptions, VizTooltipOptions
from grafana_foundation_sdk.builders.dashboard import Dashboard as DashboardBuilder
from grafana_foundation_sdk.builders.dashboard import (
    DatasourceVariable,
    QueryVariable,
    Row,
    ThresholdsConfig,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    LegendDisplayMode,
    LegendPlacement,
    SortOrder,
    TooltipDisplayMode,
)
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    Threshold,
    ThresholdsMode,
    VariableOption,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from serving.monitoring.rules import (
    KV_FAILURE_RATIO_ALERT,
    KV_QUANTILES,
    POSITION_COLLAPSE_MIN_VERIFIED,
    POSITION_COLLAPSE_RATE,
    vllm,
)

UID = "dsv4-serve-mtp"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
MODEL = 'namespace=~"$namespace", model_name=~"$model"'
REPLICA = f'{MODEL}, replica=~"$replica"'
# DeepSeek-V4 technical report / vLLM recipe: mean acceptance length with MTP.
PUBLISHED_ACCEPTANCE_LENGTH = {"k=1": (1.8, 1.9), "k=2": (2.3, 2.6)}
PANEL_WIDTH = 12
PANEL_HEIGHT = 8


@dataclass
class Panel:
    title: str
    description: str
    queries: list[tuple[str, str]]  # (PromQL, legend)
    unit: str = "short"
    kind: Literal["timeseries", "table"] = "timeseries"
    thresholds: list[tuple[str, float]] = field(default_factory=list)

    def builder(self, panel_id: int) -> timeseries.Panel | table.Panel:
        steps = [Threshold(color=c, value=v) for c, v in self.thresholds or [("green", 0)]]
        panel = timeseries.Panel() if self.kind == "timeseries" else table.Panel()
        panel = (
            panel.id(panel_id)
            .title(self.title)
            .description(self.description)
            .datasource(DATASOURCE)
            .height(PANEL_HEIGHT)
            .span(PANEL_WIDTH)
            .targets(
                [self._target(i, expr, legend) for i, (expr, legend) in enumerate(self.queries)]
            )
            .unit(self.unit)
            .thresholds(ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps(steps))
            .overrides([])
        )
        if isinstance(panel, timeseries.Panel):
            legend = (
                VizLegendOptions()
                .display_mode(LegendDisplayMode.LIST)
                .placement(LegendPlacement.BOTTOM)
                .calcs([])
                .show_legend(True)
            )
            tooltip = VizTooltipOptions().mode(TooltipDisplayMode.MULTI).sort(SortOrder.NONE)
            return panel.legend(legend).tooltip(tooltip)
        return panel.show_header(True)

    def _target(self, index: int, expr: str, legend: str) -> prometheus.Dataquery:
        query = (
            prometheus.Dataquery()
            .datasource(DATASOURCE)
            .expr(expr)
            .legend_format(legend)
            .ref_id(chr(ord("A") + index))
        )
        if self.kind == "timeseries":
            return query.range().format(PromQueryFormat.TIME_SERIES)
        return query.instant().format(PromQueryFormat.TABLE)


DISAGGREGATION_ROW = "Disaggregation (KV transfer)"


def _kv_quantiles(series: str, legend: str) -> list[tuple[str, str]]:
    return [
        (f'{series}{{{MODEL}, quantile="{q}"}}', f"{legend} p{float(q) * 100:g}")
        for q in KV_QUANTILES
    ]


def _published_lines() -> list[tuple[str, str]]:
    lines = []
    for k, (low, high) in PUBLISHED_ACCEPTANCE_LENGTH.items():
        lines += [(f"vector({low})", f"published DSV4 {k} low"), (f"vector({high})", f"{k} high")]
    return lines


def _latency_panel(short: str, title: str, slo: str | None) -> Panel:
    queries = [
        (f'dsv4:{short}_seconds:quantile5m{{{MODEL}, quantile="{q}"}}', f"{{{{model_name}}}} p{p}")
        for q, p in (("0.5", "50"), ("0.9", "90"), ("0.99", "99"))
    ]
    if slo:
        queries.append((f"dsv4:threshold:{slo}{{{MODEL}}}", "{{model_name}} SLO (p90)"))
    return Panel(title, f"{title} quantiles over 5 minutes, from the engines.", queries, unit="s")


ROWS: list[tuple[str, list[Panel]]] = [
    (
        "MTP speculative decoding",
        [
            Panel(
                "Speculation settings",
                "What each served preset drafts: the method, draft tokens per step and how"
                " drafts are sampled. At temperature > 0 a greedy draft is accepted only with"
                " the target's probability of the drafter's top token, so greedy drafting"
                " reads lower on the panels beside this one (docs/speculation.md).",
                [
                    (
                        "max by (model_name, method, num_speculative_tokens,"
                        f" draft_sample_method) (dsv4_speculation_info{{{MODEL}}})",
                        "{{model_name}} {{method}} k={{num_speculative_tokens}}"
                        " {{draft_sample_method}}",
                    )
                ],
                kind="table",
            ),
            Panel(
                "Acceptance rate",
                "Accepted / drafted tokens, summed over engines, per model and per replica;"
                " baseline (warning) and floor (page) are the preset's thresholds.",
                [
                    (f"dsv4:spec_decode_acceptance_rate:ratio5m{{{MODEL}}}", "{{model_name}}"),
                    (
                        f"dsv4:spec_decode_acceptance_rate:replica_ratio5m{{{REPLICA}}}",
                        "{{model_name}} {{replica}}",
                    ),
                    (f"dsv4:threshold:acceptance_baseline{{{MODEL}}}", "baseline"),
                    (f"dsv4:threshold:acceptance_floor{{{MODEL}}}", "floor"),
                ],
                unit="percentunit",
            ),
            Panel(
                "Acceptance length",
                "1 + accepted / drafts: tokens produced per target step. Published DeepSeek-V4"
                " values: k=1 about 1.8-1.9, k=2 about 2.3-2.6.",
                [
                    (f"dsv4:spec_decode_acceptance_length:ratio5m{{{MODEL}}}", "{{model_name}}"),
                    (
                        f"dsv4:spec_decode_acceptance_length:replica_ratio5m{{{REPLICA}}}",
                        "{{model_name}} {{replica}}",
                    ),
                    (f"dsv4:spec_decode_draft_length:ratio5m{{{MODEL}}}", "draft length (k)"),
                    *_published_lines(),
                ],
            ),
            Panel(
                "Acceptance by draft position",
                "Share of drafts whose token at this position was accepted, per model and"
                " per replica. Position 0 collapsing first points at the draft head's input"
                " (HC state).",
                [
                    (
                        f"dsv4:spec_decode_position_acceptance_rate:ratio5m{{{MODEL}}}",
                        "{{model_name}} position {{position}}",
                    ),
                    (
                        f"dsv4:spec_decode_position_acceptance_rate:replica_ratio5m{{{REPLICA}}}",
                        "{{model_name}} {{replica}} position {{position}}",
                    ),
                ],
                unit="percentunit",
            ),
            Panel(
                "Acceptance by draft position, of tokens verified there",
                "Per replica: of the draft tokens verified at this position (every earlier"
                " one accepted), the share accepted. Healthy traffic keeps it far above the"
                " line; a position near 0 for 10 minutes while at least"
                f" {POSITION_COLLAPSE_MIN_VERIFIED} token/s is verified there fires"
                " DSV4MTPAcceptanceCollapsedAtPosition.",
                [
                    (
                        "dsv4:spec_decode_position_conditional_acceptance:replica_ratio5m"
                        f"{{{REPLICA}}}",
                        "{{model_name}} {{replica}} position {{position}}",
                    ),
                    (f"vector({POSITION_COLLAPSE_RATE})", "collapsed below"),
                ],
                unit="percentunit",
            ),
            Panel(
                "Accepted vs rejected draft tokens/s",
                "Accepted tokens/s against rejected ones, and the break-even line: below it"
                " drafting costs more than it saves (draft tokens/s x draft_cost_ratio).",
                [
                    (f"dsv4:accepted_tokens:rate5m{{{MODEL}}}", "{{model_name}} accepted"),
                    (f"dsv4:rejected_tokens:rate5m{{{MODEL}}}", "{{model_name}} rejected"),
                    (
                        f"dsv4:spec_decode_breakeven_accepted_tokens:rate5m{{{MODEL}}}",
                        "{{model_name}} break-even",
                    ),
                ],
                unit="short",
            ),
            Panel(
                "Output tokens from drafts",
                "Share of output tokens that were accepted draft tokens.",
                [(f"dsv4:spec_decode_draft_share:ratio5m{{{MODEL}}}", "{{model_name}}")],
                unit="percentunit",
            ),
            Panel(
                "Output tokens/s",
                "Generated tokens/s per model and per replica.",
                [
                    (f"dsv4:generation_tokens:rate5m{{{MODEL}}}", "{{model_name}}"),
                    (
                        f"dsv4:generation_tokens:replica_rate5m{{{REPLICA}}}",
                        "{{model_name}} {{replica}}",
                    ),
                ],
            ),
        ],
    ),
    (
        "Speculation guard",
        [
            Panel(
                "Guard: draft tokens per step (k)",
                "The k the speculation guard holds on each engine (probe steps aside), and the"
                " largest it may pick. 0: drafting is off for this traffic.",
                [
                    (f"dsv4_spec_guard_k{{{MODEL}}}", "{{model_name}} {{engine_pid}} k"),
                    (f"max by (model_name) (dsv4_spec_guard_k_max{{{MODEL}}})", "max k"),
                ],
            ),
            Panel(
                "Guard: acceptance it sees",
                "The guard's own per-position acceptance estimate (seconds of memory, so it"
                " moves before the 5m rate), beside the engines' 5m acceptance rate.",
                [
                    (
                        f"dsv4_spec_guard_acceptance{{{MODEL}}}",
                        "{{model_name}} {{engine_pid}} position {{position}}",
                    ),
                    (
                        f"dsv4:spec_decode_acceptance_rate:ratio5m{{{MODEL}}}",
                        "{{model_name}} acceptance (5m)",
                    ),
                ],
                unit="percentunit",
            ),
            Panel(
                "Guard decisions/s by reason",
                "up / down: k changed; probe: a step drafting the most k while k is lower;"
                " hold: k kept; calibrate: start-up steps that measure the step cost.",
                [
                    (
                        "sum by (model_name, reason) "
                        f"(rate(dsv4_spec_guard_decisions_total{{{MODEL}}}[5m]))",
                        "{{model_name}} {{reason}}",
                    )
                ],
            ),
            Panel(
                "Guard: drafting off for",
                "How long every engine of the model has had drafting off, against the"
                " preset's guard_off_alert_seconds (DSV4SpecGuardDraftingOff).",
                [
                    (
                        f"dsv4:spec_guard_drafting_off_seconds:min{{{MODEL}}}",
                        "{{model_name}}",
                    ),
                    (f"dsv4:threshold:guard_off_alert_seconds{{{MODEL}}}", "alert after"),
                ],
                unit="s",
            ),
        ],
    ),
    (
        "Latency",
        [
            _latency_panel("ttft", "Time to first token", "ttft_slo_seconds"),
            _latency_panel("tpot", "Time per output token", "tpot_slo_seconds"),
            _latency_panel("itl", "Inter-token latency", None),
            _latency_panel("e2e", "End-to-end request latency", None),
            _latency_panel("queue", "Queue time", None),
        ],
    ),
    (
        "Load and replicas",
        [
            Panel(
                "Requests running and waiting",
                "Requests in the engines' batches and in their queues.",
                [
                    (f"dsv4:requests_running:sum{{{MODEL}}}", "{{model_name}} running"),
                    (f"dsv4:requests_waiting:sum{{{MODEL}}}", "{{model_name}} waiting"),
                    (
                        f"dsv4:requests_running:replica_sum{{{REPLICA}}}",
                        "{{replica}} running",
                    ),
                ],
            ),
            Panel(
                "Requests/s at the gateway by status class",
                "What clients see: 2xx, 4xx, 5xx, and requests rejected for overload.",
                [
                    (f"dsv4:gateway_requests:rate5m{{{MODEL}}}", "{{model_name}} {{code}}"),
                    (f"dsv4:gateway_rejected:rate5m{{{MODEL}}}", "{{model_name}} rejected"),
                ],
                unit="reqps",
            ),
            Panel(
                "Finished requests/s by reason",
                "Engine-side completions (stop, length, abort).",
                [
                    (
                        f"dsv4:requests_finished:rate5m{{{MODEL}}}",
                        "{{model_name}} {{finished_reason}}",
                    )
                ],
                unit="reqps",
            ),
            Panel(
                "Prefix routing picks/s by outcome",
                "serving.routing: prefix only (serving/routing/decisions.py). affinity: the"
                " request went to its key's own replica and its prefix cache; spill: that"
                " replica was at its load bound or full; no_key: nothing to route on. A rising"
                " spill share: a hot prefix is spread over replicas, or they are too few.",
                [
                    (
                        "sum by (namespace, outcome) (rate(ray_dsv4_router_decisions_total"
                        '{namespace=~"$namespace"}[5m]))',
                        "{{namespace}} {{outcome}}",
                    )
                ],
                unit="reqps",
            ),
            Panel(
                "KV cache usage per replica",
                "Highest KV cache usage among a replica's engines.",
                [(f"dsv4:kv_cache_usage:replica_max{{{REPLICA}}}", "{{replica}}")],
                unit="percentunit",
            ),
            Panel(
                "Healthy replicas",
                "Ray Serve replicas passing their health check, per deployment.",
                [("dsv4:serve_healthy_replicas:sum", "{{application}} {{deployment}}")],
            ),
            Panel(
                "Engines reporting",
                "vLLM engines exporting metrics per model.",
                [(f"dsv4:engines:count{{{MODEL}}}", "{{model_name}}")],
            ),
        ],
    ),
    (
        DISAGGREGATION_ROW,
        [
            Panel(
                "KV transfer time",
                "Time of one NIXL KV transfer from prefill to decode (one per request and"
                " remote rank), p50 and p90 over 5 minutes, recorded by decode.",
                _kv_quantiles("dsv4:kv_transfer_seconds:quantile5m", "{{model_name}}"),
                unit="s",
            ),
            Panel(
                "KV bytes per transfer",
                "Mean bytes of one NIXL KV transfer over 5 minutes.",
                [(f"dsv4:kv_transfer_bytes:mean5m{{{MODEL}}}", "{{model_name}}")],
                unit="bytes",
            ),
            Panel(
                "KV bytes/s",
                "Bytes moved from prefill to decode per second.",
                [(f"dsv4:kv_transfer_bytes:rate5m{{{MODEL}}}", "{{model_name}}")],
                unit="Bps",
            ),
            Panel(
                "KV transfers and failures/s",
                "Finished transfers/s, failed ones (transfer, handshake, notification) and"
                " requests whose KV prefill freed before decode read it (expired).",
                [
                    (f"dsv4:kv_transfers:rate5m{{{MODEL}}}", "{{model_name}} finished"),
                    (f"dsv4:kv_transfer_failures:rate5m{{{MODEL}}}", "{{model_name}} failed"),
                    (
                        f"dsv4:kv_transfer_expired_requests:rate5m{{{MODEL}}}",
                        "{{model_name}} expired",
                    ),
                ],
            ),
            Panel(
                "KV transfer failure ratio",
                "Failed / (failed + finished) transfers per model and per replica (the"
                " replica that reads the KV); DSV4KVTransferFailing fires above the line.",
                [
                    (f"dsv4:kv_transfer_failure_ratio:ratio5m{{{MODEL}}}", "{{model_name}}"),
                    (
                        f"dsv4:kv_transfer_failure_ratio:replica_ratio5m{{{REPLICA}}}",
                        "{{model_name}} {{replica}}",
                    ),
                    (f"vector({KV_FAILURE_RATIO_ALERT})", "alert above"),
                ],
                unit="percentunit",
                thresholds=[("green", 0), ("red", KV_FAILURE_RATIO_ALERT)],
            ),
            Panel(
                "Queue time by role",
                "vLLM's request queue time on prefill and on decode replicas (through Ray"
                " only: the role comes from the Ray Serve deployment, Prefill:* or Decode:*)."
                " Decode's includes the wait for prefill's KV.",
                _kv_quantiles("dsv4:queue_seconds:role_quantile5m", "{{model_name}} {{role}}"),
                unit="s",
            ),
            Panel(
                "TTFT by role",
                "Each engine's time to first token, from the request reaching it: prefill's is"
                " the prompt's compute; decode's starts after prefill answered and holds the"
                " KV's arrival and the first decode step. The client's TTFT, both and the hops"
                " between them, is the gateway's dsv4_gateway_time_to_first_token_seconds.",
                _kv_quantiles("dsv4:ttft_seconds:role_quantile5m", "{{model_name}} {{role}}"),
                unit="s",
            ),
            Panel(
                "Requests waiting for KV by stage",
                "vLLM's waiting requests by async KV load stage: not started, in"
                " progress, loaded but not yet running.",
                [
                    (
                        "sum by (model_name, stage) ("
                        + vllm("num_requests_kv_fetch_by_stage").replace("}", f", {MODEL}}}")
                        + ")",
                        "{{model_name}} {{stage}}",
                    )
                ],
            ),
        ],
    ),
    (
        "DSV4 overrides",
        [
            Panel(
                "Override patches by status",
                "What the dsv4 overrides plugin did on the installed vLLM: applied, not"
                " needed, unrecognised or failed (from the gateway replicas).",
                [
                    (
                        "sum by (patch, override, status)"
                        ' (dsv4_overrides_patch_info{namespace=~"$namespace"})',
                        "{{patch}} {{status}}",
                    )
                ],
                kind="table",
            ),
            Panel(
                "Patches not in a good state",
                "Count of patches whose status is unrecognised or failed; should be 0.",
                [
                    (
                        'count(dsv4_overrides_patch_info{status=~"unrecognised|failed"})'
                        " or vector(0)",
                        "patches needing attention",
                    )
                ],
                thresholds=[("green", 0), ("red", 1)],
            ),
        ],
    ),
]


def _variable(name: str, label: str, query: str) -> QueryVariable:
    return (
        QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .include_all(True)
        .multi(True)
        .all_value(".*")
        .current(VariableOption(text="All", value="$__all"))
        .sort(VariableSort.ALPHABETICAL_ASC)
    )


def _variables() -> list[DatasourceVariable | QueryVariable]:
    return [
        DatasourceVariable("datasource").label("Prometheus").type("prometheus"),
        _variable("namespace", "Namespace", "label_values(dsv4:engines:count, namespace)"),
        _variable(
            "model",
            "Model",
            'label_values(dsv4:engines:count{namespace=~"$namespace"}, model_name)',
        ),
        _variable(
            "replica",
            "Replica",
            f"label_values(dsv4:generation_tokens:replica_rate5m{{{MODEL}}}, replica)",
        ),
    ]


def dashboard() -> dict[str, Any]:
    board = (
        DashboardBuilder("DSV4 serving: MTP speculative decoding")
        .uid(UID)
        .description(
            "Acceptance, latency, load and overrides of dsv4-serve (recorded dsv4:"
            " series; load the dsv4 rules first)"
        )
        .tags(["dsv4", "vllm", "mtp", "ray-serve"])
        .timezone("browser")
        .editable()
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .refresh("30s")
        .time("now-3h", "now")
        .version(1)
        .variables(_variables())
        .annotations([])
        .links([])
    )
    next_id = 1
    for title, row_panels in ROWS:
        board.with_row(Row(title).id(next_id).collapsed(False))
        next_id += 1
        for panel in row_panels:
            board.with_panel(panel.builder(next_id))
            next_id += 1
    return json.loads(json.dumps(board.build(), cls=JSONEncoder))


TEMPLATE_VARIABLES = ("$namespace", "$model", "$replica")


def queries(
    board: dict[str, Any], concrete: bool = False, skip_rows: tuple[str, ...] = ()
) -> list[str]:
    """Every PromQL expression of the dashboard's panels (but those under the rows named
    in ``skip_rows``); ``concrete`` replaces the template variables by "match anything",
    as Grafana's "All" does."""
    exprs, row = [], ""
    for panel in board["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
        elif row not in skip_rows:
            exprs += [t["expr"] for t in panel.get("targets", [])]
    if concrete:
        for variable in TEMPLATE_VARIABLES:
            exprs = [e.replace(variable, ".*") for e in exprs]
    return exprs
