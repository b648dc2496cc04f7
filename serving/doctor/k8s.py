"""Reading API objects (the JSON the API server returns): quantities, conditions, times,
label and field selectors, taints and tolerations, node selectors and affinity."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

Obj = dict[str, Any]

GiB = Decimal(1024**3)
GB = Decimal(10**9)


def dig(obj: Any, *path: str | int, default: Any = None) -> Any:
    for key in path:
        if isinstance(obj, dict):
            obj = obj.get(key)
        elif isinstance(obj, list) and isinstance(key, int) and -len(obj) <= key < len(obj):
            obj = obj[key]
        else:
            return default
        if obj is None:
            return default
    return obj


def name(obj: Obj) -> str:
    return dig(obj, "metadata", "name", default="?")


def namespace(obj: Obj) -> str | None:
    return dig(obj, "metadata", "namespace")


def labels(obj: Obj) -> dict[str, str]:
    return dig(obj, "metadata", "labels", default={}) or {}


def quantity(value: Any) -> Decimal | None:
    if value is None or value == "":
        return None
    try:
        return parse_quantity(value)
    except ValueError:
        return None


def gib(value: Decimal | None) -> str:
    if value is None:
        return "?"
    return f"{value / GiB:.0f}Gi" if value >= GiB else f"{value / 1024**2:.0f}Mi"


def gb(value: Decimal | None) -> str:
    return "?" if value is None else f"{value / GB:,.0f} GB"


def condition(obj: Obj, kind: str) -> Obj | None:
    for cond in dig(obj, "status", "conditions", default=[]) or []:
        if cond.get("type") == kind:
            return cond
    return None


def is_true(obj: Obj, kind: str) -> bool:
    cond = condition(obj, kind)
    return bool(cond) and cond.get("status") == "True"


def timestamp(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def age(since: datetime | None, now: datetime) -> str:
    if since is None:
        return "?"
    seconds = max(0, int((now - since).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
    return f"{seconds // 86400}d"


def utcnow() -> datetime:
    return datetime.now(UTC)


# Label selectors: the equality and existence forms (`a=b,c!=d,e,!f`) the doctor uses.
def matches_label_selector(obj: Obj, selector: str | None) -> bool:
    if not selector:
        return True
    have = labels(obj)
    for term in (t.strip() for t in selector.split(",")):
        if not term:
            continue
        if "!=" in term:
            key, value = term.split("!=", 1)
            if have.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if have.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in have:
                return False
        elif term not in have:
            return False
    return True


def matches_field_selector(obj: Obj, selector: str | None) -> bool:
    if not selector:
        return True
    for term in (t.strip() for t in selector.split(",")):
        negate = "!=" in term
        path, value = term.split("!=" if negate else "=", 1)
        have = dig(obj, *path.strip().split("."), default="")
        if (str(have) == value.strip()) == negate:
            return False
    return True


# Taints and tolerations, as the scheduler matches them (k8s.io/api/core/v1 toleration.go).
def tolerates(toleration: Obj, taint: Obj) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    if toleration.get("operator") == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def blocking_taints(node: Obj, tolerations: list[Obj]) -> list[Obj]:
    """NoSchedule/NoExecute taints that no toleration covers (PreferNoSchedule only scores)."""
    return [
        taint
        for taint in dig(node, "spec", "taints", default=[]) or []
        if taint.get("effect") in ("NoSchedule", "NoExecute")
        and not any(tolerates(t, taint) for t in tolerations)
    ]


def taint_text(taint: Obj) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"


def _expression_matches(have: dict[str, str], expr: Obj) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return have.get(key) in values
    if op == "NotIn":
        return have.get(key) not in values
    if op == "Exists":
        return key in have
    if op == "DoesNotExist":
        return key not in have
    if op in ("Gt", "Lt") and key in have and values:
        try:
            left, right = int(have[key]), int(values[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def node_selection_problem(node: Obj, pod_spec: Obj) -> str | None:
    """Why the pod's nodeSelector / required node affinity excludes the node, or None."""
    have = labels(node)
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if have.get(key) != value:
            return f"label {key}={value} missing (nodeSelector)"
    terms = dig(
        pod_spec,
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
        default=[],
    )
    if not terms:
        return None
    fields = {"metadata.name": name(node)}
    for term in terms:
        exprs_ok = all(_expression_matches(have, e) for e in term.get("matchExpressions") or [])
        fields_ok = all(_expression_matches(fields, e) for e in term.get("matchFields") or [])
        if exprs_ok and fields_ok:
            return None
    return "required node affinity does not match"


def node_ready(node: Obj) -> bool:
    return is_true(node, "Ready")


def arch(node: Obj) -> str:
    return dig(node, "status", "nodeInfo", "architecture") or labels(node).get(
        "kubernetes.io/arch", "?"
    )


# Events: core/v1 (`kubectl get events`) and events.k8s.io/v1 spell the same things apart.
def event_object(event: Obj) -> tuple[str | None, str | None]:
    ref = event.get("involvedObject") or event.get("regarding") or {}
    return ref.get("kind"), ref.get("name")


def event_message(event: Obj) -> str:
    return (event.get("message") or event.get("note") or "").strip()


def event_time(event: Obj) -> datetime | None:
    for value in (
        event.get("lastTimestamp"),
        dig(event, "series", "lastObservedTime"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        dig(event, "metadata", "creationTimestamp"),
    ):
        when = timestamp(value)
        if when:
            return when
    return None


def image_tag(image: str) -> str | None:
    if "@" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def semver(text: str | None) -> tuple[int, int, int] | None:
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not match:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)
