"""docs/api.md's route tables, rendered from the route table and the input policy, so the
page's counts and lists are the code's (``dsv4-serve generate`` writes them)."""

from __future__ import annotations

from serving.gateway.input_policy import RULES
from serving.gateway.routes import ROUTES, Kind
from serving.records.regions import table_cell

DOC = "docs/api.md"
REGION = "route-classes"
WHO = {
    Kind.PROBE: "anyone, no key",
    Kind.INFERENCE: "inference and admin keys; per-key limits",
    Kind.METRICS: "admin keys only (404 with none configured; 403 to an inference key)",
    Kind.CONTROL: (
        "admin keys only (404 with none configured; 403 to an inference key); a route "
        "whose engine feature is off answers 404"
    ),
    Kind.OFF: "nobody (404), as any path the table does not list",
}
# Classes whose routes are listed in full; the others by count (the table has each).
LISTED = (Kind.PROBE, Kind.INFERENCE, Kind.METRICS)


def _label(route) -> str:
    text = f"`{' '.join(sorted(route.methods - {'HEAD'}))} {route.label}`"
    if route.kind is Kind.INFERENCE and route.path in RULES:
        model = RULES[route.path].model.rpartition(":")[2]
        text += f" ({model or 'no body read'})"
    return text


def table() -> str:
    lines = [
        f"{len(ROUTES)} routes in `serving/gateway/routes.py`:",
        "",
        "| class | routes | who |",
        "|---|---|---|",
    ]
    for kind in Kind:
        routes = [r for r in ROUTES if r.kind is kind]
        if kind in LISTED:
            cell = f"{len(routes)}: " + ", ".join(_label(r) for r in routes)
        else:
            cell = f"{len(routes)} (`python -m serving.gateway.routes` lists them)"
        lines.append(f"| {kind.value} | {table_cell(cell)} | {table_cell(WHO[kind])} |")
    body = len([p for p, rule in RULES.items() if rule.model])
    lines += [
        "",
        f"The input policy reads the body of {body} inference routes with the vLLM request "
        "model named beside each (under `vllm.entrypoints`).",
    ]
    return "\n".join(lines) + "\n"
